"""Self-play on 1 and 2 processes of this machine: episodes per second, and where a step's time goes (decoding,
executing the tasks, the update, communication), per process.

    .venv/bin/python tests/bench/bench_selfplay_processes.py [--pretrain-steps 200] [--steps 16] [--out docs/bench]

The CPU demo's setting: a seed corpus of the mini world, the tiny preset pretrained on it for `--pretrain-steps`
steps, then self-play with the demo's options (DEMO_SELFPLAY: 2 proposals and 6 tasks x 4 answers per type, 3 types,
replies up to 40 tokens: 78 episodes a step) for `--steps` steps on 1 process (every core) and on 2 processes
(torchrun, gloo, the cores shared: the app's own thread policy in both). Each process times its share of a step from
inside the real loop (this file is also the worker torchrun starts: `--worker`):
  decode    the rollouts this process samples (its block of every decode)
  execute   the task world judging its replies (proposals validated, answers checked)
  gather    sending its replies and verdicts to the others and receiving theirs (communication)
  sync      the loop's one small all-reduce per step (loss, figures, control flags; communication)
  update    forward + backward (with DDP's gradient all-reduce inside it) + optimizer step; the rest of the step
  other     the round's bookkeeping (rewards, fates, buffers, the task browser's log)
DDP's gradient all-reduce overlaps backward, so it is measured apart too: the same bytes all-reduced alone.
The first `--warmup` steps are left out. Episodes per second = every process's decoded replies per step / the step's
time (process 0's clock). Each process count runs `--repeats` times, alternating, and its fastest run is kept (the
machine's other load, recorded as load averages, slows some). Writes selfplay_processes_DATE.json and .log into --out.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
PARTS = ("decode", "execute", "gather", "sync", "update", "other")


# --- the worker: one process of the run, timing its share -------------------------------------------------------

class Clock:
    """Seconds per part of each step, this process's (a step starts when its round is taken)."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = defaultdict(float)
        self.started: float | None = None
        self.allreduce_s = 0.0

    def new_step(self) -> None:
        now = time.perf_counter()
        if self.started is not None:
            self.steps.append({**self.current, "step": now - self.started})
        self.current, self.started = defaultdict(float), now

    def timed(self, part: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.current[part] += time.perf_counter() - t0
        return wrapper


def worker(config_path: str, out: str, timings: str) -> None:
    from desktop_app.engine.events import Controls
    from desktop_app.engine.objectives.episodes import EpisodeObjective
    from desktop_app.engine.selfplay import rollout
    from desktop_app.engine.specs import RunConfig
    from desktop_app.engine.tasks.mini_world import MiniWorld
    from desktop_app.engine.train import distributed, loop, sync

    clock = Clock()
    sample = EpisodeObjective._sample

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        ids, texts = sample(self, *args, **kwargs)
        clock.current["episodes"] += len(ids)
        return ids, texts

    EpisodeObjective._sample = clock.timed("decode", counted)
    MiniWorld.validate = clock.timed("execute", MiniWorld.validate)
    MiniWorld.check = clock.timed("execute", MiniWorld.check)
    distributed.DistContext.gather = clock.timed("gather", distributed.DistContext.gather)
    sync.SyncedControls.sync_step = clock.timed("sync", sync.SyncedControls.sync_step)
    take = rollout.RoundSource.take

    def take_round(self: Any, count: int) -> Any:
        clock.new_step()
        return clock.timed("round", take)(self, count)

    rollout.RoundSource.take = take_round
    wrap, close = distributed.wrap, distributed.DistContext.close
    sizes: list[int] = []

    def wrapping(model: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(sum(p.numel() for p in model.parameters() if p.requires_grad))
        return wrap(model, *args, **kwargs)

    def closing(self: Any, *, clean: bool) -> None:
        if clean and sizes:  # the gradients' bytes all-reduced alone, as DDP does in backward (fp32)
            import torch
            import torch.distributed as dist

            grads = torch.zeros(sizes[0])
            for _ in range(3):
                dist.all_reduce(grads)
            t0 = time.perf_counter()
            for _ in range(20):
                dist.all_reduce(grads)
            clock.allreduce_s = (time.perf_counter() - t0) / 20
        close(self, clean=clean)

    distributed.wrap = wrapping
    distributed.DistContext.close = closing
    events = list(loop.train(RunConfig.load(config_path), out, Controls()))
    clock.new_step()
    rank = int(os.environ.get("RANK", "0"))
    Path(timings, f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "world": int(os.environ.get("WORLD_SIZE", "1")), "steps": clock.steps,
        "allreduce_s": clock.allreduce_s, "gradient_params": sizes[0] if sizes else 0,
        "finished": events[-1].reason if events else "", "threads": __import__("torch").get_num_threads()}))


