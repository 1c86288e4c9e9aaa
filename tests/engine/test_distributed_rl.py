"""Self-play and GRPO on 2 processes (torchrun, gloo, CPU) equal 1 process at the same global batch: each process
decodes and judges its share of every round, all of them hold the same round (episodes, rewards, task buffers) and
the losses match within pretraining's DDP tolerance. A process killed mid-run ends the run with the same line as
pretraining's, and the run resumes on 1 process on the same curve. Two torchrun launchers (`--nnodes 2`, built from
the command the window prints for several machines) on this one host train the same self-play run.

The base is a tiny llama pretrained for a few seconds on mini-world tasks, so its answers earn varied rewards (a
random model's are all unparseable: every advantage 0, nothing trained, nothing to compare).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from torchrun_helpers import ROOT, env, run_on_two_machines
from train_helpers import tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.events import Controls
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train.loop import train

TOLERANCE = 1e-5  # pretraining's DDP tolerance (tests/engine/test_distributed.py); measured ~1e-8 here
STEPS = 6
pytestmark = [pytest.mark.skipif(os.name != "posix", reason="torchrun on POSIX (signals, process groups)"),
              pytest.mark.timeout(600)]
SELFPLAY = {"world": "mini", "task_types": ["deduction", "abduction"], "proposals_per_type": 2,
            "solver_tasks_per_type": 2, "solver_samples": 2, "max_new_tokens": 8, "heldout_per_type": 2,
            "seed_tasks_per_type": 4, "world_options": {"depth": 1}}


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "desktop_app",
            "train", *args]


def _rl_config(base: Path, objective: str, options: dict[str, Any], **train_fields: Any) -> RunConfig:
    fields = {"steps": STEPS, "batch_size": 8, "lr": 3e-3, "warmup_steps": 2, "save_every": 2, "threads": 1,
              "log_every": 1, "precision": "fp32", **train_fields}
    return RunConfig(base_model=str(base), objective=objective, method_options=options,
                     train=TrainSpec(**fields).to_dict(), seed=3)


def _curve(run: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Each step's and evaluation's record (metrics.jsonl), without what depends on the clock."""
    timed = ("elapsed_s", "eta_s", "tokens_per_s", "mfu", "rollout_tokens_per_s", "checks_per_s", "check_share")
    return {(r["type"], r["step"]): {k: v for k, v in r.items() if k not in timed}
            for r in rf.read_metrics(run) if r.get("type") in ("step", "eval")}


def _same(got: dict[tuple[str, int], dict[str, Any]], want: dict[tuple[str, int], dict[str, Any]]) -> None:
    """The same steps with the same figures: the loss (and the other floats the update makes) within the tolerance,
    the round's figures (rewards, counts, buffer sizes) and the evaluations' (held-out solve rates) equal."""
    assert got and set(got) <= set(want), (sorted(got), sorted(want))
    for step, record in got.items():
        assert record.keys() == want[step].keys(), step
        for key, value in record.items():
            if isinstance(value, float):
                assert value == pytest.approx(want[step][key], abs=TOLERANCE, rel=TOLERANCE), (step, key)
            else:
                assert value == want[step][key], (step, key)


