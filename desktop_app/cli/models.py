"""`models`: find a model on the Hugging Face Hub, download it into the Hugging Face cache, list what is there.

    python -m desktop_app models search QUERY [--sort downloads|recent|likes] [--size "under 1B"] [--format gguf]
                                              [--limit N] [--json]
    python -m desktop_app models pull ORG/NAME [--file PATTERN ...] [--revision R] [--json]
    python -m desktop_app models list [--json]
    python -m desktop_app models network [on|off]

Only `search` and `pull` use the network, and only while the network setting allows it (`models network off` turns
every network feature of the app off; the environment variable AZR_NETWORK=off does too). `pull` downloads with
huggingface_hub into its cache (shared with other tools), shows a bar on stderr (bytes, speed, time left), checks every
file against the Hub's checksums and prints the local path on stdout; with --json it prints the engine's events, one
JSON object per line. Ctrl+C cancels; the partial files stay, and the same command resumes where it stopped. `list`
never touches the network. Every decision (what a search returns, what a pattern selects, disk space, the error
sentences) is the engine's (engine/hub/); this module prints it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.cli.reporting import SignalScope
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.engine.hub.download import plan_pull, pull
from desktop_app.engine.hub.errors import size_text
from desktop_app.engine.hub.network import network_allowed, off_by_environment, set_network_allowed
from desktop_app.engine.hub.search import FORMATS, SIZES, SORTS, search_models
from desktop_app.engine.model.hub_cache import cached_models, hub_cache_dir, hub_reference, resolve_model_reference
from desktop_app.engine.model.sizing import human_count
from desktop_app.engine.paths import cli_exe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("Only search and pull use the network (when `models network` says on). Downloads go into the "
                     "Hugging Face cache; Ctrl+C cancels a pull and the same command resumes it.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    search = actions.add_parser("search", help="search the Hub for text-generation models",
                                description="Search the Hugging Face Hub for text-generation models.")
    search.add_argument("query", metavar="QUERY", help="part of the model's name, e.g. smollm2 or qwen2.5-0.5b")
    search.add_argument("--sort", choices=SORTS, default="downloads", help="order of the results (default downloads)")
    search.add_argument("--size", type=_size, default="any", metavar="SIZE",
                        help="parameters: any (default), 'under 1B', 1B-3B, 3B-8B or 'over 8B'")
    search.add_argument("--format", dest="file_format", choices=FORMATS, default="any",
                        help="only models with safetensors weights, or with GGUF files (default any)")
    search.add_argument("--limit", type=int, default=30, metavar="N", help="at most N models (default 30)")
    search.add_argument("--json", action="store_true", help="one JSON object per model")
    pull = actions.add_parser("pull", help="download a model into the Hugging Face cache",
                              description="Download a model (or some of its files) into the Hugging Face cache, "
                              "resuming what an earlier pull left, and check it against the Hub's checksums.")
    pull.add_argument("repo", metavar="ORG/NAME", help="the model's Hub id, e.g. HuggingFaceTB/SmolLM2-135M-Instruct")
    pull.add_argument("--file", action="append", default=[], metavar="PATTERN",
                      help="only the files matching this pattern, e.g. '*Q4_K_M.gguf' (one GGUF quantization); "
                      "repeat for several (default: the model's safetensors weights with their config and tokenizer)")
    pull.add_argument("--revision", metavar="R", help="a branch, tag or commit of the repository (default main)")
    pull.add_argument("--json", action="store_true", help="print the download's events, one JSON object per line")
    listing = actions.add_parser("list", help="the models in the Hugging Face cache (offline)",
                                 description="The usable models in the Hugging Face cache, newest first (offline).")
    listing.add_argument("--json", action="store_true", help="one JSON object per model")
    network = actions.add_parser("network", help="show or set the network setting (on: search and download allowed)",
                                 description="Show the network setting, or turn the app's network features on or off.")
    network.add_argument("state", nargs="?", choices=("on", "off"), help="turn network features on or off")
    network.add_argument("--json", action="store_true", help="print the setting as a JSON object")


def _size(text: str) -> str:
    """--size as the engine names it ('under 1B', '1B-3B', ...), given with any case, spaces, '-' or '_'."""

    key = re.sub(r"[\s_-]", "", text.lower())
    for size in SIZES:
        if re.sub(r"[\s_-]", "", size.lower()) == key:
            return size
    raise argparse.ArgumentTypeError(f"{text!r} is not a size; use one of: " + ", ".join(repr(s) for s in SIZES))


def run(args: argparse.Namespace) -> int:
    actions = {"search": _search, "pull": _pull, "list": _list, "network": _network}
    return actions[args.action](args)


# --- search --------------------------------------------------------------------------------------------------------

def _search(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UserError(f"--limit must be 1 or more, got {args.limit}")
    models = search_models(args.query, sort=args.sort, size=args.size, file_format=args.file_format, limit=args.limit)
    if args.json:
        for model in models:
            _print_json(dataclasses.asdict(model))
        return 0
    if not models:
        print(f"no text-generation model on the Hub matches {args.query!r} with these filters", file=sys.stderr)
        return 0
    print(_table(["model", "parameters", "downloads", "likes", "updated", "files", "access"],
                 [_search_row(m) for m in models]))
    print(f"\npull one: {cli_exe()} models pull ORG/NAME (with --file '*Q4_K_M.gguf' for one GGUF quantization)",
          file=sys.stderr)
    return 0


def _search_row(model: Any) -> list[str]:
    return [model.repo_id, human_count(model.parameters) if model.parameters else "?", human_count(model.downloads),
            str(model.likes), model.last_modified[:10] or "?", "GGUF" if model.has_gguf else "",
            "gated" if model.gated else "open"]


def _table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    numeric = [all(re.fullmatch(r"[\d.?]+[KMBTPE]?", r[i]) for r in rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True))
        return "  ".join(padded).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


# --- pull ----------------------------------------------------------------------------------------------------------

def _pull(args: argparse.Namespace) -> int:
    finished = download(args.repo, list(args.file) or None, args.revision, as_json=args.json)
    if finished is None:
        return 130  # cancelled: report_download said how to resume
    if not args.json:
        _say_finished(finished)
    return 0


def pull_base(reference: str, pattern: str | None, *, as_json: bool) -> str:
    """`train --base ORG/NAME --allow-download`: the model pulled as `models pull ORG/NAME` pulls it (its safetensors
    set; for ORG/NAME:QUANT or --file PATTERN, that GGUF file); the local path the run then records. A cancelled pull
    ends the command (exit 130), resumable."""
    repo_id, tag = hub_reference(reference) or (reference, "")
    patterns = [pattern] if pattern else [f"*{tag}*.gguf"] if tag else None
    finished = download(repo_id, patterns, None, as_json=as_json)
    if finished is None:
        raise SystemExit(130)
    if not as_json:
        print(f"{repo_id}: {finished.folder} ({'verified' if finished.verified else 'not verified'})",
              file=sys.stderr)
    return str(resolve_model_reference(reference, pattern or "")) if patterns else str(finished.folder)


def download(repo_id: str, patterns: list[str] | None, revision: str | None, *, as_json: bool) -> Any:
    """The engine's pull shown as it goes (a plan line and a bar on stderr, or JSON lines); its DownloadFinished, or
    None when Ctrl+C cancelled it. The engine raises its UserErrors (network off, missing, gated, disk...)."""

    if not as_json:
        _say_plan(plan_pull(repo_id, patterns, revision))
    controls = Controls()
    with CancelOnSignal(controls):
        return report_download(pull(repo_id, patterns, revision=revision, controls=controls), as_json=as_json)


def _say_plan(plan: Any) -> None:
    files = len(plan.files)
    have = f" ({size_text(plan.have)} already in the cache)" if plan.have else ""
    print(f"{plan.repo_id} @ {plan.revision[:10]}: {files} file{'s' if files != 1 else ''}, "
          f"{size_text(plan.total)}{have} -> {plan.cache_dir}", file=sys.stderr, flush=True)


def _say_finished(finished: Any) -> None:
    check = ("verified: every file matches the Hub's checksums" if finished.verified
             else "not verified: the Hub gave no checksums to compare with")
    print(f"{check}; {size_text(finished.fetched)} fetched", file=sys.stderr)
    print(finished.folder, flush=True)


def report_download(events: Iterator[Any], *, as_json: bool) -> Any:
    """Show a download's events (a tqdm bar on stderr, or JSON lines on stdout); its DownloadFinished, or None when it
    was cancelled (after a line saying how to resume). Errors are raised by the engine as UserError."""

    bar = None
    finished = None
    try:
        for event in events:
            if as_json:
                _print_json(event.to_dict())
            if event.type == "download" and not as_json:
                bar = _advance(bar, event)
            elif event.type == "downloaded":
                finished = event
            elif event.type == "download_cancelled":
                _close(bar)
                bar = None
                print(f"cancelled after {size_text(event.done)} of {size_text(event.total)} of {event.repo_id}; "
                      "the partial files stay in the Hugging Face cache: run the same command again to resume",
                      file=sys.stderr)
                return None
            elif event.type == "log" and not as_json:
                (bar.write if bar is not None else print)(f"[{event.level}] {event.message}", file=sys.stderr)
    finally:
        _close(bar)
    return finished


def _advance(bar: Any, event: Any) -> Any:
    """The bar of a download: bytes done of the whole pull, the engine's smoothed speed and time left."""

    if bar is None:
        bar = _download_bar(event.repo_id, event.total, event.done)
    left = _hms(event.eta_s) if event.eta_s >= 0 else "?"
    bar.status = (f"{size_text(event.done)} of {size_text(event.total)}, {size_text(event.speed)}/s, "
                  f"{left} left, {Path(event.file).name}")
    bar.update(max(0, event.done - bar.n))
    bar.refresh()
    return bar


