"""Headless command line: `python -m desktop_app <verb> ...` (or `azr-trainer <verb> ...`).

Each verb lives in its own module with `add_arguments(parser)` and `run(args) -> int`. User mistakes
(UserError) and OS faults a person can fix (a full disk, a read-only or vanished folder: engine/os_faults.py) print
one clear line on stderr and exit 2; nothing prints a traceback for them. Anything else a verb raises is a bug: one
line on stderr naming the log file that holds the traceback, exit 1 (crash.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from desktop_app import __version__
from desktop_app.engine.errors import UserError

# verb -> (module, one-line help). Modules are imported only when their verb runs (fast start-up).
VERBS: dict[str, tuple[str, str]] = {
    "prepare": ("desktop_app.cli.prepare", "files/folders -> tokenizer + tokenized dataset"),
    "model": ("desktop_app.cli.model", "parameter count, memory and FLOPs of a model spec or preset"),
    "train": ("desktop_app.cli.train", "train a model (or resume a run) headless"),
    "generate": ("desktop_app.cli.generate", "stream text from a run, checkpoint, export or HF folder"),
    "export": ("desktop_app.cli.export", "export a model as a Hugging Face folder, zip or GGUF"),
    "sandbox": ("desktop_app.cli.sandbox", "run untrusted Python files in the sandboxed executor"),
    "tasks": ("desktop_app.cli.tasks", "generate verifiable tasks (seed corpora, held-out sets)"),
    "serve": ("desktop_app.cli.serve", "serve a model over an OpenAI-compatible local HTTP API"),
    "selfplay-demo": ("desktop_app.cli.selfplay_demo", "the CPU self-play demonstration: corpus, pretrain, self-play"),
    "eval": ("desktop_app.cli.eval", "evaluate models side by side: held-out tasks, questions, perplexity"),
    "models": ("desktop_app.cli.models", "search the Hugging Face Hub, download a model into its cache, list them"),
    "runs": ("desktop_app.cli.runs", "compare training runs: final and best figures, the settings that differ"),
    "benchmarks": ("desktop_app.cli.benchmarks", "standard benchmarks (lm-evaluation-harness): list, fetch data"),
    "sweep": ("desktop_app.cli.sweep", "search hyperparameters: trials of a run config on Optuna, pruned, resumable"),
}


def is_cli_invocation(args: list[str]) -> bool:
    """The window takes only flags, so any first word is a verb (a mistyped one gets a CLI error, not a window)."""
    return bool(args) and (not args[0].startswith("-") or args[0] in ("-h", "--help", "--version"))


def unknown_verb_message(word: str) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(VERBS), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else f"; the verbs are: {', '.join(VERBS)}"
    return f"error: unknown command '{word}'{hint}"


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser; only `verb`'s module is imported (all of them when verb is None)."""
    parser = argparse.ArgumentParser(prog="azr-trainer", description="AZR Model Trainer (headless CLI). "
                                     "Run without arguments to open the desktop app.")
    parser.add_argument("--version", action="version", version=f"AZR Model Trainer {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, (module_name, help_line) in VERBS.items():
        sub_parser = sub.add_parser(name, help=help_line, description=help_line)
        if verb is not None and name != verb:
            continue
        module = importlib.import_module(module_name)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and not argv[0].startswith("-") and argv[0] not in VERBS:
        print(unknown_verb_message(argv[0]), file=sys.stderr)
        return 2
    args = None
    try:
        parser = build_parser(argv[0] if argv and argv[0] in VERBS else "")
        args = parser.parse_args(argv)
        if not getattr(args, "_module", None):
            parser.print_help()
            return 2
        return int(args._module.run(args) or 0)
    except UserError as exc:
        from desktop_app.cli.reporting import process_prefix  # lazy: start-up

        print(f"{process_prefix()}error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head`: the reader went away; not an error worth a line
        from desktop_app.cli.crash import silence_stdout  # lazy: start-up

        silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell shows for a command the pipe ended
    except Exception as exc:  # a bug: the traceback goes to the log folder, the user gets one line
        from desktop_app.cli.crash import EXIT_CRASH, EXIT_FAULT, crash_line, fault_line  # lazy: start-up
        from desktop_app.cli.reporting import process_prefix  # lazy: start-up

        fault = fault_line(exc, argv[0] if argv else "")
        if fault is not None:  # a full disk, a read-only folder...: the person can fix it; not a bug
            print(f"{process_prefix()}{fault}", file=sys.stderr)
            return EXIT_FAULT
        print(f"{process_prefix()}{crash_line(exc, argv, getattr(args, 'workspace', None))}", file=sys.stderr)
        return EXIT_CRASH
