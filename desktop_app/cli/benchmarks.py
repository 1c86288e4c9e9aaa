"""`benchmarks`: the standard benchmarks (lm-evaluation-harness tasks) and their data.

    benchmarks list [--dir DIR] [--all]     the popular benchmarks (and a task folder's own), whether their data is
                                            on this computer; --all: every task, group and tag the harness knows
    benchmarks fetch NAMES [--dir DIR]      fetch their datasets once (the network switch and progress of
                                            `models pull`); afterwards `eval --benchmark NAMES` runs offline

What is listed, what is missing and every sentence is the engine's (engine/evaluate/benchmark_catalog.py,
benchmark_data.py); this module prints it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from desktop_app.cli.models import CancelOnSignal, report_download
from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.benchmark_catalog import (
    HARNESS_MISSING,
    folder_tasks,
    popular_benchmarks,
    require_harness,
    task_names,
)
from desktop_app.engine.evaluate.benchmark_data import data_state, fetch_benchmark_data
from desktop_app.engine.events import Controls
from desktop_app.engine.paths import cli_exe

_STATE_WORDS = {"ready": "fetched", "local": "local files", "missing": "not fetched", "unknown": "unknown"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the popular benchmarks (and a folder's tasks), and whether their data "
                             "is here")
    listing.add_argument("--dir", default="", metavar="DIR", help="a folder of your own task YAML files")
    listing.add_argument("--all", action="store_true", help="every task, group and tag the harness knows")
    listing.add_argument("--json", action="store_true", help="one JSON object per benchmark")
    fetch = sub.add_parser("fetch", help="fetch benchmarks' datasets from the Hugging Face Hub (once)")
    fetch.add_argument("names", metavar="NAMES", help="benchmark names, comma-separated (e.g. arc_easy,hellaswag)")
    fetch.add_argument("--dir", default="", metavar="DIR", help="a folder of your own task YAML files")
    fetch.add_argument("--json", action="store_true", help="print the fetch's events, one JSON object per line")


def run(args: argparse.Namespace) -> int:
    return _list(args) if args.action == "list" else _fetch(args)


def split_names(text: str) -> list[str]:
    """"arc_easy, hellaswag" -> ["arc_easy", "hellaswag"] (empty parts dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _list(args: argparse.Namespace) -> int:
    descriptions = {b.name: b.description for b in popular_benchmarks()}
    try:
        require_harness()
    except UserError:
        if args.all or args.dir:
            raise
        _print_rows([(name, "", text) for name, text in descriptions.items()], args.json)
        print(HARNESS_MISSING, file=sys.stderr)
        return 0

    if args.all:
        names = task_names(args.dir)
    else:
        names = [*descriptions, *(n for n in folder_tasks(args.dir) if n not in descriptions)]
    states = data_state(names, args.dir) if not args.all else {}
    rows = [(name, _STATE_WORDS.get(states.get(name, ""), ""), descriptions.get(name, "")) for name in names]
    _print_rows(rows, args.json)
    if not args.json and any(state == "missing" for state in states.values()):
        print(f"fetch one: {cli_exe()} benchmarks fetch NAMES (then `{cli_exe()} eval MODEL --benchmark NAMES` "
              "runs offline)", file=sys.stderr)
    return 0


def _print_rows(rows: list[tuple[str, str, str]], as_json: bool) -> None:
    if as_json:
        for name, state, text in rows:
            sys.stdout.write(json.dumps({"name": name, "data": state, "description": text}) + "\n")
        return
    width = max([len(r[0]) for r in rows] + [9])
    state_width = max([len(r[1]) for r in rows] + [4])
    print(f"{'benchmark':<{width}}  {'data':<{state_width}}  description")
    for name, state, text in rows:
        print(f"{name:<{width}}  {state:<{state_width}}  {text}".rstrip())


def _fetch(args: argparse.Namespace) -> int:
    names = split_names(args.names)
    controls = Controls()
    seen: list[Any] = []
    with CancelOnSignal(controls):
        events = fetch_benchmark_data(names, args.dir, controls)
        report_download(_watched(events, seen, as_json=args.json), as_json=args.json)
    done = next((e for e in seen if e.type == "benchmark_data_fetched"), None)
    if done is None:
        return 130  # cancelled: report_download said so
    if not args.json:
        fetched = f"fetched {', '.join(done.datasets)}" if done.datasets else "already on this computer"
        print(f"{', '.join(done.names)}: data ready ({fetched}); `{cli_exe()} eval MODEL --benchmark "
              f"{','.join(done.names)}` runs offline now")
    return 0


def _watched(events: Iterator[Any], seen: list[Any], *, as_json: bool) -> Iterator[Any]:
    """The events, kept in `seen`, with the preparing steps told on stderr (report_download shows the bytes)."""
    for event in events:
        seen.append(event)
        if event.type == "progress" and not as_json:
            print(f"preparing {event.message}", file=sys.stderr, flush=True)
        yield event
