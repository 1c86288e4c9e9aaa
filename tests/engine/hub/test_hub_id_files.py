"""A GGUF repository's file by its pattern or quantization tag, and every verb that opens a model by its Hub id once
pulled (generate, eval, serve, export, train --base), offline, against the local Hub server (tests/hub_server.py): the
Hub is never asked again after the pull. `--file '*Q8_0.gguf'` and `:Q8_0` pick the same file; a pattern or tag that
names several files, none, or a repository not pulled: one line each, naming the files or the pull command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from desktop_app.cli import main
from desktop_app.engine.errors import UserError
from desktop_app.engine.model.hub_cache import (
    cache_repo_of,
    cached_model_path,
    quant_tag,
    resolve_model_reference,
)

GGUF_REPO = "tiny-org/tiny-chat-GGUF"


def pull(capsys, *argv: str) -> Path:
    assert main(["models", "pull", *argv]) == 0, capsys.readouterr().err
    return Path(capsys.readouterr().out.strip().splitlines()[-1])


def offline(hub_server, monkeypatch) -> int:
    """From here on the Hub is out of reach: the app's network setting is off and huggingface_hub is offline. Returns
    the number of requests the server has answered, to prove none came after."""
    monkeypatch.setenv("AZR_NETWORK", "off")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return len(hub_server.settled())


def error_line(capsys, argv: list[str]) -> str:
    """The verb's one error line (exit 2, no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def both_quants(hub_server, capsys, monkeypatch) -> Path:
    """The GGUF repository with both its files (Q8_0, F16) in the cache; the Hub out of reach afterwards."""
    snapshot = pull(capsys, GGUF_REPO, "--file", "*.gguf")
    assert sorted(p.name for p in snapshot.glob("*.gguf")) == ["tiny-chat-F16.gguf", "tiny-chat-Q8_0.gguf"]
    offline(hub_server, monkeypatch)
    return snapshot


# --- picking one file -------------------------------------------------------------------------------------------

def test_a_pattern_and_a_tag_pick_the_same_file_in_any_case(both_quants):
    q8, f16 = both_quants / "tiny-chat-Q8_0.gguf", both_quants / "tiny-chat-F16.gguf"
    assert resolve_model_reference(GGUF_REPO, "*Q8_0.gguf") == q8
    assert resolve_model_reference(GGUF_REPO, "*q8_0*") == q8  # any case, as the tag
    assert resolve_model_reference(f"{GGUF_REPO}:Q8_0", "") == q8
    assert resolve_model_reference(f"{GGUF_REPO}:f16") == f16
    assert resolve_model_reference(f"hf.co/{GGUF_REPO}:F16") == f16  # Ollama's spelling


def test_a_tag_names_a_whole_quantization_not_a_part_of_one(hub_server, capsys, monkeypatch, both_quants):
    data = {p.name: p.read_bytes() for p in both_quants.glob("*.gguf")}
    q8 = data["tiny-chat-Q8_0.gguf"]
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("AZR_NETWORK", "on")
    hub_server.add_repo("tiny-org/quants-GGUF", {"m-Q4_K.gguf": q8, "m-Q4_K_M.gguf": q8, "m-IQ4_XS.gguf": q8})
    snapshot = pull(capsys, "tiny-org/quants-GGUF", "--file", "*.gguf")
    offline(hub_server, monkeypatch)
    assert cached_model_path("tiny-org/quants-GGUF:Q4_K") == snapshot / "m-Q4_K.gguf"  # not Q4_K_M
    assert cached_model_path("tiny-org/quants-GGUF:q4_k_m") == snapshot / "m-Q4_K_M.gguf"
    assert cached_model_path("tiny-org/quants-GGUF:Q4_XS") == snapshot / "m-IQ4_XS.gguf"  # a part, when no whole one
    with pytest.raises(UserError, match=r"names several GGUF files .*m-Q4_K\.gguf, m-Q4_K_M\.gguf"):
        cached_model_path("tiny-org/quants-GGUF", file="m-Q4_K*")


def test_a_file_cached_in_two_revisions_is_one_file_not_several(both_quants):
    q8 = both_quants / "tiny-chat-Q8_0.gguf"
    older = both_quants.parent / ("0" * 40)
    shutil.copytree(both_quants, older, symlinks=True)  # an earlier revision of the repository, still cached
    assert resolve_model_reference(f"{GGUF_REPO}:Q8_0") in (q8, older / q8.name)  # one file, not "several"
    assert resolve_model_reference(GGUF_REPO, "*F16.gguf").name == "tiny-chat-F16.gguf"


