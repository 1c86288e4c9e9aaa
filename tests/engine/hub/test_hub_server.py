"""The local Hub (tests/hub_server.py) is a faithful stand-in: the real huggingface_hub client searches it, reads
repository info with file metadata, downloads a snapshot, resumes a cut download with an HTTP Range, and gets its
own exceptions for a missing repository and a gated one."""

from __future__ import annotations

import hashlib
import os
import time
import types
from pathlib import Path

import pytest
from hub_server import TOKEN
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

REPO = "tiny-org/tiny-chat"
WEIGHTS = "model.safetensors"


def test_the_real_client_searches_reads_info_and_downloads(hub_server):
    api = HfApi(endpoint=hub_server.url)
    found = list(api.list_models(search="tiny", pipeline_tag="text-generation", sort="downloads", limit=10,
                                 expand=["downloads", "likes", "safetensors", "gated", "lastModified"]))
    assert [m.id for m in found] == ["tiny-org/tiny-chat", "tiny-org/tiny-chat-GGUF", "tiny-org/gated",
                                     "tiny-org/remote-code"]  # by downloads; the embedder is no text generator
    assert found[0].safetensors.total > 100_000 and found[0].downloads == 500

    info = api.model_info(REPO, files_metadata=True)
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes[WEIGHTS] > 2_000_000 and info.sha and len(info.sha) == 40
    lfs = next(s.lfs for s in info.siblings if s.rfilename == WEIGHTS)
    assert "chat_template" in info.config["tokenizer_config"] and info.card_data["license"] == "apache-2.0"

    folder = Path(snapshot_download(REPO, endpoint=hub_server.url))
    blob = (folder / WEIGHTS).resolve()
    assert blob.name == lfs.sha256 and hashlib.sha256(blob.read_bytes()).hexdigest() == lfs.sha256
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    assert folder.is_relative_to(os.environ["HF_HUB_CACHE"])  # the test's own cache, never the developer's
    assert api.verify_repo_checksums(REPO, revision=info.sha).mismatches == []


def test_a_cut_download_resumes_with_a_range(hub_server, monkeypatch):
    import huggingface_hub.constants as hf_constants

    # The client keeps whole chunks only: with 256 KiB chunks, 3 of them (786432 bytes) survive a cut at 1 MB.
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 256 * 1024)
    no_pause = types.SimpleNamespace(sleep=lambda s: None, time=time.time, monotonic=time.monotonic)
    monkeypatch.setattr("huggingface_hub.file_download.time", no_pause)  # its pause before retrying
    hub_server.drop_after(1_000_000)
    path = Path(hf_hub_download(REPO, WEIGHTS, endpoint=hub_server.url))
    size = path.stat().st_size
    gets = [r for r in hub_server.requests if r.method == "GET" and r.path.endswith(WEIGHTS)]
    assert [g.range for g in gets] == ["", "bytes=786432-"]
    assert gets[0].sent == 1_000_000 and gets[1].sent == size - 786432 and gets[1].status == 206


def test_missing_and_gated_repositories_raise_the_clients_own_errors(hub_server, monkeypatch):
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("tiny-org/nothing-here", "config.json", endpoint=hub_server.url)
    with pytest.raises(GatedRepoError):
        hf_hub_download("tiny-org/gated", "config.json", endpoint=hub_server.url)
    assert HfApi(endpoint=hub_server.url).model_info("tiny-org/gated").gated == "manual"
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert Path(hf_hub_download("tiny-org/gated", "config.json", endpoint=hub_server.url)).is_file()
    assert HfApi(endpoint=hub_server.url).whoami()["name"] == "local-tester"


def test_knobs_slow_tamper_and_the_request_log(hub_server):
    hub_server.tamper(REPO, "config.json")
    hub_server.slow(2_000_000)
    start = time.monotonic()
    path = Path(hf_hub_download(REPO, WEIGHTS, endpoint=hub_server.url))
    assert time.monotonic() - start >= 0.8 * path.stat().st_size / 2_000_000
    hub_server.slow(0)
    config = Path(hf_hub_download(REPO, "config.json", endpoint=hub_server.url)).read_bytes()
    assert config != hub_server.repos[REPO].files["config.json"]  # same length, other bytes
    assert len(config) == len(hub_server.repos[REPO].files["config.json"])
    assert hub_server.fetched(WEIGHTS) == path.stat().st_size
    assert {r.method for r in hub_server.requests} == {"HEAD", "GET"}


def test_the_tiny_chat_model_opens_with_the_apps_loaders(hub_server):
    from desktop_app.engine.finetune.base_model import load_base
    from desktop_app.engine.model.folders import resolve_base
    from desktop_app.engine.model.loading import load_model

    folder = Path(snapshot_download(REPO, endpoint=hub_server.url))
    loaded = load_model(folder, device="cpu")
    from desktop_app.engine.data.chat import CHATML_TEMPLATE

    assert loaded.tokenizer.chat_template == CHATML_TEMPLATE and loaded.model.config.model_type == "llama"
    text = loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                                add_generation_prompt=True)
    assert "hi" in text
    import torch

    base = load_base(resolve_base(folder), torch.device("cpu"))
    assert base.model.num_parameters() == hub_server.repos[REPO].parameters
    assert resolve_base(folder).kind == "hf"  # a plain Hugging Face folder, as from the Hub
