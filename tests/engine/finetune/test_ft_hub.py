"""A Hugging Face Hub id as the base: refused with a clear message unless the user says --allow-download; with
it, the model is fetched once (configs, safetensors, tokenizer; never pickles) and the run records the local
folder, so it resumes offline. The Hub is the tests' local server (the hub_server fixture: no internet)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ft_helpers import make_base, repeat_chats, write_jsonl

from desktop_app.cli import main
from desktop_app.engine.errors import UserError
from desktop_app.engine.finetune.base_model import download_base
from desktop_app.engine.model.folders import looks_like_hub_id, resolve_base
from desktop_app.engine.specs import RunConfig


def test_hub_ids_and_paths_are_told_apart(tmp_path):
    assert looks_like_hub_id("Qwen/Qwen2.5-0.5B") and looks_like_hub_id("org/name_1")
    assert not looks_like_hub_id("./org/name") and not looks_like_hub_id("/abs/path")
    assert not looks_like_hub_id("a/b/c") and not looks_like_hub_id("name")
    with pytest.raises(UserError, match=r"not in the Hugging Face cache.*models pull someorg/somemodel.*--allow"):
        resolve_base("someorg/somemodel")


def test_cli_refuses_a_hub_id_without_allow_download(tmp_path, capsys):
    data = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(8))
    out = tmp_path / "run"
    code = main(["train", "--method", "sft", "--base", "someorg/somemodel", "--data", str(data), "--out", str(out)])
    assert code == 2 and "--allow-download" in capsys.readouterr().err
    assert not out.exists()
    assert main(["train", "--dataset", str(tmp_path), "--allow-download", "--out", str(out)]) == 2
    assert "--allow-download goes with --base" in capsys.readouterr().err


def test_allow_download_fetches_once_and_records_the_local_folder(tmp_path, hub_server):
    local = make_base(tmp_path / "source", "llama")
    files = {p.name: p for p in local.iterdir() if p.is_file()}
    hub_server.add_repo("someorg/tiny", {**files, "pytorch_model.bin": b"pickled weights are never fetched"})
    data = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(8))
    out = tmp_path / "run"
    assert main(["train", "--method", "lora", "--base", "someorg/tiny", "--allow-download", "--data", str(data),
                 "--steps", "1", "--batch-size", "2", "--out", str(out), "--json"]) == 0
    fetched = {r.path.rsplit("/", 1)[-1] for r in hub_server.requests if r.method == "GET" and "/resolve/" in r.path}
    assert "model.safetensors" in fetched and "config.json" in fetched
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in fetched)  # no pickled weights
    recorded = Path(RunConfig.load(out / "run.json").base_model)
    assert recorded == download_base("someorg/tiny").resolve() and (recorded / "model.safetensors").is_file()
    assert hub_server.fetched("model.safetensors") == (local / "model.safetensors").stat().st_size  # once


def test_a_failed_download_says_why(hub_server):
    hub_server.stop()  # nothing answers: the connection is refused
    with pytest.raises(UserError, match=r"could not reach the Hugging Face Hub for someorg/x .*: check the connection"):
        download_base("someorg/x")
    with pytest.raises(UserError, match="not a Hugging Face Hub id"):
        download_base("../x")
