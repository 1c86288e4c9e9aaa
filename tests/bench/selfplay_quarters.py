"""A self-play run's figures by quarter of the run, from its metrics.jsonl (prints a table; not collected).

    .venv/bin/python tests/bench/selfplay_quarters.py RUN_DIR [--json OUT.json]

Means over each quarter of the run's steps of the proposals' fates (duplicates, valid), the proposer's reward and
the solver's rate per type, the learnability of induction tasks, the replies' entropy and the buffers' distinct
programs: what docs/selfplay.md reads a collapse from.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

FIGURES = ("proposals_duplicate", "proposal_validity", "reward/proposer/induction", "solve_rate/induction",
           "learnability/induction", "entropy", "programs/deduction", "programs/induction")


def quarters(run_dir: Path) -> dict[str, list[float | None]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    steps = [r for r in rows if r.get("type") == "step"]
    size = max(1, len(steps) // 4)
    out: dict[str, list[float | None]] = {}
    for name in FIGURES:
        parts = [[float(r[name]) for r in steps[i * size:(i + 1) * size] if r.get(name) is not None]
                 for i in range(4)]
        out[name] = [statistics.mean(p) if p else None for p in parts]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    table = quarters(args.run_dir)
    print(f"{args.run_dir}: means by quarter of the run")
    for name, values in table.items():
        print(f"{name:28s} " + " ".join(f"{v:8.3f}" if v is not None else "       -" for v in values))
    if args.json:
        args.json.write_text(json.dumps({"run_dir": str(args.run_dir), "quarters": table}, indent=1) + "\n",
                             encoding="utf-8")


if __name__ == "__main__":
    main()
