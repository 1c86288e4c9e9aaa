"""`export`: a model as a Hugging Face folder, a zip of it, or a GGUF file (llama.cpp, LM Studio) with an Ollama
Modelfile beside it.

    python -m desktop_app export RUN --format hf --out DIR
    python -m desktop_app export LORA_RUN --merge --format hf|zip|gguf --out PATH   # adapter merged into its base
    python -m desktop_app export RUN --format gguf --gguf-type q4_k_m --out m.gguf  # + m.Modelfile: ollama create
"""

from __future__ import annotations

import argparse
import json
import sys

from desktop_app.cli.model_file import add_file_argument, chosen_model
from desktop_app.engine.errors import UserError
from desktop_app.engine.export.gguf_quantize import GGUF_TYPES
from desktop_app.engine.export.hf import export_model

FORMATS = ("hf", "zip", "gguf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a run folder (its newest checkpoint), a checkpoint, an "
                        "export, a Hugging Face model folder, a GGUF file or a Hub id pulled earlier (ORG/NAME, "
                        "or ORG/NAME:QUANT for one GGUF file)")
    add_file_argument(parser)
    parser.add_argument("--format", dest="fmt", required=True, choices=FORMATS,
                        help="hf: a folder transformers loads; zip: that folder zipped; gguf: one file for llama.cpp "
                        "and, beside it, NAME.Modelfile for `ollama create`")
    parser.add_argument("--out", required=True, metavar="PATH", help="where to write (a folder for hf, a file for "
                        "zip and gguf)")
    parser.add_argument("--gguf-type", choices=GGUF_TYPES, default=None, type=str.lower,
                        help="GGUF weight type (default f16; f32 is exact, q8_0 is ~half of f16; q4_k_m, q5_k_m and "
                        "q6_k are made by llama.cpp's quantizer: the [llamacpp] extra)")
    parser.add_argument("--max-shard-size", default="2GB", metavar="SIZE",
                        help="split hf weights into files of at most this size (default 2GB)")
    parser.add_argument("--force", action="store_true", help="replace PATH if it exists (only once the new "
                        "export is complete)")
    parser.add_argument("--merge", action="store_true", help="for a LoRA/QLoRA run: merge the adapter into (a copy "
                        "of) its base model and export the result as a plain model (required for adapter runs)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    if args.fmt != "gguf" and args.gguf_type is not None:
        raise UserError("--gguf-type only applies to --format gguf")
    try:  # transformers' own bars would interleave with ours
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    result: dict = {}
    tty = sys.stderr.isatty()
    partial = False  # a \r progress line is on screen: end it before any other message
    try:
        for event in export_model(chosen_model(args.model, args.file), args.fmt, args.out, overwrite=args.force,
                                  gguf_type=args.gguf_type or "f16", max_shard_size=args.max_shard_size,
                                  merge=args.merge):
            if event.type == "progress":
                total = f"/{int(event.total)}" if event.total else ""
                line = f"{event.stage:>8} {int(event.done)}{total} {event.unit} {event.message[:60]}"
                if tty:
                    print(f"\r{line:<90}", end="", file=sys.stderr, flush=True)
                    partial = True
                elif event.total and event.done >= event.total:  # logs and pipes: one line per finished stage
                    print(line, file=sys.stderr, flush=True)
            elif event.type == "log":
                if partial:
                    print(file=sys.stderr)
                    partial = False
                print(event.message if event.level == "info" else f"{event.level}: {event.message}", file=sys.stderr)
            elif event.type == "finished":
                if event.reason != "completed":
                    print(f"export {event.reason}: {event.message}", file=sys.stderr)
                    return 1
                result = event.result
    finally:
        if partial:
            print(file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result.get("path", ""))
        if result.get("modelfile"):
            print(f"Ollama: ollama create NAME -f {result['modelfile']}", file=sys.stderr)
    return 0
