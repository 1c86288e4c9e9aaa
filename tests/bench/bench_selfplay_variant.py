"""One self-play setting changed, measured against a finished demo's own arms (prints figures; not collected).

    .venv/bin/python tests/bench/bench_selfplay_variant.py --demo /tmp/sp/seed-2 --set duplicate_reward=-0.5 \
        --name dup05 [--json OUT.json]

Reruns the self-play arm of a demo that `bench_selfplay_demo.py` left in --demo (its run.json: the same base, seed,
options and time budget) with the method options given by --set, into DEMO/selfplay-NAME, then measures its final
checkpoint on the same reported set the demo used (recipes/selfplay_demo: DEMO_EVAL) and prints it beside the demo's
own arms (read from DEMO/*/evaluations.json) and the variant's curriculum, with the 1-minute load during the run
(the arms are time-budgeted: a busier machine trains fewer steps).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TYPES = ("deduction", "abduction", "induction")
ARMS = ("selfplay", "solver_rl_minimal", "solver_rl_generator", "control")


def parse_set(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = json.loads(value)
    return out


def final_rates(run_dir: Path) -> dict[str, float] | None:
    """The newest measurement's held-out solve rate per type in a run's evaluations.json."""
    path = run_dir / "evaluations.json"
    if not path.is_file():
        return None
    results = json.loads(path.read_text(encoding="utf-8")).get("results", [])
    if not results:
        return None
    metrics = results[-1]["metrics"]
    return {t: float(metrics[f"solve_rate/{t}"]) for t in TYPES if f"solve_rate/{t}" in metrics}


def run_variant(demo: Path, name: str, changes: dict[str, object]) -> tuple[Path, list[float], int]:
    from desktop_app.engine.events import Finished
    from desktop_app.engine.specs import RunConfig
    from desktop_app.engine.train.loop import train

    config = json.loads((demo / "selfplay" / "run.json").read_text(encoding="utf-8"))
    config["method_options"] = {**config["method_options"], **changes}
    out = demo / f"selfplay-{name}"
    loads, step = [], 0
    for event in train(RunConfig.from_dict(config), out):
        loads.append(os.getloadavg()[0])
        if isinstance(event, Finished):
            step = event.step
            if event.reason not in ("completed", "early_stopped"):
                raise SystemExit(f"{name}: {event.reason}: {event.message}")
    return out, loads, step


def evaluate(checkpoint: str) -> dict[str, float]:
    from desktop_app.engine.evaluate.runner import evaluate_models
    from desktop_app.engine.evaluate.spec import EvalSpec
    from desktop_app.engine.events import Controls, ModelEvaluated
    from desktop_app.engine.recipes.selfplay_demo import DEMO_EVAL, DEMO_SELFPLAY

    spec = EvalSpec.from_dict({"world": "mini", "world_options": DEMO_SELFPLAY["world_options"],
                               "task_types": list(TYPES), "max_new_tokens": DEMO_SELFPLAY["max_new_tokens"],
                               **DEMO_EVAL})
    for event in evaluate_models([checkpoint], spec, Controls()):
        if isinstance(event, ModelEvaluated):
            return {t: float(event.metrics[f"solve_rate/{t}"]) for t in TYPES}
    raise SystemExit("the evaluation gave no figures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], help="a method option, NAME=JSON")
    parser.add_argument("--name", required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from desktop_app.engine import run_folder
    from desktop_app.engine.recipes.selfplay_demo import curriculum

    changes = parse_set(args.set)
    start = time.time()
    out, loads, step = run_variant(args.demo, args.name, changes)
    checkpoint = str(run_folder.list_committed(out)[-1])
    variant = evaluate(checkpoint)
    arms = {arm: final_rates(args.demo / arm) for arm in ARMS}
    report = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "machine": {"cpu": platform.processor() or "cpu",
              "cores": os.cpu_count()}, "command": " ".join(sys.argv), "demo": str(args.demo), "changes": changes,
              "variant_steps": step, "load_mean": sum(loads) / max(1, len(loads)),
              "minutes": (time.time() - start) / 60,
              "variant": variant, "demo_arms": arms, "curriculum": curriculum(out)}
    print(f"{args.name} ({changes}): {step} steps, load mean {report['load_mean']:.2f}")
    print("| type | " + " | ".join(["variant", *ARMS]) + " |")
    for t in TYPES:
        row = [f"{variant[t]:.3f}"] + [f"{arms[a][t]:.3f}" if arms[a] else "-" for a in ARMS]
        print(f"| {t} | " + " | ".join(row) + " |")
    print(json.dumps(report["curriculum"]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
