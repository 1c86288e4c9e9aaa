"""`sweep`: search hyperparameters: trials of one run config on Optuna, pruned early when hopeless, resumable.

    python -m desktop_app sweep --config run.json --vary lr=1e-5..1e-3:log --vary lora_rank=8,16,32 --trials 20
                                --metric val_loss --out SWEEP [--sampler tpe|random|grid] [--pruner median|hyperband|
                                halving|none] [--parallel N|auto] [--seed N] [--json]
    python -m desktop_app sweep --resume SWEEP [--trials N] [--json]
    python -m desktop_app sweep --config run.json --suggest      the settings that may vary, the usual ranges

Each trial is an ordinary run of run.json with the trial's settings, in SWEEP/trials/trial-NNNN; the study lives in
SWEEP/study.db (SQLite), so a sweep stopped, crashed or killed resumes where it was: an unfinished trial continues
its run from its newest checkpoint. Without --vary, the method's usual settings vary. SWEEP/best.json names the best
trial, its settings, its run.json and its best checkpoint (docs/sweeps.md).

Ctrl+C (or SIGTERM) stops after the running trials save (resume with --resume); SIGUSR2 pauses / resumes them,
SIGUSR1 saves them now (POSIX). Lines go to stderr; with --json, one JSON object per sweep event on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from desktop_app.cli.reporting import StopSignals
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event
from desktop_app.engine.specs import RunConfig, load_json
from desktop_app.engine.sweep.events import SweepStarted, TrialFinished, TrialReport, TrialStarted
from desktop_app.engine.sweep.runner import NewSweep, ResumeSweep, open_sweep
from desktop_app.engine.sweep.space import settings_of, suggested
from desktop_app.engine.sweep.spec import PRUNERS, SAMPLERS, SweepSpec
from desktop_app.engine.train.request import RunRequest

# What --json prints: the sweep's own events (a trial's run events are in its folder's metrics.jsonl)
SHOWN = ("sweep_start", "trial_start", "trial_report", "trial_end", "log", "finished")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="RUN_JSON", help="the run config every trial starts from")
    src.add_argument("--resume", metavar="SWEEP", help="continue a sweep where it was (an unfinished trial from its "
                     "newest checkpoint)")
    parser.add_argument("--vary", action="append", default=[], metavar="NAME=RANGE",
                        help="a setting that varies: NAME=LOW..HIGH, NAME=LOW..HIGH:log (a log scale, for learning "
                        "rates) or NAME=A,B,C; repeat for several (e.g. --vary lr=1e-5..1e-3:log --vary "
                        "lora_rank=8,16,32). Without: the method's usual settings (--suggest lists them)")
    parser.add_argument("--trials", type=int, help="trials in all, counting those already run (default 20; with "
                        "--resume: more than it was started with)")
    parser.add_argument("--metric", default="val_loss", help="what judges a trial at each evaluation (default "
                        "val_loss; e.g. val_ppl, val_preference_accuracy, eval_reward, heldout_solve_rate)")
    parser.add_argument("--direction", choices=("auto", "minimize", "maximize"), default="auto",
                        help="whether lower or higher is better (default: as the metric says)")
    parser.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="tpe (default), random, or grid (every "
                        "combination; a range becomes 5 values)")
    parser.add_argument("--pruner", choices=PRUNERS, default="median", help="stop hopeless trials early: median "
                        "(default), hyperband, halving (successive halving) or none")
    parser.add_argument("--parallel", default="1", metavar="N|auto", help="trials at once (default 1; auto: as many "
                        "as fit, one per GPU or as the CPU's cores and memory allow, threads split among them)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampler (default 0)")
    parser.add_argument("--name", default="", help="the sweep's name in the trackers (default: its folder's)")
    parser.add_argument("--out", metavar="SWEEP", help="the sweep's folder to create (required with --config)")
    parser.add_argument("--suggest", action="store_true", help="with --config: print the settings that may vary for "
                        "its method and the ranges usually searched, then exit")
    parser.add_argument("--json", action="store_true", help="print one JSON object per sweep event on stdout")
    parser.add_argument("--force", action="store_true", help="start although the check before the base run says it "
                        "cannot work on this machine")


def parallel_of(text: str) -> int:
    if str(text).strip().lower() == "auto":
        return 0
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"--parallel takes a number of trials at once or auto, not {text!r}") from None
    if value < 1:
        raise UserError(f"--parallel takes 1 or more trials at once (or auto), not {value}")
    return value


def build(args: argparse.Namespace) -> tuple[NewSweep | ResumeSweep, Path | None]:
    """What the flags ask for; UserError on flags that do not go together."""
    if args.resume:
        given = [flag for flag, value in (("--vary", args.vary), ("--out", args.out), ("--name", args.name))
                 if value]
        if given:
            raise UserError(f"{', '.join(given)} cannot change a sweep being resumed: it goes on as it was started "
                            "(only --trials may grow)")
        return ResumeSweep(args.resume, args.trials), None
    if not args.out:
        raise UserError("--out SWEEP is required: the folder that will hold the sweep's study and trials")
    config_path = Path(args.config)
    request = RunRequest(config=load_json(config_path), config_folder=str(config_path.parent))
    spec = SweepSpec(vary=list(args.vary), trials=args.trials or 20, metric=args.metric, direction=args.direction,
                     sampler=args.sampler, pruner=args.pruner, parallel=parallel_of(args.parallel), seed=args.seed,
                     name=args.name)
    return NewSweep(request, spec), Path(args.out)


def run(args: argparse.Namespace) -> int:
    if args.suggest:
        return suggest(args)
    what, folder = build(args)
    sweep = open_sweep(what, folder)
    errors = sweep.errors()
    if errors and not args.force:
        raise UserError("the base run cannot work on this machine: " + " ".join(errors) + " (--force starts it anyway)")
    controls = Controls(answers_faults=False)
    for line in [*sweep.notes, *(f"check before start: {f.message}" for f in sweep.findings)]:
        show_line(line, args.json)
    reason = "failed"
    with StopSignals(controls):
        for event in sweep.events(controls):
            if event.type == "finished":
                reason = event.reason  # type: ignore[attr-defined]
            show(event, args.json)
    return 1 if reason == "failed" else 0


def suggest(args: argparse.Namespace) -> int:
    if not args.config:
        raise UserError("--suggest goes with --config RUN_JSON")
    config = RunConfig.from_dict(load_json(args.config))
    names = sorted(settings_of(config))
    usual = suggested(config)
    if args.json:
        print(json.dumps({"settings": names, "suggested": usual}))
        return 0
    print("settings that may vary: " + ", ".join(names))
    print("usually searched: " + " ".join(f"--vary {v}" for v in usual))
    return 0


def show_line(text: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"type": "log", "level": "info", "message": text}), flush=True)
    else:
        print(text, file=sys.stderr, flush=True)


def show(event: Event, as_json: bool) -> None:
    if as_json:
        if event.type in SHOWN:
            sys.stdout.write(json.dumps(event.to_dict(), allow_nan=True) + "\n")
            sys.stdout.flush()
        return
    line = words(event)
    if line:
        print(line, file=sys.stderr, flush=True)


def settings_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k.rpartition('.')[2]}={v:.4g}" if isinstance(v, float) else f"{k.rpartition('.')[2]}={v}"
                     for k, v in params.items())


def words(event: Event) -> str:
    """A sweep event as the line a person reads ('' for a trial's own run events: they are in its folder)."""
    if isinstance(event, SweepStarted):
        better = "lower" if event.direction == "minimize" else "higher"
        again = f", {event.done} done before" if event.resumed else ""
        return (f"sweep of {event.trials} trials{again} in {event.sweep_dir}, judged by {event.metric} ({better} is "
                f"better), {event.parallel} at once: " + "; ".join(event.vary))
    if isinstance(event, TrialStarted):
        return f"trial {event.number}{' (continued)' if event.resumed else ''}: {settings_text(event.params)}"
    if isinstance(event, TrialReport):
        return f"trial {event.number} step {event.step}: {event.value:.6g}" + (" -> pruned" if event.pruned else "")
    if isinstance(event, TrialFinished):
        best = f" (best: trial {event.best_number}, {event.best_value:.6g})" if event.best_number is not None else ""
        return f"trial {event.number} {event.state}: {event.message}{best}"
    if event.type == "log" and event.level != "info":  # type: ignore[attr-defined]
        return f"[{event.level}] {event.message}"  # type: ignore[attr-defined]
    if event.type == "finished":
        return f"{event.reason}: {event.message}"  # type: ignore[attr-defined]
    return ""
