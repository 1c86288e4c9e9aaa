"""`prepare`: files/folders -> tokenizer + tokenized dataset (progress bar on stderr).

Exit status: 0 when at least one file was usable (and the dataset was written), 1 when none was,
2 for a settings mistake, 130 when interrupted. With --json, stdout is exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from typing import Any

from desktop_app.engine.column_roles import parse_columns
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, FileVerdict, Finished, Log, Progress
from desktop_app.engine.specs import DataSpec

TOKENIZER_CHOICES = ("byte-bpe", "bpe", "wordpiece", "unigram")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="files or folders: text (.txt, .md, .jsonl), documents (.pdf, .epub, .docx, .html) and "
                             "tables (.csv, .tsv, .parquet, .arrow, a datasets save_to_disk folder); documents and "
                             "tables need the documents extra")
    parser.add_argument("--out", required=True, metavar="DATASET_DIR",
                        help="dataset folder to create (or, with --append, to extend)")
    tok = parser.add_mutually_exclusive_group()
    tok.add_argument("--tokenizer", choices=TOKENIZER_CHOICES, default=None,
                     help="tokenizer to train on the files (default byte-bpe)")
    tok.add_argument("--tokenizer-file", metavar="TOKENIZER", default=None,
                     help="use an existing tokenizer.json or Hugging Face model folder instead")
    parser.add_argument("--vocab-size", type=int, default=None, metavar="N", help="vocabulary size (default 4096)")
    parser.add_argument("--min-frequency", type=int, default=None, metavar="N",
                        help="how often a merge must occur to enter the vocabulary (default 2)")
    parser.add_argument("--context", type=int, default=None, metavar="N", help="tokens per window (default 256)")
    parser.add_argument("--overlap", type=int, default=None, metavar="N",
                        help="tokens shared by consecutive windows (default 0)")
    parser.add_argument("--val-fraction", type=float, default=None, metavar="F",
                        help="share of documents for validation (default 0.05)")
    parser.add_argument("--seed", type=int, default=None, metavar="N", help="seed of the train/validation split")
    parser.add_argument("--columns", default=None, metavar="ROLE=COLUMN,...",
                        help="which table column plays which part, e.g. text=body, or instruction=q,output=a, or "
                             "prompt=p,chosen=c,rejected=r (default: guessed from common column names); saved in the "
                             "dataset's manifest")
    parser.add_argument("--append", action="store_true",
                        help="add the files to the existing dataset in --out (its tokenizer and settings)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _spec(args: argparse.Namespace) -> Any:
    values = {"tokenizer": args.tokenizer, "tokenizer_file": args.tokenizer_file, "vocab_size": args.vocab_size,
              "min_frequency": args.min_frequency, "context_length": args.context, "overlap": args.overlap,
              "val_fraction": args.val_fraction, "seed": args.seed}
    if args.columns is not None:

        values["columns"] = parse_columns(args.columns)
    return DataSpec(**{k: v for k, v in values.items() if v is not None}).check()


def run(args: argparse.Namespace) -> int:
    controls = Controls()
    events = _events(args, controls)

    # Ctrl-C: ask the engine to stop at the next batch (it cleans up); a second Ctrl-C aborts.
    def on_sigint(signum: int, frame: Any) -> None:
        if controls.stop.is_set():
            raise KeyboardInterrupt
        controls.stop.set()
        print("\nstopping (press Ctrl-C again to abort)...", file=sys.stderr)

    old_handler = signal.signal(signal.SIGINT, on_sigint)
    try:
        finished = _show(events, args)
    finally:
        signal.signal(signal.SIGINT, old_handler)
    if finished is None:  # pragma: no cover - the engine always ends with Finished
        print("error: preparation ended without a result", file=sys.stderr)
        return 1
    return _report(finished, args)


def _events(args: argparse.Namespace, controls: Any) -> Iterator[Any]:
    """The engine's events for these arguments: a new dataset, or files appended to one (its own settings)."""

    if args.append:
        from desktop_app.engine.data.prepare import append_to_dataset  # lazy: numpy

        given = [name for name in ("tokenizer", "tokenizer_file", "vocab_size", "min_frequency", "context",
                                   "overlap", "val_fraction", "seed", "columns") if getattr(args, name) is not None]
        if given:
            raise UserError(f"--append uses the dataset's own settings; drop --{given[0].replace('_', '-')}")
        return append_to_dataset(args.out, args.paths, controls)
    from desktop_app.engine.data.prepare import prepare_dataset  # lazy: numpy

    return prepare_dataset(args.paths, args.out, _spec(args), controls)


def _show(events: Iterator[Any], args: argparse.Namespace) -> Any:
    """Run the events: a progress bar per stage on stderr (unless --quiet), skipped files and warnings as lines;
    returns the Finished event (None if there was none)."""

    bar = _StageBar()
    finished: Finished | None = None
    reported: set[str] = set()  # the engine repeats verdicts at the end (with token counts)
    try:
        for event in events:
            if isinstance(event, Progress) and not args.quiet:
                bar.show(event)
            elif isinstance(event, FileVerdict) and event.verdict != "ok" and event.path not in reported:
                reported.add(event.path)
                if not args.json:
                    what = "partly read" if event.verdict == "partly" else "skipped"
                    bar.write(f"{what} {event.path}: {event.verdict} ({event.reason})")
            elif isinstance(event, Log) and event.level != "info":
                bar.write(f"{event.level}: {event.message}")
            elif isinstance(event, Finished):
                finished = event
    finally:
        bar.close()
    return finished


class _StageBar:
    """A tqdm bar on stderr for the stage of the work in progress (a new one when the stage changes)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.stage = ""

    def show(self, event: Any) -> None:
        from tqdm import tqdm

        if event.stage != self.stage:
            self.close()
            self.stage = event.stage
            unit_scale = event.unit in ("bytes", "chars")
            self.bar = tqdm(total=event.total or None, desc=self.stage, unit="B" if unit_scale else event.unit,
                            unit_scale=unit_scale, file=sys.stderr, leave=False, dynamic_ncols=True)
        self.bar.n = event.done
        if event.total:
            self.bar.total = event.total
        self.bar.refresh()

    def write(self, line: str) -> None:
        """A line on stderr that does not break the bar."""
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _report(finished: Any, args: argparse.Namespace) -> int:
    """Print the result (one JSON object with --json, else a summary) and return the exit status."""
    result = dict(finished.result)
    result["status"] = finished.reason
    result["message"] = finished.message
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_summary(result)
    if finished.reason == "completed":
        return 0
    if finished.reason == "cancelled":
        print(f"cancelled: {finished.message}", file=sys.stderr)
        return 130
    print(f"error: {finished.message}", file=sys.stderr)
    return 1


def _print_summary(result: dict[str, Any]) -> None:
    if result.get("status") != "completed":
        return
    ok = result.get("usable_files", 0)
    print(f"dataset:   {result['dataset']}")
    print(f"files:     {ok} used, {len(result.get('files', [])) - ok} skipped")
    for split in ("train", "val"):
        s = result.get("splits", {}).get(split, {})
        print(f"{split + ':':10} {s.get('documents', 0):,} documents, {s.get('tokens', 0):,} tokens, "
              f"{s.get('chunks', 0):,} windows of {result.get('context_length')} tokens")
    if result.get("records"):
        print("records:   " + ", ".join(f"{n} {k}" for k, n in result["records"].items()))
    print(f"tokenizer: {result['tokenizer']} (vocab {result.get('vocab_size')})")
