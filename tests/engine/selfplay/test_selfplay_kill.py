"""kill -9 of a real `train --method selfplay` process mid-run, then `--resume`: the curve (rewards,
held-out rates), the task buffers' log and the final weights equal an uninterrupted run's."""

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

from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.train.loop import train

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX kill -9")


def _args(base: Path, out: Path) -> list[str]:
    return ["--method", "selfplay", "--world", "mini", "--base", str(base), "--steps", "8", "--save-every", "2",
            "--eval-every", "4", "--threads", "1", "--seed", "3", "--out", str(out), "--json",
            "--option", "max_new_tokens=8", "--option", "heldout_per_type=3", "--option", "seed_tasks_per_type=4",
            "--option", "solver_tasks_per_type=2", "--option", "solver_samples=2", "--option", "proposals_per_type=1",
            "--option", 'world_options={"depth": 1}']


def _run(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "desktop_app", "train", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _curve(run: Path) -> list[tuple]:
    return [(m["type"], m["step"], m.get("loss"), m.get("reward"), m.get("heldout_solve_rate"))
            for m in read_metrics(run) if m.get("type") in ("step", "eval")]


def test_kill_9_mid_self_play_then_resume_is_exact(tmp_path: Path) -> None:
    dataset = make_dataset(tmp_path / "ds", context=128, vocab_size=300)
    events = list(train(tiny_config(dataset, steps=4), tmp_path / "base"))
    assert events[-1].reason == "completed"

    reference = _run(*_args(tmp_path / "base", tmp_path / "ref"))
    reference.communicate(timeout=300)
    assert reference.returncode == 0

    victim = _run(*_args(tmp_path / "base", tmp_path / "killed"))
    try:
        for line in victim.stdout:
            event = json.loads(line)
            if event["type"] == "step" and event["step"] == 5:
                break
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
    resumed = _run("--resume", str(tmp_path / "killed"), "--json")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0 and json.loads(out.splitlines()[-1])["reason"] == "completed"

    assert _curve(tmp_path / "killed") == _curve(tmp_path / "ref")
    rounds = [json.loads(x)["round"] for x in (tmp_path / "killed" / "selfplay.jsonl").read_text().splitlines()]
    assert rounds == list(range(1, 9))
    ref, got = final_weights(tmp_path / "ref"), final_weights(tmp_path / "killed")
    assert all(torch.equal(ref[k], got[k]) for k in ref)
