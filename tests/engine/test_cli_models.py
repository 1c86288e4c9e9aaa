"""`python -m desktop_app models ...` against the local Hub server (tests/hub_server.py, the `hub_server` fixture): the
real huggingface_hub client searches, pulls (resuming after an interrupted subprocess), lists the cache, and every
mistake a person can make ends in one line (exit 2) with nothing half-made left behind."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hub_server import TOKEN

from desktop_app.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["models", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def cache_dir() -> Path:
    from desktop_app.engine.model.hub_cache import hub_cache_dir

    return hub_cache_dir()


def settled(server) -> list:
    """The server's request log once it stops growing: the server writes a line just after its answer, so the client
    may hold the answer a moment before the log holds the line."""
    last, still, deadline = -1, 0, time.monotonic() + 5
    while still < 4 and time.monotonic() < deadline:
        still = still + 1 if len(server.requests) == last else 0
        last = len(server.requests)
        time.sleep(0.05)
    return server.requests


def downloads(server) -> list[str]:
    """The files the server sent (GET .../resolve/... answered with content)."""
    return [r.path.rsplit("/", 1)[-1] for r in settled(server)
            if r.method == "GET" and "/resolve/" in r.path and r.status in (200, 206)]


def fetched(server) -> int:
    settled(server)
    return server.fetched()


def one_error_line(err: str, *, alone: bool = True) -> str:
    """The one error line (the last); `alone`: nothing else was printed (refused before the plan or the bar)."""
    lines = [line for line in err.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:] and "Traceback" not in err and (len(lines) == 1 or not alone), err
    return errors[0]


# --- search --------------------------------------------------------------------------------------------------------

def test_search_prints_a_table_sorted_as_asked_without_other_pipelines(hub_server, capsys):
    code, out, err = run_cli(capsys, "search", "tiny")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["model", "parameters", "downloads"]
    names = [line.split()[0] for line in lines[1:]]
    assert names[:2] == ["tiny-org/tiny-chat", "tiny-org/tiny-chat-GGUF"]  # 500, 300 downloads
    assert "tiny-org/tiny-embedder" not in names  # a feature-extraction model is no chat model
    gated_row = next(line for line in lines if line.startswith("tiny-org/gated "))
    assert "gated" in gated_row.split()
    assert "GGUF" in next(line for line in lines if line.startswith("tiny-org/tiny-chat-GGUF")).split()
    code, out, _ = run_cli(capsys, "search", "tiny", "--sort", "likes")
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ["tiny-org/tiny-chat-GGUF", "tiny-org/tiny-chat"]


def test_search_filters_by_size_and_format_and_json_has_one_object_per_model(hub_server, capsys):
    from desktop_app.engine.hub.search import HubModel

    code, out, _ = run_cli(capsys, "search", "chat", "--size", "3b-8b", "--json")  # any case, '-' or spaces
    assert code == 0
    found = [json.loads(line) for line in out.splitlines()]
    assert [m["repo_id"] for m in found] == ["mid-org/chat-7B"]
    assert set(found[0]) == {f.name for f in dataclasses.fields(HubModel)}
    assert found[0]["parameters"] == 7_000_000_000 and found[0]["gated"] is False
    code, out, _ = run_cli(capsys, "search", "tiny", "--format", "gguf", "--json")
    assert [json.loads(line)["repo_id"] for line in out.splitlines()] == ["tiny-org/tiny-chat-GGUF"]
    code, out, err = run_cli(capsys, "search", "no-such-model-anywhere")
    assert code == 0 and out == "" and "no text-generation model" in err


def test_search_refuses_bad_flags_in_one_line(hub_server, capsys):
    code, _, err = run_cli(capsys, "search", "tiny", "--limit", "0")
    assert code == 2 and "--limit must be 1 or more" in one_error_line(err)
    with pytest.raises(SystemExit) as exc:
        main(["models", "search", "tiny", "--size", "huge"])
    assert exc.value.code == 2 and "'huge' is not a size" in capsys.readouterr().err
    assert not settled(hub_server)  # refused before asking the Hub


# --- pull ----------------------------------------------------------------------------------------------------------

def test_pull_prints_a_verified_path_that_opens_and_lists_offline(hub_server, capsys):
    from desktop_app.engine.model.loading import load_model

    code, out, err = run_cli(capsys, "pull", "tiny-org/tiny-chat")
    assert code == 0, err
    path = Path(out.strip().splitlines()[-1])
    assert path.is_dir() and (path / "config.json").is_file() and str(path).startswith(str(cache_dir()))
    assert "verified" in err and "tiny-org/tiny-chat @ " in err  # the plan line, then the check
    assert not [n for n in downloads(hub_server) if n.endswith((".bin", ".pt", ".pkl"))]
    loaded = load_model(path, device="cpu")
    assert loaded.tokenizer.chat_template
    before = len(settled(hub_server))
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and len(settled(hub_server)) == before  # list never asks the Hub
    row = next(line for line in out.splitlines() if line.startswith("tiny-org/tiny-chat "))
    assert "safetensors" in row and str(path) in row
    code, out, _ = run_cli(capsys, "list", "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert {"repo_id", "path", "kind", "size", "revision"} <= set(listed[0])
    assert any(m["repo_id"] == "tiny-org/tiny-chat" and m["path"] == str(path) for m in listed)


def test_pull_again_fetches_nothing_new(hub_server, capsys):
    assert run_cli(capsys, "pull", "tiny-org/tiny-chat")[0] == 0
    sent = fetched(hub_server)
    code, out, err = run_cli(capsys, "pull", "tiny-org/tiny-chat")
    assert code == 0 and fetched(hub_server) == sent, err  # already in the cache: not a byte more
    assert Path(out.strip()).is_dir()


def test_pull_one_gguf_quantization_by_pattern(hub_server, capsys):
    from desktop_app.engine.model.loading import load_model

    code, out, err = run_cli(capsys, "pull", "tiny-org/tiny-chat-GGUF", "--file", "*Q8_0.gguf")
    assert code == 0, err
    path = Path(out.strip().splitlines()[-1])
    assert path.name == "tiny-chat-Q8_0.gguf" and path.is_file()
    assert downloads(hub_server) == ["tiny-chat-Q8_0.gguf"]  # not the other quantization
    assert load_model(path, device="cpu").kind == "gguf"


def test_pull_json_prints_the_engines_events(hub_server, capsys):
    hub_server.slow(4_000_000)  # ~1 s: several progress events
    code, out, err = run_cli(capsys, "pull", "tiny-org/tiny-chat", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert {e["type"] for e in events} <= {"download", "downloaded", "log"}
    progress = [e for e in events if e["type"] == "download"]
    assert progress and all({"repo_id", "file", "done", "total", "speed", "eta_s"} <= set(e) for e in progress)
    assert [e["done"] for e in progress] == sorted(e["done"] for e in progress)
    last = events[-1]
    assert last["type"] == "downloaded" and last["verified"] is True and last["repo_id"] == "tiny-org/tiny-chat"
    assert Path(last["folder"]).is_dir() and last["fetched"] == fetched(hub_server) and last["files"]
    assert "%|" not in err  # no bar with --json


@pytest.mark.parametrize(("repo", "extra", "says"), [
    ("tiny-org/no-such-model", [], "no model tiny-org/no-such-model on the Hugging Face Hub: check the name"),
    ("tiny-org/gated", [], "tiny-org/gated is gated: accept its licence at"),
    ("tiny-org/tiny-chat-GGUF", ["--file", "*Q9_K.gguf"], "matches no file of tiny-org/tiny-chat-GGUF"),
    ("tiny-org/tiny-chat-GGUF", [], "has no safetensors weights to pull: choose one GGUF file with --file"),
    ("tiny-chat", [], "'tiny-chat' is not a Hugging Face Hub model id: write it as organisation/name"),
    ("tiny-org/tiny-chat", ["--revision", "no-such-branch"], "tiny-org/tiny-chat has no such revision"),
])
def test_pull_mistakes_end_in_one_line_and_leave_nothing(hub_server, capsys, repo, extra, says):
    code, out, err = run_cli(capsys, "pull", repo, *extra)
    line = one_error_line(err)  # refused before the plan line and the bar
    assert code == 2 and says in line and out == ""
    if "gated" in says:
        assert "hf auth login" in line and "/tiny-org/gated" in line
    if "GGUF" in repo:
        assert "tiny-chat-Q8_0.gguf" in line and "tiny-chat-F16.gguf" in line  # says what there is
    assert not downloads(hub_server)  # refused before any file was fetched
    assert not sum(p.stat().st_size for p in cache_dir().rglob("*.incomplete"))
    assert run_cli(capsys, "list", "--json")[1] == ""


def test_a_gated_model_pulls_once_logged_in_with_huggingface_hubs_own_login(hub_server, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # what `hf auth login` stores, read by huggingface_hub itself
    code, out, err = run_cli(capsys, "pull", "tiny-org/gated")
    assert code == 0, err
    assert (Path(out.strip()) / "config.json").is_file()


def test_network_off_makes_no_request(hub_server, capsys, monkeypatch):
    code, out, _ = run_cli(capsys, "network", "off")
    assert code == 0 and out.strip() == "network features: off"
    for argv in (["search", "tiny"], ["pull", "tiny-org/tiny-chat"]):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and "network features are off" in one_error_line(err)
    code, out, _ = run_cli(capsys, "network", "--json")
    assert json.loads(out) == {"network_features": False}
    assert run_cli(capsys, "list")[0] == 0  # offline work goes on
    assert settled(hub_server) == []
    assert run_cli(capsys, "network", "on")[1].strip() == "network features: on"
    monkeypatch.setenv("AZR_NETWORK", "off")  # the environment overrides the setting
    code, _, err = run_cli(capsys, "search", "tiny")
    assert code == 2 and "AZR_NETWORK" in one_error_line(err)
    assert settled(hub_server) == []
    monkeypatch.delenv("AZR_NETWORK")
    code, out, _ = run_cli(capsys, "search", "tiny")
    assert code == 0 and "tiny-org/tiny-chat" in out and settled(hub_server)


def test_a_dropped_connection_says_pull_again_and_pulling_again_completes(hub_server, capsys):
    hub_server.drop_after(100_000, times=1000)  # every retry of the library is cut before a whole chunk arrived
    code, _, err = run_cli(capsys, "pull", "tiny-org/tiny-chat")
    assert code == 2 and "pull again to resume" in one_error_line(err, alone=False)  # after the plan and the bar
    hub_server.drops.clear()  # the connection is back
    code, out, err = run_cli(capsys, "pull", "tiny-org/tiny-chat")
    assert code == 0 and "verified" in err and Path(out.strip()).is_dir(), err


# --- train --allow-download goes through the same pull -------------------------------------------------------------

def test_train_allow_download_pulls_through_the_hub_and_records_the_local_folder(hub_server, capsys, tmp_path):
    from desktop_app.engine.specs import RunConfig

    data = tmp_path / "chats.jsonl"
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "the cat sat"}]}
    data.write_text(json.dumps(chat) + "\n" + json.dumps(chat) + "\n")
    argv = ["train", "--method", "lora", "--base", "tiny-org/tiny-chat", "--allow-download", "--data", str(data),
            "--steps", "1", "--batch-size", "2"]
    assert main(["models", "network", "off"]) == 0
    assert main([*argv, "--out", str(tmp_path / "refused")]) == 2
    assert "network features are off" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists() and settled(hub_server) == []
    assert main(["models", "network", "on"]) == 0
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "tiny-org/tiny-chat" in err and "verified" in err
    recorded = Path(RunConfig.load(tmp_path / "run" / "run.json").base_model)
    assert recorded.is_dir() and recorded.resolve().is_relative_to(cache_dir().resolve()), recorded
    assert not [n for n in downloads(hub_server) if n.endswith((".bin", ".pt", ".pkl"))]


# --- Ctrl+C in a real `models pull`, then resume ------------------------------------------------------------------

def _incomplete_size(blobs: Path) -> int:
    return sum(p.stat().st_size for p in blobs.glob("*.incomplete")) if blobs.is_dir() else 0


def test_an_interrupted_pull_resumes_where_it_stopped(hub_server, tmp_path):
    from desktop_app.engine.hub import download as hub_download

    size = 8 << 20
    data = random.Random(0).randbytes(size)
    hub_server.add_repo("tiny-org/big-GGUF", {"big-Q8_0.gguf": data})
    hub_server.slow(1_000_000)  # ~8 s for the file: time to interrupt it in the middle
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}  # the person asked: the app lifts it
    argv = [sys.executable, "-m", "desktop_app", "models", "pull", "tiny-org/big-GGUF", "--file", "*Q8_0.gguf"]
    blobs = cache_dir() / "models--tiny-org--big-GGUF" / "blobs"
    child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _incomplete_size(blobs) < 2 << 20 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "run the same command again to resume" in err and "B/s" in err  # the bar ran; the way back is said
    have = _incomplete_size(blobs)
    assert 2 << 20 <= have < size, have  # the partial file stays
    hub_server.slow(0)
    deadline = time.monotonic() + 30  # the server logs the interrupted GET once its write to the closed socket fails
    while not any(r.path.endswith("big-Q8_0.gguf") and r.method == "GET" for r in hub_server.requests):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    before = len(settled(hub_server))
    resumed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    path = Path(resumed.stdout.strip().splitlines()[-1])
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()
    gets = [r for r in settled(hub_server)[before:] if r.method == "GET" and r.path.endswith("big-Q8_0.gguf")]
    fetched = sum(r.sent for r in gets)
    chunk = hub_download.CHUNK_BYTES
    assert fetched <= size - have + chunk, (fetched, size - have, gets)  # the missing bytes, not a restart
    assert gets[0].range.startswith("bytes=") and int(gets[0].range[6:].rstrip("-")) >= have - chunk
    assert "verified" in resumed.stderr
