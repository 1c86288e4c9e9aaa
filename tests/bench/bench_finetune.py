"""Fine-tuning benchmark: tokens/s and peak memory of full SFT, LoRA and QLoRA (prints figures; not collected).

    .venv/bin/python tests/bench/bench_finetune.py [--steps 8] [--rounds 2] [--size 100m|20m] [--threads 2]
                                                   [--precision fp32] [--gradient-checkpointing]

On a ~100M-parameter llama-style base built from a LlamaConfig (random weights; throughput does not care),
with the same generated chat data for every method, each method trains in its own child process (so each
peak RSS is its own) through `train()` itself, the loop the app and CLI use:
  * tokens/s (median of the steps after warm-up) and peak RSS (ru_maxrss of the child);
  * the bytes the model's weights take in memory (4-bit weights count as their packed bytes + constants);
  * one LoRA step of our loop against a bare hand-written LoRA loop on the same model and batch (plain
    nn.Linear base + two small matrices per projection, fused AdamW): the cost of peft + the loop;
  * the RSS of a child that only imports torch/transformers/peft (the floor every figure includes).
Each method runs `--rounds` times, interleaved; tokens/s is the best round's median (a shared machine's
noise only ever slows a round down), peak RSS the largest.
Goals (issue 11): LoRA >= 1.2x full SFT's tokens/s and <= 0.5x its peak memory; QLoRA's weights in memory
<= 0.35x LoRA's; our LoRA step >= 0.95x the bare loop's speed.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SIZES = {  # hidden, layers, heads, ffn, vocab
    "100m": (768, 12, 12, 2048, 8192),
    "20m": (384, 8, 6, 1024, 8192),
}
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey",
         "xray", "yankee", "zulu"]


def build_world(root: Path, size: str, records: int, answer_words: int) -> tuple[Path, Path]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer

    hidden, layers, heads, ffn, vocab = SIZES[size]
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(200)) for _ in range(200)]
    tok = hf_tokenizer(train_tokenizer(texts, "byte-bpe", 2048, min_frequency=2))
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=1024,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    base = root / "base"
    model.save_pretrained(base, safe_serialization=True)
    tok.save_pretrained(base)
    data = root / "chats.jsonl"
    with open(data, "w", encoding="utf-8") as fh:
        for _ in range(records):
            q = " ".join(rng.choice(WORDS) for _ in range(12))
            a = " ".join(rng.choice(WORDS) for _ in range(answer_words))
            fh.write(json.dumps({"messages": [{"role": "user", "content": q},
                                              {"role": "assistant", "content": a}]}) + "\n")
    return base, data


def child(args: argparse.Namespace) -> None:
    """One method in this process: train, then print one JSON line of figures."""
    from desktop_app.engine.finetune.base_model import model_footprint_bytes
    from desktop_app.engine.objectives.sft import SFTObjective
    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.train.loop import train

    if args.child == "floor":
        import peft  # noqa: F401
        import transformers  # noqa: F401

        print(json.dumps({"method": "floor", "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    captured = {}

    class Spy(SFTObjective):
        def setup(self, ctx, model):
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            captured["weights"] = model_footprint_bytes(base)
            captured["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
            super().setup(ctx, model)

    adapter = {"none": {}, "lora": {"kind": "lora", "rank": 16, "alpha": 32},
               "qlora": {"kind": "qlora", "rank": 16, "alpha": 32}}[args.child]
    train_spec = TrainSpec(steps=args.steps, batch_size=args.batch, lr=1e-4, warmup_steps=0, eval_every=0,
                           save_every=0, sample_tokens=0, threads=args.threads, precision=args.precision,
                           weight_decay=0.0, log_every=1, gradient_checkpointing=args.gradient_checkpointing)
    config = RunConfig(base_model=args.base, objective="sft", data=[args.data], adapter=adapter,
                       method_options={"max_len": args.max_len, "val_fraction": 0.0}, train=train_spec.to_dict(),
                       seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        rates, times = [], []
        last = None
        for event in train(config, Path(tmp) / "run", objective=Spy()):
            if event.type == "step":
                now = time.perf_counter()
                if last is not None:
                    times.append(now - last)
                last = now
                rates.append(event.metrics["tokens_per_s"])
            if event.type == "finished" and event.reason != "completed":
                raise SystemExit(f"{args.child}: {event.message}")
    warm = max(1, len(rates) // 4)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"method": args.child, "tokens_per_s": statistics.median(rates[warm:]),
                      "step_s": statistics.median(times[warm - 1:]) if times else 0.0,
                      "peak_rss_mb": peak_kb / 1024, "weights_mb": captured["weights"] / 1e6,
                      "trainable": captured["trainable"]}))


def bare_lora(args: argparse.Namespace) -> None:
    """A bare hand-written LoRA loop on the same base and batch shape: tokens/s (one JSON line)."""
    import torch
    from torch import nn
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.finetune.chat_template import as_hf_tokenizer
    from desktop_app.engine.finetune.examples import build_sft_examples
    from desktop_app.engine.objectives.sft import collate

    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # the same process settings as train() (same maths, fair timing)
    from desktop_app.engine.train.cpu_alloc import tune_allocator

    tune_allocator()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32, attn_implementation="sdpa")
    model.requires_grad_(False)

    class LoRALinear(nn.Module):
        def __init__(self, base: nn.Linear, r: int, alpha: float):
            super().__init__()
            self.base = base
            self.a = nn.Parameter(torch.randn(r, base.in_features) / base.in_features ** 0.5)
            self.b = nn.Parameter(torch.zeros(base.out_features, r))
            self.scale = alpha / r

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base(x) + (x @ self.a.t() @ self.b.t()) * self.scale

    names = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for layer in model.model.layers:
        for holder in (layer.self_attn, layer.mlp):
            for name in names:
                if hasattr(holder, name):
                    setattr(holder, name, LoRALinear(getattr(holder, name), 16, 32.0))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0, fused=True)
    tok = as_hf_tokenizer(args.base)
    examples, _ = build_sft_examples([args.data], tok, args.max_len)
    rows = [(e.input_ids, e.labels, None) for e in examples[:args.batch]]
    batch = collate(rows, tok.pad_token_id)
    x, y = batch.input_ids[:, :-1], batch.labels[:, 1:]
    mask = y != -100
    tokens = sum(batch.lengths)
    model.train()
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        logits = model(input_ids=x, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits[mask].float(), y[mask])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    warm = max(1, len(times) // 4)
    print(json.dumps({"method": "bare-lora", "tokens_per_s": tokens / statistics.median(times[warm:]),
                      "step_s": statistics.median(times[warm:])}))


def run_child(flag: str, method: str, args: argparse.Namespace, base: Path, data: Path) -> dict:
    cmd = [sys.executable, __file__, flag, method, "--base", str(base), "--data", str(data), "--steps",
           str(args.steps), "--batch", str(args.batch), "--threads", str(args.threads), "--max-len",
           str(args.max_len), "--precision", args.precision]
    if args.gradient_checkpointing:
        cmd.append("--gradient-checkpointing")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"{method} failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=tuple(SIZES), default="100m")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "auto"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--child", choices=("none", "lora", "qlora", "floor"))
    parser.add_argument("--bare", choices=("lora",))
    parser.add_argument("--base")
    parser.add_argument("--data")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.bare:
        bare_lora(args)
        return
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base, data = build_world(Path(tmp), args.size, records=64, answer_words=120)
        floor = run_child("--child", "floor", args, base, data)
        for _ in range(args.rounds):
            for m in ("none", "lora", "qlora"):
                runs.setdefault(m, []).append(run_child("--child", m, args, base, data))
            runs.setdefault("bare-lora", []).append(run_child("--bare", "lora", args, base, data))
    results = {}
    for m, rounds in runs.items():
        best = max(rounds, key=lambda r: r["tokens_per_s"])
        results[m] = {**best, "peak_rss_mb": max(r.get("peak_rss_mb", 0.0) for r in rounds),
                      "all_tokens_per_s": [round(r["tokens_per_s"]) for r in rounds]}
    hidden, layers, _, ffn, vocab = SIZES[args.size]
    params = layers * (4 * hidden * hidden + 3 * hidden * ffn) + vocab * hidden
    print(f"\nfine-tuning a {params / 1e6:.0f}M-parameter llama-style base; batch {args.batch} x up to "
          f"{args.max_len} tokens, {args.steps} steps, {args.threads} threads, {args.precision}"
          f"{', gradient checkpointing' if args.gradient_checkpointing else ''}; best of {args.rounds} rounds; "
          f"import-only floor {floor['peak_rss_mb']:,.0f} MB RSS\n")
    print("| method | trainable params | tokens/s (rounds) | step s | peak RSS MB | above floor MB | "
          "weights in memory MB |")
    print("|---|---|---|---|---|---|---|")
    names = {"none": "full SFT", "lora": "LoRA r16", "qlora": "QLoRA r16 (NF4+DQ, 8-bit AdamW)"}
    for m in ("none", "lora", "qlora"):
        r = results[m]
        print(f"| {names[m]} | {r['trainable']:,} | {r['tokens_per_s']:,.0f} ({r['all_tokens_per_s']}) | "
              f"{r['step_s']:.2f} | {r['peak_rss_mb']:,.0f} | {r['peak_rss_mb'] - floor['peak_rss_mb']:,.0f} | "
              f"{r['weights_mb']:,.0f} |")
    full, lora, qlora, bare = results["none"], results["lora"], results["qlora"], results["bare-lora"]
    print(f"\nLoRA / full tokens/s: {lora['tokens_per_s'] / full['tokens_per_s']:.2f}x (goal >= 1.2x)")
    above = floor["peak_rss_mb"]
    print(f"LoRA / full peak RSS: {lora['peak_rss_mb'] / full['peak_rss_mb']:.2f}x (goal <= 0.5x); above the "
          f"import floor: {(lora['peak_rss_mb'] - above) / (full['peak_rss_mb'] - above):.2f}x")
    print(f"QLoRA / LoRA weights in memory: {qlora['weights_mb'] / lora['weights_mb']:.2f}x (goal <= 0.35x)")
    print(f"our LoRA step / bare hand-written LoRA loop: {lora['tokens_per_s'] / bare['tokens_per_s']:.2f}x "
          f"({lora['tokens_per_s']:,.0f} vs {bare['tokens_per_s']:,.0f} tokens/s, rounds {lora['all_tokens_per_s']} vs "
          f"{bare['all_tokens_per_s']}; goal >= 0.95x)")


if __name__ == "__main__":
    main()
