"""What the Hugging Face cache holds, listed offline and at once after a pull: the snapshot folder the app's loaders
open for chat and as a LoRA base, and each GGUF file; half-downloaded and unusable snapshots are not listed."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

from desktop_app.engine.events import Controls
from desktop_app.engine.hub.download import DownloadFinished, DownloadProgress, pull
from desktop_app.engine.model.hub_cache import cached_models, hub_cache_dir

REPO, GGUF_REPO = "tiny-org/tiny-chat", "tiny-org/tiny-chat-GGUF"


def pulled(repo_id: str, patterns: list[str] | None = None) -> Path:
    return Path(next(e for e in pull(repo_id, patterns) if isinstance(e, DownloadFinished)).folder)


def test_an_empty_or_missing_cache_lists_nothing(tmp_path):
    assert cached_models(tmp_path / "nowhere") == []
    assert cached_models(tmp_path) == []


def test_the_cache_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"


def test_pulled_models_are_listed_offline_newest_first_and_open(hub_server):
    folder = pulled(REPO)
    gguf = pulled(GGUF_REPO, ["*Q8_0.gguf"])
    hub_server.stop()  # listing and opening need no network
    found = cached_models()
    assert [(m.repo_id, m.kind, m.path) for m in found] == [(GGUF_REPO, "gguf", gguf), (REPO, "hf", folder)]
    assert found[1].revision == hub_server.repos[REPO].sha and found[1].size > 2_000_000
    assert found[0].size == gguf.stat().st_size

    from desktop_app.engine.finetune.base_model import load_base
    from desktop_app.engine.model.folders import resolve_base
    from desktop_app.engine.model.loading import load_model

    chat = load_model(found[1].path, device="cpu")
    assert chat.tokenizer.chat_template and chat.kind == "hf"
    base = resolve_base(found[1].path)
    assert base.kind == "hf" and base.model_type == "llama"
    assert load_base(base, torch.device("cpu")).model.num_parameters() == hub_server.repos[REPO].parameters
    assert load_model(found[0].path, device="cpu").kind == "gguf"


def test_a_half_downloaded_model_is_not_listed(hub_server):
    hub_server.slow(1_000_000)
    controls = Controls()
    for event in pull(REPO, controls=controls):
        if isinstance(event, DownloadProgress) and event.done > 300_000:
            threading.Timer(0, controls.stop.set).start()
    assert list(Path(os.environ["HF_HUB_CACHE"]).rglob("*.incomplete"))
    assert cached_models() == []


def test_a_snapshot_without_weights_or_with_remote_code_is_not_listed(hub_server):
    pulled("tiny-org/remote-code", ["*"])
    pulled(REPO, ["config.json", "tokenizer.json"])
    assert cached_models() == []
