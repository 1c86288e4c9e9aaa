"""`model`: parameter count, memory and FLOPs of a preset or a spec file (no torch needed)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.model import sizing
from desktop_app.engine.model.architecture import spec_from_hf_config
from desktop_app.engine.presets import PRESETS, preset
from desktop_app.engine.specs import ModelSpec, load_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--preset", metavar="NAME", help="a named preset (see --list-presets)")
    src.add_argument("--spec", metavar="SPEC_JSON", help="a ModelSpec JSON file (or a model folder's config.json)")
    src.add_argument("--list-presets", action="store_true", help="list the presets with their sizes")
    parser.add_argument("--batch-size", type=int, default=1, metavar="N", help="sequences per step (default 1)")
    parser.add_argument("--seq-len", type=int, default=None, metavar="N", help="tokens per sequence "
                        "(default: the context length)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                        help="activation / inference precision (training keeps fp32 weights)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _load_spec(args: argparse.Namespace) -> tuple[str, Any]:
    from pathlib import Path


    if args.preset:
        return args.preset, preset(args.preset).check()
    path = Path(args.spec)
    if path.is_dir():
        path = path / "config.json"
    data = load_json(path)
    if "model_type" in data:  # a Hugging Face config.json

        return str(args.spec), spec_from_hf_config(data)
    if "model" in data and isinstance(data["model"], dict) and "family" not in data:  # a run.json
        data = data["model"]
    try:
        return str(args.spec), ModelSpec.from_dict(data).check()
    except UserError as exc:
        raise UserError(f"{args.spec}: {exc}") from None


def report(spec: Any, *, batch_size: int = 1, seq_len: int | None = None, precision: str = "fp32") -> dict[str, Any]:
    """Everything `model --json` prints (also handy for the UI)."""

    return {
        "spec": spec.to_dict(),
        "params": sizing.count_parameters(spec),
        "breakdown": sizing.parameter_breakdown(spec),
        "memory": sizing.estimate_memory(spec, batch_size=batch_size, seq_len=seq_len, precision=precision),
        "inference_memory": sizing.estimate_memory(spec, batch_size=batch_size, seq_len=seq_len,
                                                   precision=precision, training=False),
        "flops_per_token": sizing.flops_per_token(spec, seq_len),
        "forward_flops_per_token": sizing.flops_per_token(spec, seq_len, training=False),
        "compute_optimal_tokens": sizing.compute_optimal_tokens(spec),
        "batch_size": batch_size,
        "seq_len": seq_len or spec.context_length,
        "precision": precision,
    }


def run(args: argparse.Namespace) -> int:
    if args.list_presets:
        rows = [{"name": name, "params": sizing.count_parameters(spec), "family": spec.family, "description": desc}
                for name, (desc, spec) in PRESETS.items()]
        if args.json:
            print(json.dumps({"presets": rows}, indent=2))
        else:
            width = max(len(r["name"]) for r in rows)
            for r in rows:
                print(f"{r['name']:<{width}}  {sizing.human_count(r['params']):>7}  {r['family']:<5}  "
                      f"{r['description']}")
        return 0
    if not args.preset and not args.spec:
        raise UserError("give --preset NAME or --spec SPEC_JSON (or --list-presets)")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.seq_len is not None and args.seq_len < 1:
        raise UserError(f"--seq-len must be at least 1, got {args.seq_len}")
    name, spec = _load_spec(args)
    info = report(spec, batch_size=args.batch_size, seq_len=args.seq_len, precision=args.precision)
    if args.json:
        print(json.dumps({"name": name, **info}, indent=2))
        return 0
    hb, hc = sizing.human_bytes, sizing.human_count
    b = info["breakdown"]
    s = spec
    lines = [
        f"model     {name}",
        f"family    {s.family}  vocab {s.vocab_size}  d_model {s.d_model}  layers {s.n_layers}  heads {s.n_heads}"
        f"  kv-heads {s.n_kv_heads}  ffn {s.ffn_dim}  context {s.context_length}"
        f"  {'tied' if s.tie_embeddings else 'untied'} embeddings",
        "",
        f"parameters               {info['params']:>16,}  ({hc(info['params'])})",
    ]
    for group in ("embeddings", "position_embeddings", "attention", "mlp", "norms", "lm_head"):
        if b[group]:
            lines.append(f"  {group:<22} {b[group]:>16,}")
    lines.append(f"  {'non-embedding':<22} {b['non_embedding']:>16,}")
    mem, inf = info["memory"], info["inference_memory"]
    lines += ["", f"memory (batch {info['batch_size']} x {info['seq_len']} tokens, {info['precision']})"
              "       training        inference"]
    for key, label in (("weights", "weights"), ("gradients", "gradients"), ("optimizer", "AdamW states"),
                       ("activations", "activations / KV cache"), ("total", "total")):
        lines.append(f"  {label:<22} {hb(mem[key]):>16} {hb(inf[key]):>16}")
    lines += [
        "",
        f"FLOPs per token          {hc(info['flops_per_token']):>16}  training (forward + backward)",
        f"                         {hc(info['forward_flops_per_token']):>16}  forward only",
        f"compute-optimal tokens   {hc(info['compute_optimal_tokens']):>16}  (~20 per parameter)",
        f"compute-optimal FLOPs    {hc(info['compute_optimal_tokens'] * info['flops_per_token']):>16}",
    ]
    print("\n".join(lines))
    return 0
