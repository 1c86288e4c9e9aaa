"""The same run config on 2 processes (torchrun, gloo, CPU) as on 1: DDP and FSDP losses per step, checkpoints
that resume on another number of processes, signals that reach every process, a killed process.

Each torchrun launch costs a few seconds (two interpreters importing torch on two cores), so the launches are
shared: one module-scoped set of runs, compared by several tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from torchrun_helpers import run_on_two_machines
from train_helpers import make_dataset, metrics_losses, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.specs import RunConfig

ROOT = Path(__file__).resolve().parents[2]
STEPS, SAVE_EVERY = 8, 4
DDP_TOLERANCE = 1e-5
FSDP_TOLERANCE = 1e-4  # measured ~1e-6: gathers and reduce-scatters sum in another order than one process

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="torchrun on POSIX (signals, process groups)"),
              pytest.mark.timeout(600)]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def torchrun(*args: str, processes: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "desktop_app", "train", *args]


def run_cli(cmd: list[str], timeout: float = 180) -> tuple[list[dict[str, Any]], str, int]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=_env())
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return events, proc.stderr, proc.returncode


def write_config(folder: Path, dataset: Path, name: str, strategy: str | None = None, **train: Any) -> Path:
    train = {"steps": STEPS, "batch_size": 8, "save_every": SAVE_EVERY, **train}
    config = tiny_config(dataset, model={"n_layers": 2}, **train)
    if strategy:
        config = config.replace(distributed={"strategy": strategy})
    path = folder / f"{name}.json"
    config.save(path)
    return path


def step_losses(events: list[dict[str, Any]]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["type"] == "step"}


def close(a: dict[int, float], b: dict[int, float], tol: float) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= tol for k in a)


def drop_newest_checkpoint(run: Path) -> int:
    """Keep the run as it was at its previous checkpoint (as a kill after that save would have left it)."""
    saved = rf.list_committed(run)
    shutil.rmtree(saved[-1])
    return rf.step_of(saved[-2])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("dist")
    dataset = make_dataset(folder / "ds", n_docs=80)
    out: dict[str, Any] = {"folder": folder, "dataset": dataset}
    for name, processes, strategy in (("one", 1, None), ("ddp", 2, "ddp"), ("fsdp", 2, "fsdp")):
        config = write_config(folder, dataset, name, strategy)
        cmd = torchrun("--config", str(config), "--out", str(folder / name), "--json", processes=processes) \
            if processes > 1 else [sys.executable, "-m", "desktop_app", "train", "--config", str(config),
                                   "--out", str(folder / name), "--json"]
        events, stderr, rc = run_cli(cmd)
        assert rc == 0, stderr[-3000:]
        out[name] = events
        out[f"{name}_stderr"] = stderr
    return out


def test_two_processes_equal_one_at_the_same_global_batch(runs):
    one = step_losses(runs["one"])
    assert len(one) == STEPS
    assert close(step_losses(runs["ddp"]), one, DDP_TOLERANCE), (step_losses(runs["ddp"]), one)
    assert close(step_losses(runs["fsdp"]), one, FSDP_TOLERANCE), (step_losses(runs["fsdp"]), one)
    # metrics.jsonl (process 0 alone writes it) holds the same curve, each step once
    assert close(metrics_losses(runs["folder"] / "ddp"), one, DDP_TOLERANCE)


def test_process_zero_prints_what_one_process_prints_once(runs):
    for name in ("ddp", "fsdp"):
        events = runs[name]
        assert events[0]["type"] == "start" and events[0]["world_size"] == 2 and events[0]["strategy"] == name
        assert [e["step"] for e in events if e["type"] == "step"] == list(range(1, STEPS + 1))
        assert [e["type"] for e in events].count("finished") == 1 and events[-1]["reason"] == "completed"
        assert "[process 1]" not in runs[f"{name}_stderr"]  # nothing went wrong, so the other process said nothing
    assert runs["one"][0] == {"type": "start", "world_size": 1, "strategy": "single", "device": "cpu",
                              "start_step": 0}


def test_two_machines_of_one_host_equal_one_process(runs, tmp_path):
    """The multi-node command the window prints (`--nnodes 2`, each launcher its own `--node_rank`, rendezvous on
    127.0.0.1), on two launchers of this host with one process each: the same losses as one process."""
    run = run_on_two_machines(RunConfig.load(runs["folder"] / "one.json"), tmp_path)
    started = [r for r in rf.read_metrics(run) if r.get("type") == "start"]
    assert started and started[0]["world_size"] == 2 and started[0]["strategy"] == "ddp"
    assert close(metrics_losses(run), step_losses(runs["one"]), DDP_TOLERANCE)


def test_checkpoints_of_two_processes_hold_the_whole_model(runs):
    from safetensors.torch import load_file

    one = load_file(rf.list_committed(runs["folder"] / "one")[-1] / "model.safetensors")
    for name, tol in (("ddp", 1e-4), ("fsdp", 1e-4)):
        path = rf.list_committed(runs["folder"] / name)[-1]
        rf.verify_checkpoint(path)
        got = load_file(path / "model.safetensors")
        assert got.keys() == one.keys()
        assert max((got[k] - one[k]).abs().max().item() for k in one) < tol


@pytest.mark.parametrize(("source", "processes", "strategy"), [("ddp", 1, None), ("one", 2, "fsdp"),
                                                                ("fsdp", 2, "ddp")])
def test_save_on_n_processes_resume_on_m(runs, tmp_path, source, processes, strategy):
    run = tmp_path / "run"
    shutil.copytree(runs["folder"] / source, run)
    resumed_at = drop_newest_checkpoint(run)
    if strategy:  # the distributed block may change on resume (it says so), nothing else
        config = json.loads((run / "run.json").read_text())
        config["distributed"] = {"strategy": strategy}
        (run / "run.json").write_text(json.dumps(config))
    cmd = torchrun("--resume", str(run), "--json", processes=processes) if processes > 1 else \
        [sys.executable, "-m", "desktop_app", "train", "--resume", str(run), "--json"]
    events, stderr, rc = run_cli(cmd)
    assert rc == 0, stderr[-3000:]
    assert events[0]["world_size"] == processes and events[0]["start_step"] == resumed_at
    one = step_losses(runs["one"])
    continued = step_losses(events)
    assert sorted(continued) == list(range(resumed_at + 1, STEPS + 1))
    assert close(continued, {k: one[k] for k in continued}, FSDP_TOLERANCE), (continued, one)
    # the curve on disk continues: each step once, the part before the checkpoint kept
    assert close(metrics_losses(run), one, FSDP_TOLERANCE)


def _rank_process(launcher: subprocess.Popen, rank: int) -> psutil.Process:
    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank) and "desktop_app" in " ".join(child.cmdline()):
                return child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no process of rank {rank}")


class Launched:
    """A torchrun launch whose JSON lines are read as they come."""

    def __init__(self, cmd: list[str]):
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.events: list[dict[str, Any]] = []

    def until(self, predicate, timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            self.events.append(event)
            if predicate(event):
                return event
        raise AssertionError(f"not seen; last events {self.events[-3:]}")

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self.events += [json.loads(line) for line in out.splitlines() if line.strip()]
        return self.proc.returncode, err


def test_signals_reach_every_process_save_pause_stop(runs, tmp_path):
    config = write_config(tmp_path, runs["dataset"], "long", "ddp", steps=4000, save_every=0)
    run = Launched(torchrun("--config", str(config), "--out", str(tmp_path / "run"), "--json"))
    try:
        run.until(lambda e: e["type"] == "step" and e["step"] >= 3)
        other = _rank_process(run.proc, 1)
        other.send_signal(signal.SIGUSR1)  # save now, sent to process 1: process 0 writes the checkpoint
        saved = run.until(lambda e: e["type"] == "checkpoint")
        assert saved["step"] < 4000 and Path(saved["path"]).is_dir()
        other.send_signal(signal.SIGUSR2)  # pause
        paused = run.until(lambda e: e["type"] == "log" and e["message"].startswith("paused at step"))
        at = int(paused["message"].split()[-1])
        time.sleep(1.5)
        other.send_signal(signal.SIGUSR2)  # resume
        run.until(lambda e: e["type"] == "log" and e["message"] == "resumed")
        after = run.until(lambda e: e["type"] == "step")
        assert after["step"] == at + 1  # nothing trained while paused
        os.kill(run.proc.pid, signal.SIGINT)  # Ctrl+C to torchrun: it passes SIGINT on to every process
        _rc, stderr = run.finish()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    finished = [e for e in run.events if e["type"] == "finished"]
    # (torchrun itself exits 1 after a Ctrl+C, whatever its processes did: their own words are what counts)
    assert finished and finished[-1]["reason"] == "stopped", stderr[-3000:]
    assert not re.search(r"\[rank\d\]: Traceback", stderr), stderr[-3000:]  # no process died on the way
    last = rf.list_committed(tmp_path / "run")[-1]
    assert rf.step_of(last) == finished[-1]["step"]
    rf.verify_checkpoint(last)


def test_a_killed_process_ends_the_run_clearly_and_it_resumes(runs, tmp_path):
    config = write_config(tmp_path, runs["dataset"], "kill", "ddp", steps=4000, save_every=3)
    run = Launched(torchrun("--config", str(config), "--out", str(tmp_path / "run"), "--json"))
    try:
        run.until(lambda e: e["type"] == "checkpoint" and e["step"] >= 6)
        _rank_process(run.proc, 1).send_signal(signal.SIGKILL)
        killed = time.monotonic()
        rc, stderr = run.finish(timeout=90)
        took = time.monotonic() - killed
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    assert rc != 0 and took < 60
    failed = [e for e in run.events if e["type"] == "finished"]
    assert failed and failed[-1]["reason"] == "failed", (run.events[-3:], stderr[-5000:])
    assert "lost contact with the other processes" in failed[-1]["message"]
    assert "--resume" in failed[-1]["message"]
    saved = rf.list_committed(tmp_path / "run")
    for path in saved:
        rf.verify_checkpoint(path)  # every committed checkpoint is intact
    # ...and the run resumes (on one process here) from the newest of them
    cfg = json.loads((tmp_path / "run" / "run.json").read_text())
    cfg["train"]["steps"] = rf.step_of(saved[-1]) + 2
    (tmp_path / "run" / "run.json").write_text(json.dumps(cfg))
    events, stderr, rc = run_cli([sys.executable, "-m", "desktop_app", "train", "--resume", str(tmp_path / "run"),
                                  "--accept-config-change", "--json"])
    assert rc == 0, stderr[-3000:]
    assert events[0]["start_step"] == rf.step_of(saved[-1]) and events[-1]["reason"] == "completed"


def test_early_stopping_is_decided_by_process_zero_for_both(runs, tmp_path):
    # lr 0: the validation loss never improves, so with patience 1 the run stops at the second evaluation
    config = write_config(tmp_path, runs["dataset"], "early", "ddp", steps=50, lr=0.0, eval_every=1,
                          early_stopping_patience=1, save_every=0)
    events, stderr, rc = run_cli(torchrun("--config", str(config), "--out", str(tmp_path / "run"), "--json"))
    assert rc == 0, stderr[-3000:]
    assert events[-1]["type"] == "finished" and events[-1]["reason"] == "early_stopped" and events[-1]["step"] == 2
    assert "[process 1]" not in stderr
    assert rf.step_of(rf.list_committed(tmp_path / "run")[-1]) == 2
