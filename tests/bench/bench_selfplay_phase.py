"""The self-play phase of a finished demo again, from the same base checkpoint, for the same time, with this
version's code and any method options changed; then its final checkpoint on the reported set (run by hand: an A/B
of a recipe change that leaves pretraining out of the noise; ~9 minutes on a 2-core CPU).

    .venv/bin/python tests/bench/bench_selfplay_phase.py DEMO_DIR OUT_DIR [option=JSON ...]
    e.g. ... /tmp/sp-bench/seed-0 /tmp/ab-cap0 max_tasks_per_shape=0

Prints the run's ending, its final checkpoint's greedy solve rate per type on the 400 reported tasks per type (seed
9002), the held-out programs `eval` found in its records, and how many proposals got each verdict.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.evaluate.runner import evaluate_models
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.loop import train


def main() -> None:
    demo, out = Path(sys.argv[1]), Path(sys.argv[2])
    config = RunConfig.load(demo / "selfplay" / "run.json")
    options = dict(config.method_options)
    for pair in sys.argv[3:]:
        key, value = pair.split("=", 1)
        options[key] = json.loads(value)
    config = config.replace(method_options=options)
    start, finished = time.time(), None
    for event in train(config, out):
        if event.type == "finished":
            finished = event
    assert finished is not None
    print(f"{time.strftime('%Y-%m-%d %H:%M')} self-play {finished.reason} at step {finished.step} in "
          f"{time.time() - start:.0f} s (options changed: {sys.argv[3:]})", flush=True)
    spec = EvalSpec.from_dict({"world": "mini", "world_options": options.get("world_options", {}), "per_type": 400,
                               "heldout_seed": 9002, "max_new_tokens": options["max_new_tokens"]})
    for event in evaluate_models([finished.result["checkpoint"]], spec):
        if event.type == "model_evaluated":
            print("final", {k: round(v, 3) for k, v in event.metrics.items()
                            if k.startswith(("solve_rate/", "heldout_in_training/")) and "ci95" not in k}, flush=True)
    lines = (out / "selfplay.jsonl").read_text(encoding="utf-8").splitlines()
    verdicts = Counter(p["verdict"] for line in lines for p in json.loads(line)["proposals"])
    print("proposals", dict(verdicts))


if __name__ == "__main__":
    main()
