"""Training throughput benchmark (prints figures; not collected by pytest).

    .venv/bin/python tests/bench/bench_train.py [--steps N] [--presets tiny,mini,small] [--threads 2]

For each preset (~1M, ~12M, ~28M parameters) on this machine, in one run:
  * the measured fp32 matmul peak (the MFU reference), for 1 and 2 threads;
  * tokens/s and MFU of our training loop (`train()`: data loading, accumulation, clipping, metrics);
  * tokens/s and MFU of a bare 10-line PyTorch loop on the same model and batch -> the loop's overhead;
  * tokens/s and MFU of a plain hand-written nanoGPT-style GPT of the same parameter count;
  * tokens/s of a plain hand-written llama of the same shape (the same-architecture reference) and of a
    bare loop over transformers' own forward (what our fused forward replaces);
  * a profile of one step: matmul and attention time, and the MFU ceiling if all other work were free;
  * (with --thread-compare) our loop with 1 vs 2 threads.
MFU = FLOPs per token (6 x matmul params + attention, sizing.flops_per_token) x tokens/s / peak.
Figures are medians over the timed steps (the first steps are warm-up). On a shared machine, treat
them as noisy and compare only figures from the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.devices import measure_matmul_peak
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.sizing import count_parameters, flops_per_token
from desktop_app.engine.objectives.causal_lm import mean_loss
from desktop_app.engine.presets import preset
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train.loop import train

BATCH = {"tiny": 16, "mini": 8, "small": 8}


def make_random_dataset(folder: Path, vocab: int, context: int, n_tokens: int) -> Path:
    """A TokenStore folder of random ids (throughput does not care what the tokens mean)."""
    from tokenizers import Tokenizer, models

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", n_tokens), ("val", context * 8 + 1)):
        rng.integers(0, vocab, size=n, dtype=np.uint16).tofile(folder / f"{split}.bin")
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.save(str(folder / "tokenizer.json"))
    manifest = {"format_version": 1, "dtype": "uint16", "tokenizer": {"vocab_size": vocab, "eos_id": 2},
                "chunking": {"context_length": context, "overlap": 0},
                "splits": {"train": {"tokens": n_tokens}, "val": {"tokens": context * 8 + 1}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


# --- a plain nanoGPT-style GPT (the reference a hand-written model would reach) --------------------------

class Block(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.fc, self.out = nn.Linear(d, hidden, bias=False), nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class PlainGPT(nn.Module):
    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int, hidden: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, hidden) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, like our presets
        for m in self.modules():  # GPT-2 init; torch's N(0,1) embeddings make denormal-slow gradients
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class LlamaBlock(nn.Module):
    """The llama block as one would write it by hand: torch's RMSNorm, rotate_half RoPE, SDPA, SwiGLU."""

    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int, eps: float):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.n1, self.n2 = nn.RMSNorm(d, eps=eps), nn.RMSNorm(d, eps=eps)
        self.q = nn.Linear(d, d, bias=False)
        self.k, self.v = (nn.Linear(d, kv_heads * self.hd, bias=False) for _ in range(2))
        self.o = nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    @staticmethod
    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.rope(self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = self.rope(self.k(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, -1))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class PlainLlama(nn.Module):
    """A hand-written llama of the same shape as a llama ModelSpec (the same-architecture reference)."""

    def __init__(self, spec):
        super().__init__()
        d, hd = spec.d_model, spec.d_model // spec.n_heads
        self.wte = nn.Embedding(spec.vocab_size, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, spec.n_heads, spec.n_kv_heads, spec.ffn_dim, spec.norm_eps)
                                    for _ in range(spec.n_layers))
        self.norm = nn.RMSNorm(d, eps=spec.norm_eps)
        self.head = nn.Linear(d, spec.vocab_size, bias=False)
        self.head.weight = self.wte.weight
        inv = 1.0 / spec.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
        freqs = torch.outer(torch.arange(spec.context_length).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.wte(idx)
        cos, sin = self.cos[:t], self.sin[:t]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def gpt_like(spec):
    # SwiGLU has 3 ffn matrices, a GELU MLP 2: a hidden of 1.5 x ffn_dim gives the same parameter count.
    hidden = round(1.5 * spec.ffn_dim)
    model = PlainGPT(spec.vocab_size, spec.context_length, spec.d_model, spec.n_layers, spec.n_heads, hidden)
    d, L, T = spec.d_model, spec.n_layers, spec.context_length
    matmul = L * (4 * d * d + 2 * d * hidden) + spec.vocab_size * d
    return model, 6 * matmul + 12 * L * T * d


class BareStep:
    """The 10-line loop, one step per call: forward, loss, backward, clip, AdamW step. `loss` is "hf"
    (transformers' forward + F.cross_entropy), "ours" (the loss function our loop uses on the same
    model), or "plain" (model(x) -> logits + F.cross_entropy)."""

    def __init__(self, model: nn.Module, batch: torch.Tensor, loss: str):
        self.model, self.kind = model, loss
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as our loop's optimizer
        self.x, self.y = batch[:, :-1], batch[:, 1:]
        model.train()

    def __call__(self) -> float:
        t0 = time.perf_counter()
        if self.kind == "ours":
            loss = mean_loss(self.model, self.x, self.y)
        else:
            logits = self.model(input_ids=self.x, use_cache=False).logits if self.kind == "hf" else self.model(self.x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), self.y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        loss.item()
        return time.perf_counter() - t0


class LoopStep:
    """Our train() generator, advanced one optimizer step per call; returns the seconds spent inside it."""

    def __init__(self, config: RunConfig, run_dir: Path):
        self.gen = train(config, run_dir)

    def __call__(self) -> float:
        t0 = time.perf_counter()
        for event in self.gen:
            if event.type == "step":
                break
        return time.perf_counter() - t0

    def close(self) -> None:
        self.gen.close()


def matmul_ceiling(step: BareStep, flops: float, peak: float) -> dict[str, float]:
    """Profile one step: the time of its matmuls and attention kernels, and the MFU the step would reach
    if everything else (norms, activations, RoPE, softmax, optimizer, Python) took no time at all."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = prof.key_averages()
    matmul = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::addmm_",
                                                                      "aten::bmm")) / 1e6
    attention = sum(e.self_cpu_time_total for e in events if "scaled_dot_product" in e.key) / 1e6
    total = sum(e.self_cpu_time_total for e in events) / 1e6
    return {"matmul_s": matmul, "attention_s": attention, "other_s": total - matmul - attention,
            "ceiling_mfu": flops / (matmul + attention) / peak}


def interleaved(contenders: dict[str, object], steps: int, warmup: int) -> dict[str, float]:
    """Median seconds per step of each contender, run in turn step by step (A B C A B C ...), so a
    shared machine's load changes hit all of them alike."""
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for i in range(steps + warmup):
        for name, step in contenders.items():
            dt = step()
            if i >= warmup:
                times[name].append(dt)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny,mini,small")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per contender (after 2 warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--thread-compare", default="mini", help="preset for the 1 vs 2 threads comparison ('' = skip)")
    ap.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                    help="also time the loop with bf16 autocast (default: where the CPU has AMX/AVX512-BF16)")
    args = ap.parse_args()
    if args.bf16 is None:
        from desktop_app.engine.devices import _cpu_bf16_flags

        args.bf16 = _cpu_bf16_flags()
    warmup = 2
    torch.manual_seed(0)
    # The bare steps train one fixed batch over and over; its gradients shrink into denormal floats,
    # which x86 handles ~100x slower, so later steps would slow down for a reason that has nothing to do
    # with the loop. Flush denormals to zero for every contender alike (process-global).
    torch.set_flush_denormal(True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [p for p in args.presets.split(",") if p]:
            spec = preset(name)
            batch_size = BATCH.get(name, 8)
            n_tokens = (args.steps + warmup + 2) * batch_size * (spec.context_length + 1) * 2
            ds = make_random_dataset(Path(tmp) / f"ds-{name}", spec.vocab_size, spec.context_length, n_tokens)
            fpt = flops_per_token(spec)
            params = count_parameters(spec)
            tokens_per_step = batch_size * spec.context_length
            train_spec = TrainSpec(steps=args.steps + warmup, batch_size=batch_size, eval_every=0, save_every=0,
                                   sample_tokens=0, threads=args.threads, warmup_steps=1, precision="fp32")
            config = RunConfig(model=spec.to_dict(), dataset=str(ds), train=train_spec.to_dict(), seed=0)
            batch = torch.randint(0, spec.vocab_size, (batch_size, spec.context_length + 1))
            gpt, gpt_fpt = gpt_like(spec)
            contenders: dict[str, object] = {
                "loop": LoopStep(config, Path(tmp) / f"run-{name}"),
                "bare": BareStep(build_model(spec, seed=0), batch, "ours"),
                "hf": BareStep(build_model(spec, seed=0), batch, "hf"),
                "gpt": BareStep(gpt, batch, "plain"),
                "llama": BareStep(PlainLlama(spec), batch, "plain"),
            }
            if args.bf16:
                bf16_cfg = config.replace(train={**config.train, "precision": "bf16"})
                contenders["loop_bf16"] = LoopStep(bf16_cfg, Path(tmp) / f"run-bf16-{name}")
            torch.set_num_threads(args.threads)
            peak_before = measure_matmul_peak(torch.device("cpu"), size=1024, seconds=1.0)
            med = interleaved(contenders, args.steps, warmup)
            _clear_peak_cache()
            peak_after = measure_matmul_peak(torch.device("cpu"), size=1024, seconds=1.0)
            _clear_peak_cache()
            peak = max(peak_before, peak_after)
            for c in contenders.values():
                if isinstance(c, LoopStep):
                    c.close()
            tps = {k: tokens_per_step / v for k, v in med.items()}
            gpt_params = sum(p.numel() for p in gpt.parameters())
            r = {"preset": name, "params": params, "batch": f"{batch_size}x{spec.context_length}",
                 "peak_gflops": peak / 1e9, "loop_tok_s": tps["loop"], "loop_mfu": fpt * tps["loop"] / peak,
                 "bare_tok_s": tps["bare"], "overhead_pct": 100 * (med["loop"] / med["bare"] - 1),
                 "gpt_params": gpt_params, "gpt_tok_s": tps["gpt"], "gpt_mfu": gpt_fpt * tps["gpt"] / peak,
                 "loop_vs_gpt": tps["loop"] / tps["gpt"], "llama_tok_s": tps["llama"],
                 "loop_vs_llama": tps["loop"] / tps["llama"], "hf_tok_s": tps["hf"],
                 "loop_vs_hf": tps["loop"] / tps["hf"], "loop_bf16_tok_s": tps.get("loop_bf16")}
            ceiling = matmul_ceiling(contenders["bare"], fpt * tokens_per_step, peak)  # type: ignore[arg-type]
            r.update({k: v for k, v in ceiling.items()})
            rows.append(r)
            print(f"{name:6s} {params / 1e6:5.1f}M  batch {r['batch']:7s} peak {peak / 1e9:5.1f} GFLOP/s | loop "
                  f"{r['loop_tok_s']:7.0f} tok/s MFU {100 * r['loop_mfu']:5.1f}% | bare loop {r['bare_tok_s']:7.0f} "
                  f"tok/s -> loop overhead {r['overhead_pct']:+.1f}% | plain GPT {gpt_params / 1e6:.1f}M "
                  f"{r['gpt_tok_s']:7.0f} tok/s MFU {100 * r['gpt_mfu']:5.1f}% -> ours/GPT {r['loop_vs_gpt']:.2f}x | "
                  f"plain llama {r['llama_tok_s']:7.0f} tok/s -> ours/llama {r['loop_vs_llama']:.2f}x | "
                  f"transformers fwd {r['hf_tok_s']:7.0f} tok/s -> ours/hf {r['loop_vs_hf']:.2f}x"
                  + (f" | loop bf16 {tps['loop_bf16']:7.0f} tok/s ({tps['loop_bf16'] / tps['loop']:.2f}x fp32)"
                     if "loop_bf16" in tps else ""), flush=True)
            print(f"       profile of one step: matmuls {1e3 * ceiling['matmul_s']:.0f} ms, attention kernels "
                  f"{1e3 * ceiling['attention_s']:.0f} ms, everything else {1e3 * ceiling['other_s']:.0f} ms -> "
                  f"MFU ceiling with everything else free: {100 * ceiling['ceiling_mfu']:.0f}%", flush=True)
            del contenders, gpt
        if args.thread_compare:
            spec = preset(args.thread_compare)
            batch = torch.randint(0, spec.vocab_size, (BATCH.get(args.thread_compare, 8), spec.context_length + 1))
            step = BareStep(build_model(spec, seed=0), batch, "ours")

            # Blocks, not step-by-step alternation: changing the thread count re-sizes the thread pool,
            # which costs more than a step. Two rounds of [1 thread, 2 threads] blocks; first step of a block
            # is warm-up.
            times: dict[str, list[float]] = {"1": [], "2": []}
            for _ in range(2):
                for n in (1, 2):
                    torch.set_num_threads(n)
                    step()
                    times[str(n)] += [step() for _ in range(max(2, args.steps // 2))]
            med = {k: statistics.median(v) for k, v in times.items()}
            peaks = {}
            for n in (1, 2):
                torch.set_num_threads(n)
                peaks[n] = measure_matmul_peak(torch.device("cpu"), size=1024, seconds=1.0)
            print(f"\nthreads ({args.thread_compare}, same model and batch, interleaved): 2 threads "
                  f"{med['1'] / med['2']:.2f}x the speed of 1 thread; matmul peak 1 thread {peaks[1] / 1e9:.1f}, "
                  f"2 threads {peaks[2] / 1e9:.1f} GFLOP/s")
    print("\n" + json.dumps({"rows": rows}, default=lambda v: round(v, 4)
                            if isinstance(v, float) and math.isfinite(v) else str(v)))
    return 0


def _clear_peak_cache() -> None:  # re-measure: the cache is per process
    from desktop_app.engine import devices

    devices._PEAK_CACHE.clear()


if __name__ == "__main__":
    sys.exit(main())