def _download_bar(repo_id: str, total: int, done: int) -> Any:
    """A tqdm bar whose text after the bar is `status`: the engine's figures, in the units of its other lines."""
    from tqdm import tqdm

    class DownloadBar(tqdm):
        status = ""

        @property
        def format_dict(self) -> dict[str, Any]:
            return {**super().format_dict, "status": self.status}

    return DownloadBar(total=total or None, initial=done, desc=repo_id, file=sys.stderr, dynamic_ncols=True,
                       bar_format="{desc}: {percentage:3.0f}%|{bar}| {status}")


def _close(bar: Any) -> None:
    if bar is not None:
        bar.close()


def _hms(seconds: float) -> str:
    s = int(max(0, seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class CancelOnSignal(SignalScope):
    """Ctrl+C / SIGTERM cancel a download (the engine stops within a second and keeps the partial files); a second
    Ctrl+C interrupts at once."""

    def __init__(self, controls: Any):
        self.controls = controls

    def _cancel(self, signum: int, frame: Any) -> None:
        if self.controls.stop.is_set():
            raise KeyboardInterrupt
        self.controls.stop.set()
        print("\ncancelling the download (Ctrl+C again to quit at once)", file=sys.stderr, flush=True)

    def handlers(self) -> dict[str, Any]:
        return {"SIGINT": self._cancel, "SIGTERM": self._cancel}


# --- list and network ----------------------------------------------------------------------------------------------

def _list(args: argparse.Namespace) -> int:
    models = cached_models()
    if args.json:
        for model in models:
            _print_json({**dataclasses.asdict(model), "path": str(model.path)})
        return 0
    if not models:
        print(f"no usable model in the Hugging Face cache ({hub_cache_dir()}); get one with "
              f"`{cli_exe()} models pull ORG/NAME`", file=sys.stderr)
        return 0
    rows = [[m.repo_id, "GGUF" if m.kind == "gguf" else "safetensors", size_text(m.size), m.revision[:10],
             str(m.path)] for m in models]
    print(_table(["model", "format", "size", "revision", "path"], rows))
    return 0


def _network(args: argparse.Namespace) -> int:
    if args.state is not None:
        set_network_allowed(args.state == "on")
    allowed = network_allowed()
    if args.json:
        _print_json({"network_features": allowed})
        return 0
    print(f"network features: {'on' if allowed else 'off'}")
    if off_by_environment():
        print("AZR_NETWORK=off in the environment keeps them off whatever the setting says: unset it to search or "
              "download", file=sys.stderr)
    elif not allowed:
        print(f"search and download are refused; `{cli_exe()} models network on` allows them",
              file=sys.stderr)
    return 0


def _print_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()
