"""A real hyperparameter sweep on the sample corpus, with and without pruning (not collected by pytest).

    .venv/bin/python tests/bench/bench_sweep.py [--trials 12] [--steps 150] [--threads 1] [--out docs/bench/...]

The tiny preset pretrains on the bundled sample corpus (prepared once: 1,024 tokens, 64-token windows), --steps steps
per trial with an evaluation every sixth of them, and a sweep varies its learning rate over 1e-4..1e-1 (log):
  * random sampler, no pruning: every trial trains to the end (the reference);
  * random sampler, median pruning: the same seed proposes the same learning rates in the same order, so the two
    sweeps differ only by pruning: the steps it saves, and whether it keeps the same best trial;
  * TPE (the default sampler) with median pruning: the learning rate a sweep as people run it finds;
  * the method's default learning rate (1e-3 for pretraining) trained once with the same settings, to compare.
Prints one line per trial and writes every figure with the date, machine and CPU to --out (JSON). Steps are the
measure of work; wall time also moves with the machine's load (each trial's training seconds and the sweep's
milliseconds per step show how much).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from desktop_app.engine.devices import cpu_cores, cpu_name  # noqa: E402
from desktop_app.engine.events import Controls  # noqa: E402
from desktop_app.engine.methods import default_lr  # noqa: E402
from desktop_app.engine.run_folder import read_metrics  # noqa: E402
from desktop_app.engine.session import open_session  # noqa: E402
from desktop_app.engine.sweep.runner import NewSweep, open_sweep  # noqa: E402
from desktop_app.engine.sweep.spec import SweepSpec  # noqa: E402
from desktop_app.engine.train.request import RunRequest  # noqa: E402

VARY = "lr=1e-4..1e-1:log"


def prepare(folder: Path) -> Path:
    dataset = folder / "sample"
    if not (dataset / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "desktop_app", "prepare", str(ROOT / "resources" / "sample_corpus"),
                        "--out", str(dataset), "--vocab-size", "1024", "--context", "64", "--quiet"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
    return dataset


def base_request(dataset: Path, args: argparse.Namespace, **train: object) -> RunRequest:
    settings = {"steps": args.steps, "batch_size": 16, "eval_every": args.steps // 6, "eval_batches": 8,
                "save_every": 0, "warmup_steps": args.steps // 10, "sample_tokens": 0, "threads": args.threads,
                "trackers": [], **train}
    return RunRequest(dataset=str(dataset), preset="tiny", train=settings, seed=0)


def sweep(name: str, folder: Path, request: RunRequest, args: argparse.Namespace, **spec: object) -> dict:
    t0 = time.perf_counter()
    opened = open_sweep(NewSweep(request, SweepSpec(vary=[VARY], trials=args.trials, seed=args.seed, **spec)),
                        folder / name)
    trials = []
    for event in opened.events(Controls()):
        if event.type == "trial_end":
            lr = event.params["train.lr"]
            steps = [r for r in read_metrics(event.run_dir) if r.get("type") == "step"]
            trials.append({"number": event.number, "lr": lr, "state": event.state, "value": event.value,
                           "steps": event.steps, "train_s": round(steps[-1]["elapsed_s"], 2) if steps else 0.0})
            print(f"{name:>14} trial {event.number:2d} lr {lr:.3g}: {event.state:8s} {event.value or 0:.4f} after "
                  f"{event.steps} steps", flush=True)
        elif event.type == "finished":
            result = event.result
    seconds = time.perf_counter() - t0
    best = result["best"]
    print(f"{name:>14}: {result['steps']} steps, {result['pruned']} pruned, {seconds:.0f} s; best trial "
          f"{best['number']} lr {best['params']['train.lr']:.3g} val_loss {best['value']:.4f}", flush=True)
    train_s = sum(t["train_s"] for t in trials)
    return {"spec": spec, "seconds": round(seconds, 1), "train_s": round(train_s, 1),
            "ms_per_step": round(1000 * train_s / max(1, result["steps"]), 1), "steps": result["steps"],
            "pruned": result["pruned"],
            "complete": result["complete"], "best": {k: best[k] for k in ("number", "value", "params")},
            "trials": trials}


def default_run(folder: Path, dataset: Path, args: argparse.Namespace) -> dict:
    lr = default_lr("causal_lm")
    session = open_session(base_request(dataset, args, lr=lr), folder / "default-lr")
    evals = [e.metrics["val_loss"] for e in session.events(Controls()) if e.type == "eval"]
    print(f"{'default lr':>14} {lr:g}: best val_loss {min(evals):.4f}", flush=True)
    return {"lr": lr, "value": min(evals), "curve": evals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", default="", help="folder for the dataset and sweeps (default: a temporary one)")
    parser.add_argument("--out", default="", help="JSON file for the figures")
    args = parser.parse_args()
    folder = Path(args.work or tempfile.mkdtemp(prefix="bench-sweep-"))
    dataset = prepare(folder)
    request = base_request(dataset, args)
    t0 = time.perf_counter()
    runs = {
        "random": sweep("random", folder, request, args, sampler="random", pruner="none"),
        "random+median": sweep("random+median", folder, request, args, sampler="random", pruner="median"),
        "tpe+median": sweep("tpe+median", folder, request, args, sampler="tpe", pruner="median"),
    }
    default = default_run(folder, dataset, args)
    full, cut = runs["random"], runs["random+median"]
    summary = {"steps_saved_by_pruning": 1 - cut["steps"] / full["steps"],
               "same_best_trial": full["best"]["number"] == cut["best"]["number"],
               "found_lr": runs["tpe+median"]["best"]["params"]["train.lr"],
               "found_value": runs["tpe+median"]["best"]["value"], "default_lr": default["lr"],
               "default_value": default["value"]}
    print(json.dumps(summary), flush=True)
    payload = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
               "cpu": f"{cpu_name()}, {cpu_cores()} cores", "python": platform.python_version(),
               "command": "python tests/bench/bench_sweep.py " + " ".join(sys.argv[1:]), "vary": VARY,
               "trials": args.trials, "steps": args.steps, "threads": args.threads,
               "seconds": round(time.perf_counter() - t0, 1), "summary": summary, "sweeps": runs,
               "default_lr_run": default}
    if args.out:
        Path(args.out).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
