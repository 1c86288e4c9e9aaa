"""What the Generate front ends choose for the person: a new seed per reply (never the last one again) when the seed
matters, the person's seed otherwise; and the run that finished last."""

from __future__ import annotations

import json
import os
import random
import shutil


def test_each_reply_draws_a_new_seed_only_when_sampling():
    from desktop_app.engine.generate.choices import SEED_LIMIT, draw_seed, reply_spec, uses_seed
    from desktop_app.engine.specs import GenerateSpec

    sampled = GenerateSpec(temperature=0.8, seed=7)
    rng = random.Random(0)
    seeds = [reply_spec(sampled, new_seed=True, rng=rng).seed for _ in range(50)]
    assert all(0 < s < SEED_LIMIT for s in seeds) and 7 not in seeds and len(set(seeds)) > 40
    assert reply_spec(sampled, new_seed=False) == sampled  # the person's seed: kept
    for fixed in (GenerateSpec(temperature=0.0, seed=7), GenerateSpec(temperature=0.0, num_beams=2, seed=7)):
        assert not uses_seed(fixed) and reply_spec(fixed, new_seed=True) == fixed  # greedy, beams: no seed used
    assert uses_seed(sampled)

    class Stuck(random.Random):
        """Draws the seed to avoid twice before another one."""

        def __init__(self):
            super().__init__()
            self.draws = iter([7, 7, 9])

        def randrange(self, *_args):
            return next(self.draws)

    assert draw_seed(avoid=7, rng=Stuck()) == 9


def _run(root, name, when, *, last):
    run = root / name
    (run / "checkpoints" / "step-00000003").mkdir(parents=True)
    (run / "checkpoints" / "step-00000003" / "manifest.json").write_text("{}")
    (run / "metrics.jsonl").write_text(json.dumps({"type": "step", "step": 3}) + "\n" + json.dumps(last) + "\n")
    os.utime(run / "metrics.jsonl", (when, when))
    return run


def test_the_newest_finished_run_is_the_one_that_ended_last(tmp_path):
    from desktop_app.engine.generate.choices import finished_at, newest_finished_run

    done = {"type": "finished", "reason": "completed", "step": 3}
    old = _run(tmp_path, "old", 1000, last=done)
    new = _run(tmp_path, "new", 2000, last={"type": "finished", "reason": "stopped", "step": 3})
    training = _run(tmp_path, "training", 3000, last={"type": "step", "step": 4})
    failed = _run(tmp_path, "failed", 4000, last={"type": "finished", "reason": "failed", "step": 3})
    empty = _run(tmp_path, "empty", 5000, last=done)
    shutil.rmtree(empty / "checkpoints")  # nothing to load
    assert finished_at(old) == 1000 and finished_at(training) is None and finished_at(failed) is None
    assert finished_at(empty) is None and finished_at(tmp_path / "missing") is None
    assert newest_finished_run([old, training, new, failed, empty]) == new
    assert newest_finished_run([training, failed]) is None and newest_finished_run([]) is None
