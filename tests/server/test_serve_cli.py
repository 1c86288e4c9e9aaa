"""`python -m desktop_app serve` as scripts use it: the ready line, a bounded load of concurrent streaming
clients (official async client, 127.0.0.1 only), the request log, and exit status 0 on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS, REQUESTS_EACH, MAX_TOKENS = 32, 5, 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AZR_API_KEY"}
    return {**env, "PYTHONUNBUFFERED": "1"}


class Serve:
    """The serve verb in a subprocess; its stdout lines are collected by a thread."""

    def __init__(self, args: list[str], stderr_file: Path):
        self.stderr = open(stderr_file, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "desktop_app", "serve", *args], cwd=ROOT, env=_env(),
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.all: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.all.append(line)
            self.lines.put(line)

    def first_line(self, timeout: float = 90) -> str:
        return self.lines.get(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.stderr.close()


async def _client_session(client: openai.AsyncOpenAI, model: str, k: int) -> list[str]:
    texts = []
    for i in range(REQUESTS_EACH):
        stream = await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"client {k} request {i}"}], max_tokens=MAX_TOKENS,
            temperature=0.8, seed=k * 100 + i, stream=True)
        pieces, finish = [], None
        async for chunk in stream:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        assert finish in ("stop", "length")
        texts.append("".join(pieces))
    return texts


async def _load(url: str, model: str) -> list[list[str]]:
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        return await asyncio.wait_for(asyncio.gather(*(_client_session(client, model, k) for k in range(CLIENTS))),
                                      timeout=120)


def test_serve_ready_line_load_and_sigterm(model_dir, tmp_path):
    port = _free_port()
    serve = Serve([str(model_dir), "--port", str(port), "--workspace", str(tmp_path / "ws"), "--log-json"],
                  tmp_path / "stderr.txt")
    try:
        assert serve.first_line() == f"serving on http://127.0.0.1:{port}\n"
        results = asyncio.run(_load(f"http://127.0.0.1:{port}", model_dir.name))
        assert len(results) == CLIENTS and all(len(r) == REQUESTS_EACH for r in results)
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(30) == 0
        time.sleep(0.1)  # let the reader thread take the last lines
        records = [json.loads(line) for line in serve.all[1:]]
        ends = [r for r in records if r["event"] == "end" and r["path"] == "/v1/chat/completions"]
        assert len(ends) == CLIENTS * REQUESTS_EACH and {r["status"] for r in ends} == {200}
        assert max(r["clients"] for r in records) > 1  # requests were in flight together
        stderr = (tmp_path / "stderr.txt").read_text()
        assert "Traceback" not in stderr and "ERROR" not in stderr, stderr[-2000:]
    finally:
        serve.stop()


def test_non_loopback_host_needs_an_api_key(model_dir):
    proc = subprocess.run([sys.executable, "-m", "desktop_app", "serve", str(model_dir), "--host", "0.0.0.0",
                           "--port", str(_free_port())], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: refusing to listen on 0.0.0.0 without an API key")


def test_busy_port_is_a_clear_error(model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "desktop_app", "serve", str(model_dir), "--port", str(port)],
                              cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr


@pytest.mark.parametrize("args", [["--port", "70000"], ["--max-batch", "0"]])
def test_argument_errors(args, model_dir):
    proc = subprocess.run([sys.executable, "-m", "desktop_app", "serve", str(model_dir), *args], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
