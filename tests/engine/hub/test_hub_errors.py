"""Every way a pull or a search can go wrong, for real against the local Hub: a gated repository (then the token via
HF_TOKEN), a missing one, a dropped connection (then resume), a full disk (checked before, and met mid-download:
ENOSPC and EFBIG), the network switched off (no request at all). Each is one sentence that says what to do, and
nothing already fetched is lost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from hub_server import TOKEN

from desktop_app.engine.errors import UserError
from desktop_app.engine.hub import download, network
from desktop_app.engine.hub.details import repo_details
from desktop_app.engine.hub.download import CHUNK_BYTES, DownloadFinished, plan_pull, pull
from desktop_app.engine.hub.errors import (
    ConnectionLost,
    NetworkOff,
    NoMatchingFiles,
    NotEnoughDisk,
    RepoGated,
    RepoMissing,
)
from desktop_app.engine.hub.search import search_models

REPO, GGUF_REPO, GATED = "tiny-org/tiny-chat", "tiny-org/tiny-chat-GGUF", "tiny-org/gated"
WEIGHTS = "model.safetensors"


def cache() -> Path:
    return Path(os.environ["HF_HUB_CACHE"])


def partials() -> list[Path]:
    return list(cache().rglob("*.incomplete"))


@pytest.fixture
def no_retry_pause(monkeypatch):
    """huggingface_hub waits a second before each of its 5 retries of a broken transfer: not in tests."""
    fake = types.SimpleNamespace(sleep=lambda s: None, time=time.time, monotonic=time.monotonic)
    monkeypatch.setattr("huggingface_hub.file_download.time", fake)


def test_a_gated_repository_says_what_to_do_then_works_with_a_token(hub_server, monkeypatch):
    with pytest.raises(RepoGated) as caught:
        plan_pull(GATED)  # before any plan is shown: the Hub tells a gated repository's files to anyone
    assert not [r for r in hub_server.requests if r.method == "GET" and "/resolve/" in r.path]
    assert str(caught.value) == (f"{GATED} is gated: accept its licence at https://huggingface.co/{GATED}, then "
                                 "log in with `hf auth login` (your token stays in huggingface_hub's own store)")
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # what `hf auth login` would store: huggingface_hub reads it itself
    end = next(e for e in pull(GATED) if isinstance(e, DownloadFinished))
    assert end.verified and (Path(end.folder) / WEIGHTS).is_file()


def test_a_missing_repository_and_unmatched_patterns_are_named(hub_server):
    with pytest.raises(RepoMissing, match="no model tiny-org/nope on the Hugging Face Hub: check the name"):
        list(pull("tiny-org/nope"))
    with pytest.raises(NoMatchingFiles, match=r"--file '\*Q9\*.gguf' matches no file of tiny-org/tiny-chat-GGUF; "
                                              r"its GGUF files are: tiny-chat-Q8_0.gguf, tiny-chat-F16.gguf"):
        list(pull(GGUF_REPO, ["*Q9*.gguf"]))
    with pytest.raises(NoMatchingFiles, match="no safetensors weights to pull: choose one GGUF file with --file"):
        plan_pull(GGUF_REPO)
    assert hub_server.fetched() == 0


@pytest.mark.parametrize("bad", ["tiny-chat", "../tiny-org/x", "a/b/c", ""])
def test_what_is_not_a_repository_id_is_refused_before_any_request(hub_server, bad):
    for call in (lambda: repo_details(bad), lambda: list(pull(bad))):
        with pytest.raises(UserError, match="is not a Hugging Face Hub model id: write it as organisation/name"):
            call()
    assert hub_server.requests == []


def test_a_dropped_connection_is_retried_within_the_pull(hub_server, no_retry_pause):
    hub_server.drop_after(1_000_000)
    end = next(e for e in pull(REPO) if isinstance(e, DownloadFinished))
    size = len(hub_server.repos[REPO].files[WEIGHTS])
    gets = [r for r in hub_server.requests if r.method == "GET" and r.path.endswith(WEIGHTS)]
    assert gets[0].sent == 1_000_000 and gets[1].range == f"bytes={3 * CHUNK_BYTES}-" and end.verified
    assert hub_server.fetched(WEIGHTS) <= size + CHUNK_BYTES


def test_a_lost_connection_says_so_and_pulling_again_resumes(hub_server, no_retry_pause):
    hub_server.drop_after(600_000)
    hub_server.drop_after(0, times=5)  # the library's five retries get nothing either
    with pytest.raises(ConnectionLost) as caught:
        list(pull(REPO))
    assert str(caught.value).startswith("the connection to the Hub was lost after ")
    assert str(caught.value).endswith("; pull again to resume from there")
    [partial] = partials()
    assert partial.stat().st_size == 2 * CHUNK_BYTES  # whole chunks kept
    plan = plan_pull(REPO)
    missing = plan.total - plan.have
    before = len(hub_server.settled())
    end = next(e for e in pull(REPO) if isinstance(e, DownloadFinished))
    fetched = sum(r.sent for r in hub_server.requests[before:] if r.method == "GET")
    assert end.fetched == fetched <= missing + CHUNK_BYTES and end.verified and not partials()
    assert [r.range for r in hub_server.requests[before:] if r.path.endswith(WEIGHTS) and r.method == "GET"] == \
        [f"bytes={2 * CHUNK_BYTES}-"]


def test_not_enough_disk_is_said_before_any_byte(hub_server, monkeypatch):
    real = download.shutil.disk_usage

    def nearly_full(path):
        return real(path)._replace(free=1_000_000)

    monkeypatch.setattr(download.shutil, "disk_usage", nearly_full)
    with pytest.raises(NotEnoughDisk, match=r"tiny-org/tiny-chat needs 2\.8 MB more but only 1\.0 MB is free in "
                                            r".*: free space or choose a smaller file"):
        list(pull(REPO))
    assert hub_server.fetched() == 0
    with pytest.raises(NotEnoughDisk):  # 140 GB of weights never fit
        plan_pull("big-org/Llama-70B-chat")


def test_a_disk_that_fills_up_mid_download_keeps_what_was_fetched(hub_server):
    """ENOSPC from the kernel: the partial blob is /dev/full, which refuses every write."""
    plan = plan_pull(REPO)
    blob = plan.blob(WEIGHTS)
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.with_name(blob.name + ".incomplete").symlink_to("/dev/full")
    with pytest.raises(NotEnoughDisk, match="free space or choose a smaller file"):
        list(pull(REPO))
    assert blob.with_name(blob.name + ".incomplete").is_symlink() and not blob.exists()


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as Linux has them")
def test_a_file_size_limit_mid_download_is_said_and_the_partial_file_stays(hub_server):
    """EFBIG for real: a process whose files may not grow beyond 1 MB (setrlimit), as on a FAT32 disk."""
    script = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))\n"
        "from desktop_app.engine.errors import UserError\n"
        "from desktop_app.engine.hub.download import pull\n"
        "try:\n"
        f"    list(pull({REPO!r}))\n"
        "except UserError as exc:\n"
        "    print(type(exc).__name__, exc)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.stdout.startswith("NotEnoughDisk tiny-org/tiny-chat has a file larger than "), done.stderr[-2000:]
    assert "move the Hugging Face cache (HF_HOME) to another disk or choose a smaller file" in done.stdout
    [partial] = partials()
    kept = partial.stat().st_size
    assert 0 < kept <= 1_000_000
    end = next(e for e in pull(REPO) if isinstance(e, DownloadFinished))  # without the limit: resumes
    assert end.verified and end.fetched <= len(hub_server.repos[REPO].files[WEIGHTS]) - kept + 64_000


def test_network_off_sends_nothing(hub_server, monkeypatch):
    network.set_network_allowed(False)
    assert not network.network_allowed()
    for call in (lambda: search_models("tiny"), lambda: repo_details(REPO), lambda: list(pull(REPO))):
        with pytest.raises(NetworkOff, match=r"network features are off \(the app's setting"):
            call()
    network.set_network_allowed(True)
    monkeypatch.setenv("AZR_NETWORK", "off")
    with pytest.raises(NetworkOff, match=r"AZR_NETWORK=off in the environment\); unset it") as caught:
        search_models("tiny")
    assert caught.value.by_environment and not network.network_allowed()
    assert hub_server.requests == []
    monkeypatch.delenv("AZR_NETWORK")
    assert search_models("tiny")


def test_the_setting_is_remembered_in_the_users_config(hub_server):
    assert network.network_allowed()  # on by default
    network.set_network_allowed(False)
    assert network.settings_file().is_file() and '"network_features": false' in network.settings_file().read_text()
    assert str(network.settings_file()).startswith(os.environ["XDG_CONFIG_HOME"])
    network.set_network_allowed(True)
    assert network.network_allowed()


def test_offline_huggingface_hub_is_lifted_only_for_the_apps_own_calls(hub_server, monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 at import
    assert search_models("tiny")
    assert constants.HF_HUB_OFFLINE is True  # restored once the call ended
    details = repo_details(REPO)
    assert details.context_length == 128  # its config.json came too
    end = next(e for e in pull(GGUF_REPO, ["*Q8_0.gguf"]) if isinstance(e, DownloadFinished))
    assert end.verified and constants.HF_HUB_OFFLINE is True
    network.set_network_allowed(False)  # the setting off: nothing is lifted, nothing is sent
    before = len(hub_server.settled())
    with pytest.raises(NetworkOff):
        search_models("tiny")
    assert len(hub_server.settled()) == before
