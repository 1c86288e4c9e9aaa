"""Models by their Hub id everywhere: once pulled, `generate`, `export`, `train --base` (and everything that loads a
model: eval, serve) take ORG/NAME from the Hugging Face cache offline, and a GGUF repository's file as ORG/NAME:QUANT
(or Ollama's hf.co/ORG/NAME:QUANT). Not in the cache, or a tag that names no single file: one line that says what to
do. A local folder that happens to look like ORG/NAME stays the local folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from desktop_app.cli import main
from desktop_app.engine.errors import UserError
from desktop_app.engine.model.hub_cache import cached_model_path, hub_reference


def pull(capsys, *argv: str) -> Path:
    assert main(["models", "pull", *argv]) == 0, capsys.readouterr().err
    return Path(capsys.readouterr().out.strip().splitlines()[-1])


def offline(monkeypatch) -> None:
    """From here on the Hub is out of reach, as on a plane: the app's own network setting is off."""
    monkeypatch.setenv("AZR_NETWORK", "off")


def test_references_people_write_are_read_and_paths_are_not():
    assert hub_reference("tiny-org/tiny-chat") == ("tiny-org/tiny-chat", "")
    assert hub_reference("tiny-org/tiny-chat-GGUF:Q8_0") == ("tiny-org/tiny-chat-GGUF", "Q8_0")
    assert hub_reference("hf.co/tiny-org/tiny-chat-GGUF:q4_k_m") == ("tiny-org/tiny-chat-GGUF", "q4_k_m")
    for path in ("./a/b", "/abs/a", "~/a/b", "a/b/c", "model.gguf"):
        assert hub_reference(path) is None


def test_a_pulled_model_generates_and_exports_by_its_id_offline(hub_server, capsys, monkeypatch, tmp_path):
    folder = pull(capsys, "tiny-org/tiny-chat")
    offline(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cached_model_path("tiny-org/tiny-chat") == folder
    code = main(["generate", "tiny-org/tiny-chat", "--prompt", "hello", "--max-new-tokens", "4", "--temperature",
                 "0", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "text" in json.loads(captured.out.strip().splitlines()[-1])
    code = main(["export", "tiny-org/tiny-chat", "--format", "hf", "--out", str(tmp_path / "copy")])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "copy" / "config.json").is_file()


def test_a_gguf_file_by_its_quant_tag_and_the_mistakes_in_one_line(hub_server, capsys, monkeypatch):
    from desktop_app.engine.model.loading import load_model

    q8 = pull(capsys, "tiny-org/tiny-chat-GGUF", "--file", "*Q8_0.gguf")
    offline(monkeypatch)
    assert cached_model_path("tiny-org/tiny-chat-GGUF:Q8_0") == q8
    assert cached_model_path("hf.co/tiny-org/tiny-chat-GGUF:q8_0") == q8  # Ollama's spelling, any case
    assert cached_model_path("tiny-org/tiny-chat-GGUF") == q8  # the one file cached
    assert load_model("tiny-org/tiny-chat-GGUF:Q8_0", device="cpu").kind == "gguf"
    with pytest.raises(UserError) as exc:
        cached_model_path("tiny-org/tiny-chat-GGUF:Q4_K_M")
    assert "names no GGUF file" in str(exc.value) and "tiny-chat-Q8_0.gguf" in str(exc.value)
    with pytest.raises(UserError) as exc:
        cached_model_path("tiny-org/not-pulled")
    text = str(exc.value)
    assert "not in the Hugging Face cache" in text and "models pull tiny-org/not-pulled" in text and "\n" not in text


def test_several_quantizations_need_a_tag(hub_server, capsys, monkeypatch):
    pull(capsys, "tiny-org/tiny-chat-GGUF", "--file", "*.gguf")
    offline(monkeypatch)
    with pytest.raises(UserError, match=r"several GGUF files .* name one as tiny-org/tiny-chat-GGUF:QUANT"):
        cached_model_path("tiny-org/tiny-chat-GGUF")


def test_train_base_takes_the_id_offline_and_records_the_local_folder(hub_server, capsys, monkeypatch, tmp_path):
    from desktop_app.engine.train.request import RunRequest, plan_run

    folder = pull(capsys, "tiny-org/tiny-chat")
    offline(monkeypatch)
    config = plan_run(RunRequest(objective="sft", base_model="tiny-org/tiny-chat", data=["x.jsonl"]))
    assert config.base_model == str(folder)  # run.json names the folder: a resume needs no Hub at all
    code = main(["train", "--method", "lora", "--base", "tiny-org/missing-model", "--data", str(tmp_path / "x.jsonl"),
                 "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "models pull tiny-org/missing-model" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_local_folder_that_looks_like_an_id_stays_the_local_folder(tmp_path, monkeypatch):
    from desktop_app.engine.model.folders import resolve_model_folder

    local = tmp_path / "org" / "name"
    local.mkdir(parents=True)
    (local / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_model_folder("org/name")[0].resolve() == local.resolve()


def test_a_models_name_for_people_is_never_a_commit_hash(tmp_path):
    """A new run's folder is named after its base: a Hub snapshot by its repository's name, not its 40-character
    commit (issue 51 item 8)."""
    from desktop_app.engine.model.hub_cache import model_name

    snapshot = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / ("a1" * 20)
    assert model_name(snapshot) == "SmolLM2-135M-Instruct"
    assert model_name(snapshot / "smollm2-q4_k_m.gguf") == "SmolLM2-135M-Instruct-smollm2-q4_k_m"
    assert model_name(tmp_path / "exports" / "mine.gguf") == "mine"
    assert model_name(tmp_path / "runs" / "lora-run" / "checkpoints" / "step-00000020") == "lora-run-step-00000020"
    assert model_name(tmp_path / "models" / "my-model") == "my-model"