def test_the_file_names_say_their_quantization_and_cache_paths_their_repository():
    assert quant_tag("Llama-3.2-1B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant_tag("qwen2.5-0.5b-instruct-q8_0.gguf") == "Q8_0"
    assert quant_tag("model.IQ4_XS.gguf") == "IQ4_XS" and quant_tag("model-bf16.gguf") == "BF16"
    assert quant_tag("model.gguf") == ""
    assert cache_repo_of("/c/hub/models--tiny-org--tiny-chat/snapshots/abc/config.json") == "tiny-org/tiny-chat"
    assert cache_repo_of("/c/hub/models--tiny-org--tiny-chat/blobs/0123") == "tiny-org/tiny-chat"
    assert cache_repo_of("/home/me/models/tiny-chat") == "" and cache_repo_of("models--x/snapshots") == ""


# --- every mistake in one line ----------------------------------------------------------------------------------

def test_several_files_and_no_choice_is_one_line_with_the_tag_and_pattern_forms(both_quants, capsys):
    line = error_line(capsys, ["generate", GGUF_REPO, "--prompt", "hi"])
    assert "several GGUF files" in line and "tiny-chat-F16.gguf" in line and "tiny-chat-Q8_0.gguf" in line
    assert f"{GGUF_REPO}:QUANT" in line and "--file" in line
    line = error_line(capsys, ["generate", GGUF_REPO, "--file", "*.gguf", "--prompt", "hi"])
    assert "names several GGUF files" in line and "tiny-chat-F16.gguf, tiny-chat-Q8_0.gguf" in line


def test_a_pattern_or_tag_that_names_no_cached_file_gives_the_files_and_the_pull_command(both_quants, capsys):
    line = error_line(capsys, ["generate", GGUF_REPO, "--file", "*Q4_K_M.gguf", "--prompt", "hi"])
    assert "names no GGUF file" in line and "tiny-chat-F16.gguf, tiny-chat-Q8_0.gguf" in line
    assert f"models pull {GGUF_REPO} --file '*Q4_K_M.gguf'" in line
    line = error_line(capsys, ["export", f"{GGUF_REPO}:Q4_K_M", "--format", "hf", "--out", "x"])
    assert "names no GGUF file" in line and f"models pull {GGUF_REPO} --file '*Q4_K_M*.gguf'" in line


def test_a_repository_not_pulled_gives_the_pull_command_with_its_pattern(hub_server, capsys, monkeypatch):
    offline(hub_server, monkeypatch)
    line = error_line(capsys, ["generate", "tiny-org/never-pulled-GGUF", "--file", "*Q4_K_M.gguf", "--prompt", "hi"])
    assert "not in the Hugging Face cache" in line
    assert "`python -m desktop_app models pull tiny-org/never-pulled-GGUF --file '*Q4_K_M.gguf'`" in line
    line = error_line(capsys, ["serve", "tiny-org/never-pulled", "--port", "0"])
    assert "`python -m desktop_app models pull tiny-org/never-pulled`" in line
    line = error_line(capsys, ["eval", "tiny-org/never-pulled", "--world", "mini", "--per-type", "1"])
    assert "`python -m desktop_app models pull tiny-org/never-pulled`" in line


def test_a_pattern_needs_a_hub_id_and_not_a_tag_as_well(both_quants, capsys, tmp_path):
    local = tmp_path / "model.gguf"
    shutil.copyfile(both_quants / "tiny-chat-Q8_0.gguf", local)
    line = error_line(capsys, ["generate", str(local), "--file", "*.gguf", "--prompt", "hi"])
    assert "is a local path" in line and "name the .gguf file itself" in line
    line = error_line(capsys, ["generate", "./not/here", "--file", "*.gguf", "--prompt", "hi"])
    assert "is not a Hub id" in line
    line = error_line(capsys, ["generate", f"{GGUF_REPO}:Q8_0", "--file", "*F16.gguf", "--prompt", "hi"])
    assert "by the tag Q8_0 already" in line
    assert "--file goes with MODEL" in error_line(capsys, ["serve", "--file", "*.gguf", "--port", "0"])
    line = error_line(capsys, ["train", "--dataset", str(tmp_path), "--file", "*.gguf", "--out", str(tmp_path / "r")])
    assert "--file go with --base" in line


# --- every verb, offline ----------------------------------------------------------------------------------------

def test_generate_takes_the_file_by_pattern_and_by_tag(both_quants, hub_server, capsys):
    before = len(hub_server.settled())
    texts = []
    for argv in ([GGUF_REPO, "--file", "*Q8_0.gguf"], [f"{GGUF_REPO}:q8_0"]):
        code = main(["generate", *argv, "--prompt", "the cat", "--max-new-tokens", "4", "--temperature", "0",
                     "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        texts.append(json.loads(captured.out.strip().splitlines()[-1])["token_ids"])
    assert texts[0] == texts[1] and len(hub_server.settled()) == before  # the same file; the Hub never asked


def test_serve_eval_and_export_open_the_model_by_its_id(both_quants, hub_server, capsys, tmp_path):
    from desktop_app.engine.model.folders import resolve_model_folder
    from desktop_app.server.serving import load_served

    served = load_served(f"{GGUF_REPO}:Q8_0", device="cpu")
    assert served.id == "tiny-chat-GGUF-Q8_0" and served.loaded.kind == "gguf"
    served = load_served(str(resolve_model_reference(GGUF_REPO, "*F16.gguf")), device="cpu")  # serve --file
    assert served.id == "tiny-chat-F16.gguf"  # the file's name, not its blob's hash
    assert resolve_model_folder(f"{GGUF_REPO}:F16")[1:] == ("gguf", "tiny-chat-F16.gguf")
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "the cat", "answer": "sat"}) + "\n")
    code = main(["eval", f"{GGUF_REPO}:Q8_0", "--qa", str(qa), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    row = json.loads(captured.out.strip().splitlines()[0])
    assert row["kind"] == "gguf" and row["name"] == "tiny-chat-Q8_0.gguf" and "qa_accuracy" in row
    code = main(["export", GGUF_REPO, "--file", "*F16.gguf", "--format", "hf", "--out", str(tmp_path / "hf")])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "hf" / "config.json").is_file()
    assert not list(both_quants.glob("evaluations.json"))  # nothing written into the cache


def test_a_pulled_folder_is_named_by_its_repository(hub_server, capsys, monkeypatch):
    from desktop_app.engine.model.folders import resolve_model_folder
    from desktop_app.server.state import model_id_for

    folder = pull(capsys, "tiny-org/tiny-chat")
    offline(hub_server, monkeypatch)
    assert resolve_model_folder("tiny-org/tiny-chat") == (folder, "hf", "tiny-org/tiny-chat")
    assert resolve_model_folder(folder)[2] == "tiny-org/tiny-chat"  # its snapshot path: not the commit hash
    assert model_id_for(folder) == model_id_for("tiny-org/tiny-chat") == "tiny-chat"


def test_train_base_takes_a_gguf_file_by_pattern_and_records_the_file_of_the_repository(both_quants, capsys,
                                                                                          tmp_path):
    from desktop_app.engine.model.folders import resolve_base
    from desktop_app.engine.specs import RunConfig

    chats = [{"messages": [{"role": "user", "content": f"repeat {w}"}, {"role": "assistant", "content": w}]}
             for w in ("cat", "dog", "mat", "park") * 2]
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in chats))
    out = tmp_path / "run"
    code = main(["train", "--method", "lora", "--base", GGUF_REPO, "--file", "*q8_0.gguf", "--data", str(data),
                 "--steps", "1", "--batch-size", "2", "--out", str(out), "--json"])
    assert code == 0, capsys.readouterr().err
    recorded = RunConfig.load(out / "run.json").base_model
    assert recorded == str(both_quants / "tiny-chat-Q8_0.gguf")  # repository, revision and file; not a blob hash
    assert cache_repo_of(recorded) == GGUF_REPO
    assert resolve_base(recorded).kind == "gguf"
    assert main(["train", "--resume", str(out), "--json"]) == 0, capsys.readouterr().err  # offline, the same file
    capsys.readouterr()
    line = error_line(capsys, ["train", "--method", "lora", "--base", GGUF_REPO, "--data", str(data),
                               "--out", str(tmp_path / "run2")])
    assert "several GGUF files" in line and not (tmp_path / "run2").exists()


def test_allow_download_fetches_only_the_file_a_tag_names(hub_server, capsys, tmp_path):
    """One quantization cached, another asked for: --allow-download pulls just that file; without it, one line."""
    from desktop_app.engine.specs import RunConfig

    pull(capsys, GGUF_REPO, "--file", "*F16.gguf")
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"repeat {w}"},
                                                     {"role": "assistant", "content": w}]}) + "\n"
                            for w in ("cat", "dog", "mat", "park")))
    argv = ["train", "--method", "lora", "--base", f"{GGUF_REPO}:Q8_0", "--data", str(data), "--steps", "1",
            "--batch-size", "2", "--json"]
    line = error_line(capsys, [*argv, "--out", str(tmp_path / "refused")])
    assert "names no GGUF file" in line and "--allow-download" in line and not (tmp_path / "refused").exists()
    assert main([*argv, "--allow-download", "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    recorded = Path(RunConfig.load(tmp_path / "run" / "run.json").base_model)
    assert recorded.name == "tiny-chat-Q8_0.gguf" and cache_repo_of(recorded) == GGUF_REPO
    assert sorted(p.name for p in recorded.parent.glob("*.gguf")) == ["tiny-chat-F16.gguf", "tiny-chat-Q8_0.gguf"]
