"""The self-play CPU demo against its controls, over several seeds (run by hand; ~32 minutes per seed from the
generator, ~40 from the minimal seed).

    .venv/bin/python tests/bench/bench_selfplay_demo.py --out /tmp/sp-bench --seeds 0 1 2 --minutes 15 \
        [--tasks-from minimal] [--wait-load 1.5] [--plot docs/screenshots/selfplay_curve.png] \
        [--json docs/bench/selfplay_demo.json]

Each seed runs `selfplay-demo --control` in a fresh process: corpus -> pretraining (stops on validation loss) ->
self-play for the rest of the minutes -> the controls, each for self-play's wall time from the same checkpoint:
solver-only RL on the world's generated tasks (no proposer: the difference to self-play is what the proposer adds),
with --tasks-from minimal also solver-only RL on the identity seed alone (the floor), and continued pretraining
(what training longer gives). Every model is measured on the same 400 held-out tasks per
type (seed 9002, a set no run picks anything by, whose programs are in no training stream: the held-out protocol).
Prints, per seed and as means: the base, self-play's final and best checkpoints, the controls' final ones, the gains
over the base; the held-out programs found in the runs' training records (0 when the protocol held); the share of
trivial programs in self-play's final buffers; the curriculum self-play built; then the goals (issue 34's from the
generator, issue 50's from the minimal seed) checked on the means. The 1-minute load
average is sampled during each run (wall-time budgets make the figures depend on it). With --wait-load, each seed
waits (up to an hour) for the load to fall below it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

TYPES = ("deduction", "abduction", "induction")


def load() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(threshold: float, limit_s: float = 3600.0) -> None:
    start = time.monotonic()
    while load() > threshold and time.monotonic() - start < limit_s:
        print(f"  load {load():.2f} > {threshold}: waiting", file=sys.stderr, flush=True)
        time.sleep(120)


def run_seed(out: Path, seed: int, minutes: float, tasks_from: str) -> dict:
    """One demo with its control in its own process; its final result and the load seen meanwhile."""
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(30):
            samples.append(load())

    threading.Thread(target=sample, daemon=True).start()
    samples.append(load())
    cmd = [sys.executable, "-m", "desktop_app", "selfplay-demo", "--out", str(out), "--minutes", str(minutes),
           "--seed", str(seed), "--control", "--tasks-from", tasks_from, "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    done.set()
    finished = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"type": "finished"')]
    if proc.returncode != 0 or not finished or finished[-1]["reason"] != "completed":
        raise SystemExit(f"seed {seed} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = finished[-1]["result"]
    result["load"] = {"mean": sum(samples) / len(samples), "max": max(samples)}
    return result


NAMES = {"before": "base", "final": "self-play final", "best": "self-play best",
         "solver_rl_minimal": "solver-only RL (minimal seed)", "solver_rl_simplest": "solver-only RL (simplest)",
         "solver_rl_generator": "solver-only RL (generator)", "control": "continued pretraining"}


def rows_of(results: dict[int, dict]) -> list[str]:
    """The arms every seed measured, in the demo's order."""
    return [row for row in NAMES if all(row in r for r in results.values())]


def table(results: dict[int, dict]) -> str:
    rows = rows_of(results)
    gains = [row for row in rows if row not in ("before", "best")]
    lines = ["| seed | type | " + " | ".join(NAMES[row] for row in rows) + " | " + " | ".join(
        f"{NAMES[row]} − base" for row in gains) + " |", "|---" * (2 + len(rows) + len(gains)) + "|"]
    for seed, r in {**results, "mean": means(results)}.items():
        for t in TYPES:
            lines.append(f"| {seed} | {t} | " + " | ".join(f"{r[row][t]:.3f}" for row in rows) + " | " + " | ".join(
                f"{r[row][t] - r['before'][t]:+.3f}" for row in gains) + " |")
    return "\n".join(lines)


def means(results: dict[int, dict]) -> dict[str, dict[str, float]]:
    return {row: {t: sum(r[row][t] for r in results.values()) / len(results) for t in TYPES}
            for row in rows_of(results)}


def two_types(mean: dict, row: str, other: str, margin: float) -> str:
    """Is self-play's final checkpoint at least `other` + margin on two or more types (means), and the figures."""
    ok = sum(mean[row][t] >= mean[other][t] + margin - 1e-9 for t in TYPES) >= 2
    return f"{ok} ({', '.join(f'{t} {mean[row][t]:.3f} vs {mean[other][t]:.3f}' for t in TYPES)})"


