"""A benchmark of this checkout against an earlier commit, side by side in one run (not collected by pytest).

    .venv/bin/python tests/bench/bench_before_after.py --base REV [--rounds 2] [--out FILE.json]
        [--train "ARGS for bench_train.py"] [--generate "ARGS for bench_generate.py"] [--startup N]

--startup N adds the window's start-up: N fresh `python -m desktop_app --smoke-test` processes per round in each
tree (offscreen), the wall time from spawn to "window shown" and the in-process figure the app prints.

The earlier commit is checked out into a temporary git worktree; bench_train.py and bench_generate.py then run from
each tree in turn (base, this checkout, base, ...), each in a fresh process that imports its own tree's code, so a
change of load on the machine hits both alike (the order alternates between rounds). Besides tokens/s it compares
each run's speed relative to a reference neither commit changes (transformers' generate(), a plain llama): the
machine's state cancels out of those. It prints, per figure, the median of each side and their ratio, and
writes the raw output of every run with the date, the machine and both commits to --out. A refactor that is to
leave speed alone should show ratios within the runs' own spread (compare the rounds of one side).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATE_ROW = re.compile(r"^\s*(\w+)\s+[\d.]+M\s+([\w-]+)\s+(\d+) \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)")
TRAIN_FIGURES = ("loop_tok_s", "bare_tok_s", "gpt_tok_s", "llama_tok_s", "hf_tok_s")


def _rev(tree: Path, rev: str = "HEAD") -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", rev], capture_output=True, text=True,
                          check=True).stdout.strip()


def _run(tree: Path, bench: str, args: str) -> str:
    command = [sys.executable, str(tree / "tests" / "bench" / bench), *shlex.split(args)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tree, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{bench} failed in {tree}:\n{done.stderr[-3000:]}")
    return done.stdout


def train_figures(output: str) -> dict[str, float]:
    """tokens/s per preset and contender, from bench_train.py's closing JSON line, and our loop's speed relative
    to the plain llama of the same run (code neither commit changes: what the machine's state does to both cancels)."""
    rows = json.loads(output.strip().splitlines()[-1])["rows"]
    out = {f"train {row['preset']} {key}": float(row[key]) for row in rows for key in TRAIN_FIGURES if key in row}
    for row in rows:
        if row.get("llama_tok_s"):
            out[f"train {row['preset']} loop / plain llama"] = float(row["loop_tok_s"]) / float(row["llama_tok_s"])
    return out


def generate_figures(output: str) -> dict[str, float]:
    """tokens/s of ours, ours@1, generate()@1 and generate()@N per model, condition and batch."""
    out = {}
    for line in output.splitlines():
        m = GENERATE_ROW.match(line)
        if m:
            name, condition, batch = m.group(1), m.group(2), m.group(3)
            row = f"generate {name} {condition} batch {batch}"
            for label, value in zip(("ours", "ours@1", "gen@1", "gen@N"), m.groups()[3:], strict=True):
                out[f"{row} {label}"] = float(value)
            # relative to transformers' generate() in the same run: neither commit changes it
            out[f"{row} ours / gen@1"] = out[f"{row} ours"] / out[f"{row} gen@1"]
    return out


def _startup(tree: Path, times: int) -> str:
    """`times` start-ups of the app in `tree` (bench_ui.window_times), one "wall in-process" line each."""
    import os

    from bench_ui import window_times

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    return "\n".join(f"{wall:.3f} {inside:.3f}" for wall, inside in window_times(times, env, tree))


def startup_figures(output: str) -> dict[str, float]:
    pairs = [line.split() for line in output.splitlines() if line.strip()]
    return {"window shown, wall s": statistics.median(float(a) for a, _ in pairs),
            "window shown, in-process s": statistics.median(float(b) for _, b in pairs)}


def compare(runs: list[dict]) -> list[dict]:
    """Per figure: the median of each side over its rounds, their ratio, and each side's spread (max/min)."""
    names = sorted({k for r in runs for k in r["figures"]})
    rows = []
    for name in names:
        side = {s: [r["figures"][name] for r in runs if r["side"] == s and name in r["figures"]]
                for s in ("base", "current")}
        if not side["base"] or not side["current"]:
            continue
        base, current = statistics.median(side["base"]), statistics.median(side["current"])
        rows.append({"figure": name, "base": base, "current": current, "ratio": current / base if base else None,
                     "base_spread": max(side["base"]) / min(side["base"]) if min(side["base"]) else None,
                     "current_spread": max(side["current"]) / min(side["current"])
                     if min(side["current"]) else None})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the earlier commit (e.g. HEAD~1, a tag, a hash)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--train", default="--presets tiny,mini --steps 6 --thread-compare ''",
                    help="arguments of bench_train.py ('' skips it)")
    ap.add_argument("--generate", default="--models tiny,mini --conditions idle --repeats 3",
                    help="arguments of bench_generate.py ('' skips it)")
    ap.add_argument("--startup", type=int, default=0, help="window start-ups per round and tree (0 skips it)")
    ap.add_argument("--out", help="write the raw outputs and the comparison here (JSON)")
    args = ap.parse_args()
    benches = [(b, a, parse) for b, a, parse in (("bench_train.py", args.train, train_figures),
                                                  ("bench_generate.py", args.generate, generate_figures)) if a]
    if args.startup:
        benches.append(("startup", str(args.startup), startup_figures))
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base_tree), args.base],
                       check=True, capture_output=True)
        try:
            trees = {"base": base_tree, "current": ROOT}
            revs = {side: _rev(tree) for side, tree in trees.items()}
            runs = []
            for round_index in range(args.rounds):
                order = ("base", "current") if round_index % 2 == 0 else ("current", "base")  # neither always first
                for side in order:
                    for bench, bench_args, parse in benches:
                        started = time.time()
                        output = _startup(trees[side], int(bench_args)) if bench == "startup" else \
                            _run(trees[side], bench, bench_args)
                        runs.append({"round": round_index, "side": side, "bench": bench, "args": bench_args,
                                     "seconds": round(time.time() - started, 1), "figures": parse(output),
                                     "output": output})
                        print(f"round {round_index + 1} {side:7s} {bench}: {runs[-1]['seconds']} s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base_tree)],
                           capture_output=True)
    rows = compare(runs)
    print(f"\n{'figure':60s} {'base':>9s} {'current':>9s} {'ratio':>6s} {'spread b/c':>11s}")
    for r in rows:
        print(f"{r['figure']:60s} {r['base']:9.3g} {r['current']:9.3g} {r['ratio']:6.2f} "
              f"{r['base_spread']:5.2f}/{r['current_spread']:.2f}")
    if args.out:
        import torch

        from desktop_app.engine.devices import cpu_name

        record = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": {
            "cpu": cpu_name(), "cores": __import__("os").cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "gpu": None},
            "commits": revs, "rounds": args.rounds, "comparison": rows, "runs": runs}
        Path(args.out).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
