"""`selfplay-demo`: the complete demonstration of self-play, headless.

From scratch (the CPU demo): seed corpus of the mini task world -> tokenizer + dataset -> pretrain a tiny model
(stopping on validation loss) -> Absolute Zero self-play from its best checkpoint; with `--base MODEL`, self-play
from any chat model (the python world by default; `--device cuda` on a GPU). `--control` adds the same wall time
of plain training from the same start, to compare with. Prints the same events as `train` (one JSON object per
line with --json) and at the end the held-out solve rate per task type of the base, the final and the best
self-play checkpoints (and the control). Ctrl+C stops gracefully (a checkpoint is kept).
"""

from __future__ import annotations

import argparse

from desktop_app.cli.reporting import StopSignals, consume
from desktop_app.engine.events import Controls
from desktop_app.engine.method_options import TASKS_FROM
from desktop_app.engine.recipes.selfplay_demo import run_demo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) folder for the demo's files")
    parser.add_argument("--minutes", type=float, default=15.0, metavar="M",
                        help="time budget in minutes, pretraining and self-play together (default 15)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the corpus, the models and the rollouts")
    parser.add_argument("--control", action="store_true",
                        help="then spend self-play's wall time on plain training from the same start (continued "
                             "pretraining; with --base, fine-tuning on seed tasks), to compare with")
    parser.add_argument("--base", default="", metavar="MODEL",
                        help="self-play from this model (a chat model's Hugging Face folder, a run, checkpoint or "
                             "export) instead of pretraining a tiny one")
    parser.add_argument("--world", choices=("auto", "mini", "python"), default="",
                        help="task world (default: mini from scratch; with --base, python for a chat model)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto",
                        help="where to train and evaluate (default auto)")
    parser.add_argument("--tasks-from", choices=TASKS_FROM, default="", help="self-play's first tasks: generator "
                        "(the world's generated tasks, the default), minimal (the identity program alone, as Absolute "
                        "Zero starts; with --control also solver-only RL from that seed) or simplest (the "
                        "generator's shortest programs)")
    parser.add_argument("--json", action="store_true", help="one JSON object per event on stdout")


def run(args: argparse.Namespace) -> int:
    controls = Controls()
    with StopSignals(controls):
        return consume(run_demo(args.out, minutes=args.minutes, seed=args.seed, controls=controls,
                                control=args.control, base=args.base, world=args.world, device=args.device,
                                tasks_from=args.tasks_from), [],
                       as_json=args.json)