# --- the driver -----------------------------------------------------------------------------------------------

def build_base(folder: Path, steps: int) -> Path:
    """The demo's start: a mini-world seed corpus, its dataset, the tiny preset pretrained on it."""
    from desktop_app.engine.data.prepare import prepare_dataset
    from desktop_app.engine.recipes.selfplay_demo import DEMO_WORLD, PRETRAIN
    from desktop_app.engine.specs import DataSpec
    from desktop_app.engine.tasks import get_world
    from desktop_app.engine.tasks.base import TASK_TYPES
    from desktop_app.engine.train.loop import train
    from desktop_app.engine.train.request import config_from_preset

    (folder / "corpus").mkdir(parents=True)
    get_world("mini", **DEMO_WORLD).write_seed_corpus(folder / "corpus" / "mini.txt", 4000, 0, TASK_TYPES,
                                                      proposals=True)
    for _ in prepare_dataset([folder / "corpus"], folder / "dataset",
                             DataSpec(tokenizer="bpe", vocab_size=160, context_length=256, val_fraction=0.02)):
        pass
    config, _ = config_from_preset(folder / "dataset", "tiny", steps=steps,
                                   **{**PRETRAIN, "eval_every": 0, "save_every": steps, "threads": 0})
    events = list(train(config, folder / "pretrain"))
    assert events[-1].reason == "completed", events[-1]
    return folder / "pretrain"


def run(config: Path, folder: Path, processes: int, attempt: int) -> list[dict[str, Any]]:
    timings = folder / f"timings-{processes}-{attempt}"
    timings.mkdir()
    me = [str(Path(__file__).resolve()), "--worker", str(config), str(folder / f"run-{processes}-{attempt}"),
          str(timings)]
    cmd = [sys.executable, *me] if processes == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *me]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // processes)))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return [json.loads((timings / f"rank{r}.json").read_text()) for r in range(processes)]


