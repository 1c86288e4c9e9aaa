"""`train`: train a model headless, or resume a run.

    python -m desktop_app train --dataset DATASET_DIR --preset tiny --out RUN_DIR [--steps N] ...
    python -m desktop_app train --config run.json --out RUN_DIR
    python -m desktop_app train --resume RUN_DIR [--accept-config-change]

Ctrl+C stops gracefully (finish the step, save, exit); a second Ctrl+C exits at once (the last
committed checkpoint stays intact). SIGUSR1 saves a checkpoint now (POSIX). With --json, every event
is one JSON object per line on stdout; otherwise a progress bar runs on stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="RUN_JSON", help="run config (run.json) to train")
    src.add_argument("--dataset", metavar="DATASET_DIR", help="prepared dataset folder (with --preset)")
    src.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest committed checkpoint")
    parser.add_argument("--preset", help="model preset for --dataset (default: tiny); its vocab "
                        "size and context length are adapted to the dataset")
    parser.add_argument("--steps", type=int, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, help="sequences per optimizer step")
    parser.add_argument("--micro-batch-size", type=int, help="sequences per forward pass (gradient accumulation)")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--save-every", type=int, help="checkpoint every N steps (0 = only at the end)")
    parser.add_argument("--eval-every", type=int, help="evaluate every N steps (0 = never)")
    parser.add_argument("--threads", type=int, help="CPU threads (0 = auto)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), help="where to train")
    parser.add_argument("--seed", type=int, help="seed of init, data order and dropout")
    parser.add_argument("--out", metavar="RUN_DIR", help="run folder to create (required unless --resume)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per event on stdout")
    parser.add_argument("--accept-config-change", action="store_true",
                        help="with --resume: continue although run.json differs from the checkpoint's config")


_TRAIN_FLAGS = {"steps": "steps", "batch_size": "batch_size", "micro_batch_size": "micro_batch_size", "lr": "lr",
                "save_every": "save_every", "eval_every": "eval_every", "threads": "threads", "device": "device"}


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {field: getattr(args, flag) for flag, field in _TRAIN_FLAGS.items() if getattr(args, flag) is not None}


def build_config(args: argparse.Namespace) -> tuple[Any, Path, bool, list[str]]:
    """(RunConfig, run_dir, resume?, notes) from the parsed flags; raises UserError on bad input."""
    from desktop_app.engine.errors import UserError
    from desktop_app.engine.specs import RunConfig
    from desktop_app.engine.training import config_from_preset

    if args.preset and not args.dataset:
        raise UserError("--preset goes with --dataset; a run config or a resumed run already has its model")
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "run.json").is_file():
            raise UserError(f"{run_dir} is not a training run (no run.json): nothing to resume")
        if args.out and Path(args.out).resolve() != run_dir.resolve():
            raise UserError("--out cannot be used with --resume (a run resumes in its own folder)")
        config = RunConfig.load(run_dir / "run.json")
        if _overrides(args) or args.seed is not None:
            raise UserError("with --resume, edit RUN_DIR/run.json to change settings (then add "
                            "--accept-config-change); flags like --steps are not accepted")
        return config, run_dir, True, []
    if not args.out:
        raise UserError("--out RUN_DIR is required: the folder that will hold run.json, metrics and checkpoints")
    run_dir = Path(args.out)
    if args.config:
        config_path = Path(args.config)
        config = RunConfig.load(config_path)
        if config.dataset and not Path(config.dataset).is_absolute() and not Path(config.dataset).exists():
            candidate = config_path.parent / config.dataset
            if candidate.exists():
                config.dataset = str(candidate.resolve())  # run.json must work from any directory
        overrides = _overrides(args)
        if overrides or args.seed is not None:
            train = {**config.train, **overrides}
            config = config.replace(train=train, seed=args.seed if args.seed is not None else config.seed)
        config.check()
        return config, run_dir, False, []
    seed = 1337 if args.seed is None else args.seed
    config, notes = config_from_preset(args.dataset, args.preset or "tiny", seed=seed, **_overrides(args))
    return config, run_dir, False, notes


def run(args: argparse.Namespace) -> int:
    from desktop_app.engine.events import Controls, Log

    config, run_dir, resume, notes = build_config(args)
    from desktop_app.engine.training import train

    controls = Controls()
    interrupts = {"n": 0}

    def on_sigint(signum: int, frame: Any) -> None:
        interrupts["n"] += 1
        if interrupts["n"] == 1:
            controls.stop.set()
            print("\nstopping after this step and saving (Ctrl+C again to quit at once)", file=sys.stderr,
                  flush=True)
        else:
            # Immediate exit: committed checkpoints are intact by construction (atomic rename).
            os._exit(130)

    old_int = signal.signal(signal.SIGINT, on_sigint)
    old_usr1 = None
    if hasattr(signal, "SIGUSR1"):
        old_usr1 = signal.signal(signal.SIGUSR1, lambda s, f: controls.save_now.set())
    try:
        events = train(config, run_dir, controls, resume=resume, accept_config_change=args.accept_config_change)
        return _consume(events, notes, as_json=args.json, Log=Log)
    finally:
        signal.signal(signal.SIGINT, old_int)
        if old_usr1 is not None:
            signal.signal(signal.SIGUSR1, old_usr1)


def _consume(events: Any, notes: list[str], *, as_json: bool, Log: Any) -> int:
    reason = "failed"
    bar = None
    try:
        first = next(iter(events), None)  # setup errors surface here, before any note is printed
        for note in notes:
            _show(Log("info", note), as_json, bar)
        for event in itertools.chain([first] if first is not None else [], events):
            if event.type == "step" and not as_json:
                bar = bar or _make_bar(event.total_steps)
                m = event.metrics
                bar.n = event.step
                bar.set_postfix_str(f"loss {m.get('loss', float('nan')):.4f}, {m.get('tokens_per_s', 0):,.0f} tok/s, "
                                    f"ETA {_hms(event.eta_s)}", refresh=False)
                bar.refresh()
                continue
            if event.type == "finished":
                reason = event.reason
            _show(event, as_json, bar)
    finally:
        if bar is not None:
            bar.close()
    return 1 if reason == "failed" else 0


def _make_bar(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True)


def _show(event: Any, as_json: bool, bar: Any) -> None:
    if as_json:
        sys.stdout.write(json.dumps(event.to_dict(), allow_nan=True) + "\n")
        sys.stdout.flush()
        return
    d = event.to_dict()
    if event.type == "log":
        line = f"[{event.level}] {event.message}"
    elif event.type == "eval":
        line = f"step {event.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in event.metrics.items())
    elif event.type == "sample":
        line = f"sample @ {event.step}: {event.prompt!r} -> {event.text!r}"
    elif event.type == "checkpoint":
        line = f"saved {event.path}" + (" (best)" if event.best else "")
    elif event.type == "finished":
        line = f"{event.reason}: {event.message}"
    else:
        line = json.dumps(d)
    if bar is not None:
        bar.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


def _hms(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
