"""`selfplay-demo`: the complete CPU demonstration of self-play, headless.

Seed corpus of the mini task world -> tokenizer + dataset -> pretrain a tiny model -> Absolute Zero
self-play, printing the same events as `train` (one JSON object per line with --json) and at the end the
held-out solve rate per task type before and after self-play. Ctrl+C stops gracefully (a checkpoint is kept).
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder for the demo's files")
    parser.add_argument("--minutes", type=float, default=15.0, metavar="M",
                        help="time budget in minutes, pretraining and self-play together (default 15)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the corpus, the models and the rollouts")
    parser.add_argument("--json", action="store_true", help="one JSON object per event on stdout")


def run(args: argparse.Namespace) -> int:
    from desktop_app.cli.reporting import StopSignals, consume
    from desktop_app.engine.events import Controls
    from desktop_app.engine.recipes.selfplay_demo import run_demo

    controls = Controls()
    with StopSignals(controls):
        return consume(run_demo(args.out, minutes=args.minutes, seed=args.seed, controls=controls), [],
                       as_json=args.json)
