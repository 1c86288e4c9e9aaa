"""`train` on a disk that fills up: the CLI says the one line and how to go on, waits, and SIGUSR1 retries the save
(the run then finishes bit-exactly as one that never met the fault); Ctrl+C stops it with the last checkpoint intact.
A real subprocess; the full disk is safetensors' own writer refusing while a marker file exists."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import final_weights, make_dataset, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.train.loop import train

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")

# Runs the CLI with safetensors refusing every write of step >= 4 as a full disk does, while FULL exists.
LAUNCH = """
import sys
from pathlib import Path
import safetensors, safetensors.torch as st
full, real = Path(sys.argv[1]), st.serialize_file
def serialize(tensors, filename, metadata=None):
    if full.exists() and int(Path(filename).parent.name.split("-")[2]) >= 4:
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    return real(tensors, filename, metadata=metadata)
st.serialize_file = serialize
from desktop_app.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


def _start(dataset: Path, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path, Path]:
    config_file, out, full = tmp_path / "run.json", tmp_path / "run", tmp_path / "disk-is-full"
    tiny_config(dataset, steps=6, save_every=2).save(config_file)
    full.touch()
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(full), "train", "--config", str(config_file),
                             "--out", str(out), *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return proc, out, full


def _wait_for_line(stream, text: str, seen: list[str]) -> str:
    for line in stream:
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"never printed {text!r}: {''.join(seen)[-2000:]}")


def test_cli_waits_on_a_full_disk_and_sigusr1_retries(dataset, tmp_path):
    proc, out, full = _start(dataset, tmp_path, "--json")
    try:
        lines: list[str] = []
        fault = json.loads(_wait_for_line(proc.stdout, "saving the step 4 checkpoint failed", lines))
        paused = json.loads(next(proc.stdout))
        assert fault["type"] == "log" and "the disk is full" in fault["message"] and "bug" not in fault["message"]
        assert paused["message"] == (f"paused at step 4: free some space, then `kill -USR1 {proc.pid}` to retry, or "
                                     "Ctrl+C to stop")
        assert [rf.step_of(p) for p in rf.list_committed(out)] == [2]
        assert proc.poll() is None  # waiting, not ended
        full.unlink()  # the person frees some space
        proc.send_signal(signal.SIGUSR1)
        rest = [json.loads(line) for line in proc.stdout]
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rest[-1]["type"] == "finished" and rest[-1]["reason"] == "completed" and rest[-1]["step"] == 6
    assert [e["step"] for e in rest if e["type"] == "checkpoint"] == [4, 6]
    assert "retrying the save" in proc.stderr.read()
    ref = tmp_path / "ref"
    list(train(tiny_config(dataset, steps=6, save_every=2), ref))
    got, want = final_weights(out), final_weights(ref)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_ctrl_c_while_waiting_stops_with_the_last_checkpoint_intact(dataset, tmp_path):
    proc, out, _ = _start(dataset, tmp_path)
    try:
        seen: list[str] = []
        _wait_for_line(proc.stderr, "paused at step 4", seen)
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(seen) + err
    assert "[warning] saving the step 4 checkpoint failed: the disk is full" in text
    assert "stopping without the step 4 checkpoint" in text and "stopped: stopped at step 4 without saving it" in text
    assert "Traceback" not in text and "bug" not in text
    assert [rf.step_of(p) for p in rf.list_committed(out)] == [2]
    rf.verify_checkpoint(rf.list_committed(out)[0])
