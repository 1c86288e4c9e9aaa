"""The self-play CPU demo against its control, over several seeds (run by hand; minutes per seed).

    .venv/bin/python tests/bench/bench_selfplay_demo.py --out /tmp/sp-bench --seeds 0 1 2 --minutes 15 \
        [--wait-load 1.5] [--plot docs/screenshots/selfplay_curve.png]

Each seed runs `selfplay-demo --control` in a fresh process: corpus -> pretraining (stops on validation loss) ->
self-play for the rest of the minutes -> the same wall time of continued pretraining from the same checkpoint (the
control, the plain reference measured in the same run). Every model is measured on the same 400 held-out tasks per
type (seed 9002, a set neither run picks anything by). Prints, per seed and as means: the base, self-play's final
and best checkpoints, the control's final one, and the gains over the base; then the goals of issue 24 checked on
the means. The 1-minute load average is sampled during each run (the machine may be shared: wall-time budgets
make the figures depend on it). With --wait-load, each seed waits (up to an hour) for the load to fall below it.
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
ROWS = ("before", "final", "best", "control")


def load() -> float:
    return os.getloadavg()[0]


def wait_for_quiet(threshold: float, limit_s: float = 3600.0) -> None:
    start = time.monotonic()
    while load() > threshold and time.monotonic() - start < limit_s:
        print(f"  load {load():.2f} > {threshold}: waiting", file=sys.stderr, flush=True)
        time.sleep(120)


def run_seed(out: Path, seed: int, minutes: float) -> dict:
    """One demo with its control in its own process; its final result and the load seen meanwhile."""
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(30):
            samples.append(load())

    threading.Thread(target=sample, daemon=True).start()
    samples.append(load())
    cmd = [sys.executable, "-m", "desktop_app", "selfplay-demo", "--out", str(out), "--minutes", str(minutes),
           "--seed", str(seed), "--control", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    done.set()
    finished = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"type": "finished"')]
    if proc.returncode != 0 or not finished or finished[-1]["reason"] != "completed":
        raise SystemExit(f"seed {seed} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result = finished[-1]["result"]
    result["load"] = {"mean": sum(samples) / len(samples), "max": max(samples)}
    return result


def table(results: dict[int, dict]) -> str:
    lines = ["| seed | type | base | self-play final | self-play best | control | final − base | control − base |",
             "|---|---|---|---|---|---|---|---|"]
    for seed, r in results.items():
        for t in TYPES:
            gain, control = r["final"][t] - r["before"][t], r["control"][t] - r["before"][t]
            lines.append(f"| {seed} | {t} | {r['before'][t]:.3f} | {r['final'][t]:.3f} | {r['best'][t]:.3f} | "
                         f"{r['control'][t]:.3f} | {gain:+.3f} | {control:+.3f} |")
    means = {row: {t: sum(r[row][t] for r in results.values()) / len(results) for t in TYPES} for row in ROWS}
    for t in TYPES:
        lines.append(f"| mean | {t} | {means['before'][t]:.3f} | {means['final'][t]:.3f} | {means['best'][t]:.3f} | "
                     f"{means['control'][t]:.3f} | {means['final'][t] - means['before'][t]:+.3f} | "
                     f"{means['control'][t] - means['before'][t]:+.3f} |")
    return "\n".join(lines)


def goals(results: dict[int, dict]) -> list[str]:
    n = len(results)
    mean = {row: {t: sum(r[row][t] for r in results.values()) / n for t in TYPES} for row in ROWS}
    gain = {t: mean["final"][t] - mean["before"][t] for t in TYPES}
    control = {t: mean["control"][t] - mean["before"][t] for t in TYPES}
    return [f"final >= base on every type: {all(g >= 0 for g in gain.values())} "
            f"({', '.join(f'{t} {g:+.3f}' for t, g in gain.items())})",
            f"final >= base + 0.10 on two or more types: {sum(g >= 0.10 for g in gain.values()) >= 2}",
            f"self-play's gain beats the control's on two or more types: "
            f"{sum(gain[t] > control[t] for t in TYPES) >= 2} "
            f"({', '.join(f'{t} {gain[t]:+.3f} vs {control[t]:+.3f}' for t in TYPES)})"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--wait-load", type=float, default=0.0, help="wait for the 1-minute load to fall below this")
    parser.add_argument("--plot", default="", help="draw the held-out curves of every seed into this PNG")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[int, dict] = {}
    for seed in args.seeds:
        if args.wait_load:
            wait_for_quiet(args.wait_load)
        print(f"seed {seed}: load {load():.2f} at the start", file=sys.stderr, flush=True)
        start = time.monotonic()
        results[seed] = run_seed(out / f"seed-{seed}", seed, args.minutes)
        r = results[seed]
        print(f"seed {seed}: {(time.monotonic() - start) / 60:.1f} min, load mean {r['load']['mean']:.2f} max "
              f"{r['load']['max']:.2f}, self-play steps {r['steps'].get('selfplay')}, pretraining steps "
              f"{r['steps'].get('pretrain')}, control steps {r['steps'].get('control')}", file=sys.stderr, flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    for line in goals(results):
        print("-", line)
    if args.plot:
        here = Path(__file__).resolve().parent
        subprocess.run([sys.executable, str(here / "plot_selfplay_curve.py"), args.plot,
                        *[str(out / f"seed-{s}") for s in args.seeds]], check=True)


if __name__ == "__main__":
    main()
