"""`generate MODEL --prompt TEXT ...`: stream text from a run, checkpoint, export or HF model folder.

Output: without --json, the text of sample 0 streams to stdout as it is generated; with --samples N > 1
the other samples are printed after it, each under a "--- sample i ---" header (sample 0 gets one too).
With --json nothing streams: one JSON object per sample is printed at the end, one per line, with
text, token_ids (generated ids only, prompt excluded; a final EOS id included), ttft_ms, tokens_per_s
and finish_reason (length | stop | eos | cancelled).

With --beams N > 1 the text comes from beam search (transformers' semantics, see engine/generate/beam_search.py):
nothing streams while the beams search; the best beam's text is printed when the search ends, and
--samples K (at most N) prints the K best beams, best first. Beams need temperature 0, which is the
default with --beams; an explicit --temperature above 0 with --beams is refused.

With --chat the prompt is the user's message, rendered by the model's chat template; --system adds a system
message before it. A system prompt is never cut: when the two do not fit the context with room for the
reply, a one-line error says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from desktop_app.cli.model_file import add_file_argument, chosen_model
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.prompts import context_length, fit_messages
from desktop_app.engine.model.loading import load_model
from desktop_app.engine.spec_base import help_text
from desktop_app.engine.specs import GenerateSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = GenerateSpec()
    parser.epilog = ("Without --json the text of sample 0 streams to stdout as it is generated; with --samples N "
                     "the other samples follow it, each under a '--- sample i ---' line. With --json one JSON "
                     "object per sample (text, token_ids, ttft_ms, tokens_per_s, finish_reason) is printed per "
                     "line at the end. With --beams N the text of the best beam(s) is printed when the search "
                     "ends.")
    parser.add_argument("model", metavar="MODEL", help="a run folder (its newest checkpoint), a checkpoint, an "
                        "export, a local Hugging Face model folder, a GGUF file or a Hub id pulled earlier "
                        "(ORG/NAME, or ORG/NAME:QUANT for one GGUF file)")
    add_file_argument(parser)
    parser.add_argument("--prompt", required=True, help="text to continue (or the user message with --chat)")
    parser.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens,
                        help=help_text(GenerateSpec, "max_new_tokens"))
    parser.add_argument("--temperature", type=float, default=None,
                        help=help_text(GenerateSpec, "temperature") + f" Default {d.temperature:g}; 0 with --beams.")
    parser.add_argument("--top-k", type=int, default=d.top_k, help=help_text(GenerateSpec, "top_k"))
    parser.add_argument("--top-p", type=float, default=d.top_p, help=help_text(GenerateSpec, "top_p"))
    parser.add_argument("--min-p", type=float, default=d.min_p, help=help_text(GenerateSpec, "min_p"))
    parser.add_argument("--repetition-penalty", type=float, default=d.repetition_penalty,
                        help=help_text(GenerateSpec, "repetition_penalty"))
    parser.add_argument("--stop", action="append", default=[], metavar="S",
                        help=help_text(GenerateSpec, "stop") + " Repeat for several.")
    parser.add_argument("--samples", type=int, default=d.samples, help=help_text(GenerateSpec, "samples"))
    parser.add_argument("--seed", type=int, default=d.seed, help=help_text(GenerateSpec, "seed"))
    parser.add_argument("--chat", action="store_true", help=help_text(GenerateSpec, "chat"))
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="with --chat: a system message before the user's (the model's instructions)")
    parser.add_argument("--beams", type=int, default=d.num_beams, metavar="N",
                        help=help_text(GenerateSpec, "num_beams"))
    parser.add_argument("--length-penalty", type=float, default=d.length_penalty, metavar="A",
                        help=help_text(GenerateSpec, "length_penalty"))
    parser.add_argument("--early-stopping", default=d.early_stopping, choices=("false", "true", "never"),
                        help=help_text(GenerateSpec, "early_stopping"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"),
                        help="auto (default), cpu, cuda or mps")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads while decoding (0 = automatic: the faster of 1 thread and all cores, "
                             "timed while decoding)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per sample at the end")


def run(args: argparse.Namespace) -> int:
    import threading

    spec = _spec(args)

    if args.threads < 0:
        raise UserError(f"--threads must be 0 (automatic) or more, got {args.threads}")
    if args.system is not None and not args.chat:
        raise UserError("--system needs --chat (a system message only exists in a chat conversation)")

    from desktop_app.engine.generate.decode import stream_text  # lazy: torch

    loaded = load_model(chosen_model(args.model, args.file), device=args.device)
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    prompt = _prompt(args, loaded, spec)
    stop = threading.Event()
    results: dict[int, dict] = {}
    texts: dict[int, str] = {}
    out = sys.stdout
    if spec.samples > 1 and not args.json:
        out.write("--- sample 0 ---\n")
    try:
        for event in stream_text(loaded, prompt, spec, stop, threads=args.threads or "auto"):
            if event.type == "delta":
                if event.sample == 0 and not args.json:
                    out.write(event.text)
                    out.flush()
            else:
                results[event.sample] = {k: v for k, v in event.to_dict().items() if k not in ("type", "sample")}
                texts[event.sample] = event.text
    except KeyboardInterrupt:
        stop.set()
        raise
    _print_results(args, results, texts)
    return 0


def _spec(args: argparse.Namespace) -> Any:
    """The checked GenerateSpec of the arguments."""

    temperature = args.temperature
    if temperature is None:  # beam search is deterministic: its default is 0, sampling's is the spec's
        temperature = 0.0 if args.beams > 1 else GenerateSpec().temperature
    return GenerateSpec(max_new_tokens=args.max_new_tokens, temperature=temperature, top_k=args.top_k,
                        top_p=args.top_p, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                        stop=list(args.stop), samples=args.samples, seed=args.seed, chat=args.chat,
                        num_beams=args.beams, length_penalty=args.length_penalty,
                        early_stopping=args.early_stopping).check()


def _prompt(args: argparse.Namespace, loaded: Any, spec: Any) -> Any:
    """The prompt text, or with --system one conversation (a one-item list of prompts) fitted to the context so
    that the system prompt is never cut."""
    if args.system is None:
        return args.prompt

    messages = [{"role": "system", "content": args.system}, {"role": "user", "content": args.prompt}]
    return [fit_messages(loaded.tokenizer, messages, context_length(loaded.model),
                         reply_tokens=spec.max_new_tokens)[0]]


def _print_results(args: argparse.Namespace, results: dict[int, dict], texts: dict[int, str]) -> None:
    """After the stream: one JSON object per sample with --json, else the samples after the first."""
    out = sys.stdout
    if args.json:
        for i in sorted(results):
            out.write(json.dumps({"sample": i, **results[i]}, ensure_ascii=False) + "\n")
    else:
        out.write("\n")
        for i in sorted(texts):
            if i:
                out.write(f"--- sample {i} ---\n{texts[i]}\n")
    out.flush()