def summarise(ranks: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Per process: the mean seconds of each part of a step (after the warm-up); episodes per second overall."""
    steps = [r["steps"][warmup:] for r in ranks]
    count = min(len(s) for s in steps)
    step_s = [steps[0][i]["step"] for i in range(count)]  # process 0's clock (every step ends in a common sync)
    episodes = [sum(s[i].get("episodes", 0.0) for s in steps) for i in range(count)]
    per_process = []
    for rank, mine in zip(ranks, steps, strict=True):
        mean = {k: statistics.fmean(s.get(k, 0.0) for s in mine[:count]) for k in ("step", "round", "decode",
                                                                                   "execute", "gather", "sync")}
        parts = {"decode": mean["decode"], "execute": mean["execute"], "gather": mean["gather"], "sync": mean["sync"],
                 "update": mean["step"] - mean["round"] - mean["sync"],
                 "other": mean["round"] - mean["decode"] - mean["execute"] - mean["gather"]}
        per_process.append({"rank": rank["rank"], "threads": rank["threads"], "step_s": mean["step"],
                            "seconds": parts, "share": {k: v / mean["step"] for k, v in parts.items()},
                            "communication_share": (parts["gather"] + parts["sync"]) / mean["step"],
                            "gradient_allreduce_alone_s": rank["allreduce_s"]})
    return {"processes": len(ranks), "steps_measured": count, "step_s_median": statistics.median(step_s),
            "episodes_per_step": statistics.fmean(episodes),
            "episodes_per_s": sum(episodes) / sum(step_s), "per_process": per_process,
            "gradient_params": ranks[0]["gradient_params"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pretrain-steps", type=int, default=200)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each process count (the fastest is kept)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    parser.add_argument("--worker", nargs=3, metavar=("CONFIG", "OUT", "TIMINGS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    import torch

    from desktop_app.engine import devices
    from desktop_app.engine.recipes.selfplay_demo import DEMO_SELFPLAY, SELFPLAY_TRAIN
    from desktop_app.engine.specs import RunConfig, TrainSpec

    load_before = os.getloadavg()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        base = build_base(folder, args.pretrain_steps)
        options = {**DEMO_SELFPLAY, "heldout_per_type": 8, "seed_tasks_per_type": 200}
        train = {**SELFPLAY_TRAIN, "steps": args.steps, "eval_every": 0, "save_every": 0, "early_stopping_patience": 0}
        config = RunConfig(base_model=str(base), objective="selfplay", method_options=options,
                           train=TrainSpec.from_dict(train).to_dict(), seed=0)
        config.save(folder / "selfplay.json")
        tries: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        for attempt in range(args.repeats):  # 1, 2, 1, 2, ...: a busy spell of the machine hits both alike
            for n in (1, 2):
                tries[n].append(summarise(run(folder / "selfplay.json", folder, n, attempt), args.warmup))
        results = [min(tries[n], key=lambda r: r["step_s_median"]) for n in (1, 2)]  # each one's least disturbed
        for r in results:
            r["step_s_median_of_each_try"] = [t["step_s_median"] for t in tries[r["processes"]]]
    lines = [f"self-play, the CPU demo's setting (tiny preset, {results[0]['gradient_params']:,} trainable parameters; "
             f"{results[0]['episodes_per_step']:.0f} episodes a step), {args.steps} steps, the first {args.warmup} "
             "left out", "| processes | step (median) | episodes / s | per process: decode | execute | gather | sync | "
             "update | other | gradient all-reduce alone |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for p in r["per_process"]:
            s = p["share"]
            lines.append(f"| {r['processes']} (process {p['rank']}, {p['threads']} thread(s)) | "
                         f"{r['step_s_median'] * 1e3:.0f} ms | {r['episodes_per_s']:.1f} | {s['decode']:.0%} | "
                         f"{s['execute']:.0%} | {s['gather']:.0%} | {s['sync']:.0%} | {s['update']:.0%} | "
                         f"{s['other']:.0%} | {p['gradient_allreduce_alone_s'] * 1e3:.2f} ms |")
    load_after = os.getloadavg()
    lines.append(f"load average before / after: {load_before[0]:.2f} / {load_after[0]:.2f} on {os.cpu_count()} "
                 f"cores; {time.perf_counter() - started:.0f} s in all")
    text = "\n".join(lines)
    print(text)
    date = datetime.date.today().isoformat()
    out = Path(args.out)
    record = {"date": date, "machine": platform.node(), "platform": platform.platform(), "cpu": devices.cpu_name(),
              "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
              "load_average_before": load_before, "load_average_after": load_after,
              "setting": {"pretrain_steps": args.pretrain_steps, "selfplay_steps": args.steps, "warmup": args.warmup,
                          "repeats": args.repeats,
                          "method_options": options, "train": train},
              "results": results}
    (out / f"selfplay_processes_{date}.json").write_text(json.dumps(record, indent=1) + "\n")
    (out / f"selfplay_processes_{date}.log").write_text(text + "\n")


if __name__ == "__main__":
    main()
