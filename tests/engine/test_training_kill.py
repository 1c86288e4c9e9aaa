"""kill -9 of a real `python -m desktop_app train` process at random points, including inside a save.

Every trial must leave only committed (verifiable) checkpoints visible, and resuming must give the
loss curve and final weights of an uninterrupted run bit for bit (across processes: the killed
segment ran in a subprocess; one resume also runs as a subprocess).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from train_helpers import final_weights, make_dataset, metrics_losses, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.loop import train

ROOT = Path(__file__).resolve().parents[2]
STEPS, SAVE_EVERY = 12, 3

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX kill -9")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    dataset = make_dataset(root / "ds")
    config = tiny_config(dataset, steps=STEPS, save_every=SAVE_EVERY, keep_last=2, model={"dropout": 0.1})
    config_file = root / "run.json"
    config.save(config_file)
    events = list(train(config, root / "ref"))
    assert events[-1].reason == "completed"
    return config, config_file, metrics_losses(root / "ref"), final_weights(root / "ref")


def _start(config_file: Path, run_dir: Path, *extra: str, pause: float = 0.0) -> subprocess.Popen:
    args = ["--resume", str(run_dir)] if "resume" in extra else ["--config", str(config_file), "--out", str(run_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), ckpt.PAUSE_ENV: str(pause)}
    return subprocess.Popen([sys.executable, "-m", "desktop_app", "train", *args, "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _staging(run_dir: Path) -> list[Path]:
    parent = rf.checkpoints_dir(run_dir)
    return [p for p in parent.iterdir() if p.name.startswith(".tmp-")] if parent.exists() else []


def test_kill_9_anywhere_then_resume_is_exact(setup, tmp_path):
    config, config_file, ref_losses, ref_weights = setup
    seed = int(os.environ.get("AZR_KILL_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    modes = ["save", "step", rng.choice(["save", "step"])]
    for trial, mode in enumerate(modes):
        where = f"seed {seed}, trial {trial}, mode {mode}"
        run_dir = tmp_path / f"run{trial}"
        proc = _start(config_file, run_dir, pause=0.3)
        target = rng.choice(range(SAVE_EVERY, STEPS, SAVE_EVERY)) if mode == "save" else rng.randint(1, STEPS - 2)
        try:
            for line in proc.stdout:
                event = json.loads(line)
                if event["type"] == "step" and event["step"] >= target:
                    if mode == "save":  # the save of this step is running now: wait until it is staging
                        deadline = time.time() + 10
                        while not _staging(run_dir) and time.time() < deadline:
                            time.sleep(0.005)
                        time.sleep(rng.uniform(0.0, 0.3))
                    else:
                        time.sleep(rng.uniform(0.0, 0.02))
                    break
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        if mode == "save":
            assert _staging(run_dir), f"the kill missed the save window ({where})"
        # No half checkpoint is ever visible: every non-hidden entry is a committed, verifying checkpoint.
        visible = [p for p in rf.checkpoints_dir(run_dir).iterdir() if not p.name.startswith(".")] \
            if rf.checkpoints_dir(run_dir).exists() else []
        for p in visible:
            rf.verify_checkpoint(p)
            assert rf.step_of(p) % SAVE_EVERY == 0, where

        if trial == len(modes) - 1:  # resume across processes too
            proc = _start(config_file, run_dir, "resume")
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, where
            assert json.loads(out.splitlines()[-1])["reason"] == "completed", where
        else:
            events = list(train(config, run_dir, resume=True))
            assert events[-1].reason == "completed", where
        assert not _staging(run_dir), where
        assert metrics_losses(run_dir) == ref_losses, where
        weights = final_weights(run_dir)
        assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights), where