def goals(results: dict[int, dict]) -> list[str]:
    mean = means(results)
    leaked = sum(n or 0 for r in results.values() for by_type in r.get("heldout_in_training", {}).values()
                 for n in by_type.values())
    lines = [f"reported-set programs in any run's training records: {leaked}",
             f"final >= base on every type in every seed: "
             f"{all(r['final'][t] >= r['before'][t] for r in results.values() for t in TYPES)}",
             f"final >= base + 0.10 on two or more types (mean): {two_types(mean, 'final', 'before', 0.10)}"]
    for row in ("solver_rl_minimal", "solver_rl_simplest"):
        if row in mean:
            lines.append(f"final >= {NAMES[row]} + 0.05 on two or more types (mean): "
                         f"{two_types(mean, 'final', row, 0.05)}")
    if "solver_rl_minimal" in mean or "solver_rl_simplest" in mean:
        lines.append(f"final within 0.03 of solver-only RL on the generator on two or more types (mean): "
                     f"{two_types(mean, 'final', 'solver_rl_generator', -0.03)}")
    else:
        lines.append(f"final above solver-only RL on two or more types (mean): "
                     f"{two_types(mean, 'final', 'solver_rl_generator', 1e-9)}")
    lines.append(f"final above continued pretraining on two or more types (mean): "
                 f"{two_types(mean, 'final', 'control', 1e-9)}")
    for seed, r in results.items():
        for t, c in r.get("curriculum", {}).items():
            lines.append(f"seed {seed} {t} curriculum: {c['programs']:.0f} programs, {c['shapes']:.0f} shapes, solve "
                         f"rate on new tasks {c['new_task_solve_rate']:.2f} (between 0 and 1 in "
                         f"{c['frontier_share']:.0%} of rounds), program size {c['program_size_first']:.0f} -> "
                         f"{c['program_size_last']:.0f} characters")
    return lines


def trivial_share(run_dir: Path) -> dict[str, float]:
    """The share of trivial programs among the tasks of a run's last checkpoint's buffers (as the world judges a
    proposal: constant output or the identity in disguise)."""
    from desktop_app.engine import run_folder
    from desktop_app.engine.tasks import get_world
    from desktop_app.engine.tasks.base import Task

    world = get_world("mini", references=2)
    state = run_folder.trainer_state(run_folder.latest_checkpoint(run_dir))
    out = {}
    for task_type, buffer in (state.get("data") or {}).get("buffers", {}).items():
        tasks = [Task.from_json(t) for t in buffer.get("tasks", [])]
        verdicts = world.validate(task_type, [world.proposal_text(t) for t in tasks])
        out[task_type] = sum(v.trivial for v in verdicts) / max(1, len(tasks))
    return out


def rescan(demo: Path) -> dict[str, dict[str, int]]:
    """Held-out programs in each arm's training records, counted again from the run folders (what `eval` reports
    as heldout_in_training, with this version's scan), per arm and type, on the 400 reported tasks per type."""
    from desktop_app.engine import run_folder
    from desktop_app.engine.evaluate.leakage import training_programs
    from desktop_app.engine.tasks import get_world
    from desktop_app.engine.tasks.heldout_protocol import HeldoutProtocol

    protocol = HeldoutProtocol(get_world("mini", references=2))
    reported = {t: protocol.reported(t, 400) for t in TYPES}
    out = {}
    runs = [("before", "pretrain"), ("final", "selfplay"), ("control", "control")] + [
        (p.name, p.name) for p in sorted(demo.glob("solver_rl_*"))]
    for arm, run in runs:
        found = training_programs(run_folder.latest_checkpoint(demo / run))
        out[arm] = {t: found.count(tasks) for t, tasks in reported.items()} if found is not None else {}
    return out


def machine() -> dict[str, object]:
    from desktop_app.engine.devices import cpu_name

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "gpu": "none (CPU demo)"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--tasks-from", default="generator", choices=("generator", "minimal", "simplest"),
                        help="self-play's first tasks (minimal: the identity alone, with its own solver-only control)")
    parser.add_argument("--wait-load", type=float, default=0.0, help="wait for the 1-minute load to fall below this")
    parser.add_argument("--plot", default="", help="draw the held-out curves of every seed into this PNG")
    parser.add_argument("--json", default="", help="also write the raw results (with date and machine) here")
    parser.add_argument("--rescan", action="store_true",
                        help="only count again the held-out programs in the training records of the seeds in --out")
    args = parser.parse_args()
    out = Path(args.out)
    if args.rescan:
        print(json.dumps({seed: rescan(out / f"seed-{seed}") for seed in args.seeds}))
        return
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict] = {}
    for seed in args.seeds:
        if args.wait_load:
            wait_for_quiet(args.wait_load)
        print(f"seed {seed}: load {load():.2f} at the start", file=sys.stderr, flush=True)
        start = time.monotonic()
        results[seed] = run_seed(out / f"seed-{seed}", seed, args.minutes, args.tasks_from)
        r = results[seed]
        r["trivial_share"] = trivial_share(out / f"seed-{seed}" / "selfplay")
        print(f"seed {seed}: {(time.monotonic() - start) / 60:.1f} min, load mean {r['load']['mean']:.2f} max "
              f"{r['load']['max']:.2f}, steps {r['steps']}, trivial share of the final buffers "
              f"{r['trivial_share']}", file=sys.stderr, flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    for line in goals(results):
        print("-", line)
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(),
                                               "command": " ".join(sys.argv), "results": results,
                                               "table": table(results), "goals": goals(results)}, indent=1))
    if args.plot:
        here = Path(__file__).resolve().parent
        subprocess.run([sys.executable, str(here / "plot_selfplay_curve.py"), args.plot,
                        *[str(out / f"seed-{s}") for s in args.seeds]], check=True)


if __name__ == "__main__":
    main()