def _rounds(run: Path, upto: int) -> list[dict[str, Any]]:
    """The task browser's log (selfplay.jsonl): every round's rollouts, proposals and their fates, and buffers."""
    lines = [json.loads(x) for x in (run / "selfplay.jsonl").read_text().splitlines()]
    return [line for line in lines if line["round"] <= upto]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A tiny llama that has read mini-world tasks (a few seconds of pretraining)."""
    from desktop_app.engine.data.prepare import prepare_dataset
    from desktop_app.engine.specs import DataSpec
    from desktop_app.engine.tasks.base import get_world

    root = tmp_path_factory.mktemp("rl_base")
    (root / "corpus").mkdir()
    get_world("mini", depth=1).write_seed_corpus(root / "corpus" / "mini.txt", 400, 0, ("deduction", "abduction"),
                                                 proposals=True)
    list(prepare_dataset([root / "corpus"], root / "ds", DataSpec(vocab_size=300, context_length=128,
                                                                  val_fraction=0.1)))
    events = list(train(tiny_config(root / "ds", steps=40, batch_size=16, lr=1e-2, warmup_steps=5), root / "base"))
    assert events[-1].reason == "completed"
    return root / "base"


@pytest.fixture(scope="module")
def selfplay_one(base: Path, tmp_path_factory) -> tuple[RunConfig, Path]:
    """The self-play run on one process (in this process), STEPS steps, a checkpoint every 2."""
    folder = tmp_path_factory.mktemp("sp_one")
    config = _rl_config(base, "selfplay", SELFPLAY, eval_every=3)
    events = list(train(config, folder / "run"))
    assert events[-1].reason == "completed"
    steps = [r for (kind, _), r in _curve(folder / "run").items() if kind == "step"]
    assert len({r["reward"] for r in steps}) > 1 and len({r["loss"] for r in steps}) > 1  # varied rewards, updates
    assert any(kind == "eval" for kind, _ in _curve(folder / "run"))
    return config, folder / "run"


class _Launched:
    """A torchrun launch whose JSON lines are read as they come."""

    def __init__(self, cmd: list[str]):
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.events: list[dict[str, Any]] = []

    def until(self, predicate, timeout: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.events.append(json.loads(line))
            if predicate(self.events[-1]):
                return self.events[-1]
        raise AssertionError(f"not seen; last events {self.events[-3:]}")

    def finish(self, timeout: float = 90) -> tuple[int, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        self.events += [json.loads(line) for line in out.splitlines() if line.strip()]
        return self.proc.returncode, err


def _rank_pid(launcher: subprocess.Popen, rank: int) -> int:
    import psutil

    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank) and "desktop_app" in " ".join(child.cmdline()):
                return child.pid
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no process of rank {rank}")


def test_self_play_on_two_processes_equals_one_a_killed_process_ends_it_and_it_resumes_on_one(selfplay_one,
                                                                                             tmp_path):
    config, one = selfplay_one
    config.save(tmp_path / "run.json")
    run = tmp_path / "run"
    launched = _Launched(_torchrun("--config", str(tmp_path / "run.json"), "--out", str(run), "--json"))
    try:
        assert launched.until(lambda e: e["type"] == "start")["world_size"] == 2
        launched.until(lambda e: e["type"] == "checkpoint" and e["step"] >= 4)
        os.kill(_rank_pid(launched.proc, 1), signal.SIGKILL)
        killed = time.monotonic()
        rc, stderr = launched.finish()
        took = time.monotonic() - killed
    finally:
        if launched.proc.poll() is None:
            launched.proc.kill()
    # the same one-line end as pretraining's: which process lost contact, the checkpoint kept, how to resume
    finished = [e for e in launched.events if e["type"] == "finished"]
    assert rc != 0 and took < 60 and finished and finished[-1]["reason"] == "failed", stderr[-3000:]
    assert "lost contact with the other processes" in finished[-1]["message"]
    assert "--resume" in finished[-1]["message"] and "\n" not in finished[-1]["message"]
    saved = rf.list_committed(run)
    at = rf.step_of(saved[-1])
    assert at >= 4
    # up to the kill: the same steps (losses, rewards, the round's figures), rounds and checkpointed task buffers
    _same(_curve(run), _curve(one))
    assert _rounds(run, at) == _rounds(one, at)
    reference = rf.checkpoints_dir(one) / rf.checkpoint_name(at)
    assert rf.trainer_state(saved[-1])["data"] == rf.trainer_state(reference)["data"]  # round + task buffers
    # resumed on one process: the rest of the same curve
    events = list(train(config, run, Controls(), resume=True))
    assert events[-1].reason == "completed" and events[-1].step == STEPS
    _same(_curve(run), _curve(one))
    assert set(_curve(run)) == set(_curve(one))
    assert _rounds(run, STEPS) == _rounds(one, STEPS)


def test_grpo_launched_as_the_window_launches_it_on_two_processes_equals_one(base, tmp_path):
    """Processes per machine 2 in the window's Distributed fields: the one run entry (session) starts torchrun and
    follows it, as the window's Start does; GRPO's curve and episodes equal one process's."""
    from desktop_app.engine import session
    from desktop_app.engine.events import Sample

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in [
        ("f = lambda x: x[1:]\nf([1, 2, 3])=", "[2, 3]"), ("f = lambda x: x + 1\nf(4)=", "5"),
        ("f = lambda x: x[0]\nf([7, 8])=", "7"), ("f = lambda x: x * 2\nf(3)=", "6")]))
    options = {"prompts": [str(prompts)], "group_size": 2, "prompts_per_step": 3, "max_new_tokens": 8,
               "weights": {"answer": 1.0, "length": 0.5}, "length_target": 3, "eval_prompts": 2}
    config = _rl_config(base, "grpo", options, steps=4, eval_every=4, save_every=0)
    one = list(train(config, tmp_path / "one"))
    assert one[-1].reason == "completed"
    opened = session.open_session(session.RunRequest(config=config.replace(
        distributed={"nproc_per_node": 2}).to_dict()), tmp_path / "two")
    assert opened.processes == 2 and not opened.errors()
    two = list(opened.events(Controls()))
    started = next(e for e in two if e.type == "start")
    assert started.world_size == 2 and two[-1].reason == "completed", two[-5:]
    want = _curve(tmp_path / "one")
    assert len({r["loss"] for (kind, _), r in want.items() if kind == "step"}) > 1
    _same(_curve(tmp_path / "two"), want)
    assert set(_curve(tmp_path / "two")) == set(want)
    # the episodes themselves: the last round's first rollouts (the third was decoded by process 1), as shown
    shown = [(e.prompt, e.text) for e in two if isinstance(e, Sample)]
    assert shown and shown == [(e.prompt, e.text) for e in one if isinstance(e, Sample)]


def test_self_play_on_two_machines_of_one_host_equals_one_process(selfplay_one, tmp_path):
    config, one = selfplay_one
    run = run_on_two_machines(config, tmp_path)
    started = [r for r in rf.read_metrics(run) if r.get("type") == "start"]
    assert started and started[0]["world_size"] == 2
    _same(_curve(run), _curve(one))
    assert set(_curve(run)) == set(_curve(one))
    assert _rounds(run, STEPS) == _rounds(one, STEPS)
