"""`sandbox`: run untrusted Python files in the sandboxed executor and print one verdict per file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from desktop_app.engine.errors import UserError
from desktop_app.engine.sandbox import Executor, Job, Limits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("programs", nargs="+", metavar="PROGRAM.py", help="Python files to run as untrusted code")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="wall-clock seconds per program "
                        "(CPU time is limited to the same; default 5)")
    parser.add_argument("--memory-mb", type=int, default=256, metavar="M", help="memory limit per program (MB)")
    parser.add_argument("--strict", action="store_true", help="refuse to run when an isolation layer is missing")
    parser.add_argument("--json", action="store_true", help="one JSON object per file, then the layers")


def run(args: argparse.Namespace) -> int:
    if args.timeout <= 0 or args.memory_mb < 16:
        raise UserError("--timeout must be > 0 and --memory-mb at least 16")
    sources = []
    for name in args.programs:
        path = Path(name)
        if not path.is_file():
            raise UserError(f"{name}: no such file")
        try:
            sources.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{name}: cannot read it as UTF-8 text ({exc})") from None
    limits = Limits(cpu_seconds=args.timeout, wall_seconds=args.timeout, memory_mb=args.memory_mb)
    with Executor(limits, strict=args.strict) as executor:
        state = executor.state()
        results = executor.run([Job(source) for source in sources])
    for name, result in zip(args.programs, results, strict=False):
        record = {"file": name, **result.to_json()}
        if args.json:
            print(json.dumps(record), flush=True)
        else:
            print(f"{name}: {result.status}{' - ' + result.reason if result.reason else ''}")
            if result.stdout:
                print("  " + result.stdout.rstrip().replace("\n", "\n  "))
    if args.json:
        print(json.dumps({"layers": state.layers, "missing": state.missing}), flush=True)
    else:
        print("isolation layers: " + ", ".join(state.layers))
        for layer, why in state.missing.items():
            print(f"missing: {layer} ({why})")
    return 0
