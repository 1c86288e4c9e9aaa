"""A shortened CPU demonstration: seed corpus -> pretrain -> self-play raises the held-out solve rate."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from desktop_app.engine.recipes.selfplay_demo import run_demo


@pytest.mark.slow
def test_self_play_raises_the_heldout_solve_rate(tmp_path: Path) -> None:
    events = list(run_demo(tmp_path / "demo", minutes=60, corpus_tasks=6000, pretrain_steps=400, selfplay_steps=100,
                           eval_every=25, train_overrides={"precision": "fp32", "threads": 1}))
    finished = events[-1]
    assert finished.type == "finished" and finished.reason == "completed", finished
    before, after = finished.result["before"], finished.result["after"]
    assert all(math.isfinite(v) for v in after.values())
    mean_before, mean_after = sum(before.values()) / 3, sum(after.values()) / 3
    print(f"held-out solve rate before {before}, after {after}")
    # the best self-play checkpoint solves at least one more of the 144 held-out tasks than the base did
    assert mean_after >= mean_before + 1 / 144, (before, after)
    evals = [e for e in events if e.type == "eval" and "heldout_solve_rate/deduction" in e.metrics]
    assert len(evals) == 4
    assert (tmp_path / "demo" / "selfplay" / "selfplay.jsonl").exists()
