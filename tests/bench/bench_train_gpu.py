"""GPU training throughput benchmark (prints figures; not collected by pytest). On a CUDA machine:

    python tests/bench/bench_train_gpu.py [--cases llama110m,gpt2,lora,llama1b] [--modes auto] [--steps 20]

In one run on one GPU, bf16 autocast, fused AdamW, for each case:
  * the measured bf16 matmul peak (8192^3: the MFU reference, as in issue 21);
  * our loop, `train()` itself, with kernels `auto` (what a user gets) and any other --modes (compile, liger,
    eager: the measurements model/fast_path.MEASURED is chosen from), and a bare 10-line loop over the same fast path
    (-> the loop's own overhead);
  * a plain PyTorch llama of the same shape and a nanoGPT-style GPT of the same size, each compiled (model and loss
    in one torch.compile) with F.cross_entropy on the full logits;
  * `lora`: LoRA r16 on every projection of the 110M llama, SFT on packed 1024-token windows, against full SFT of the
    same model and data (per token, a LoRA step should cost no more than a full one).
Per contender: tokens/s (median of --steps synchronised steps after --warmup), MFU = (6 N_non-embedding + 12 L d T)
per token / peak (the issue's definition), peak GPU memory, and the first step's time (setup and compilation
included). Contenders run one after another (not interleaved), each with the GPU to itself.

Smoke test of this script on a CPU (tiny shapes, no compilation): --smoke.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import make_random_dataset

from desktop_app.engine.devices import measure_matmul_peak
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.sizing import parameter_breakdown
from desktop_app.engine.presets import preset
from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.train.loop import train

# The shapes of issue 21's measurements.
CASES: dict[str, tuple[ModelSpec, int]] = {
    "llama110m": (ModelSpec("llama", 32000, 768, 12, 12, 12, 2048, 1024), 16),
    "gpt2": (preset("gpt2-small"), 16),  # 50304 tokens: the preset's padded vocabulary
    "llama1b": (ModelSpec("llama", 32000, 2048, 16, 16, 8, 5632, 2048, tie_embeddings=False), 4),
}
SMOKE: dict[str, tuple[ModelSpec, int]] = {
    "llama110m": (ModelSpec("llama", 512, 64, 2, 4, 4, 128, 64), 4),
    "gpt2": (ModelSpec("gpt2", 512, 64, 2, 4, 4, 256, 64), 4),
    "llama1b": (ModelSpec("llama", 512, 64, 2, 4, 2, 128, 64, tie_embeddings=False), 2),
}
ISSUE = {"llama110m": "197-204k tok/s eager, compiled plain llama 394-419k", "llama1b": "51.5k eager (34.8%), "
         "compiled reference 81.1k (54.8%)", "gpt2": "132.6k eager, nanoGPT-style 316k (344k at vocab 50304)",
         "lora": "139k tok/s (a LoRA step slower than a full one)"}


def issue_flops_per_token(spec: ModelSpec, seq: int) -> float:
    """6 N_non-embedding + 12 L d T: the MFU numerator of issue 21's table."""
    return 6.0 * parameter_breakdown(spec)["non_embedding"] + 12.0 * spec.n_layers * spec.d_model * seq


# --- the references: plain PyTorch models, compiled --------------------------------------------------------------

class LlamaBlock(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        d, self.heads, self.kv = spec.d_model, spec.n_heads, spec.n_kv_heads
        self.hd = d // spec.n_heads
        self.n1, self.n2 = nn.RMSNorm(d, eps=spec.norm_eps), nn.RMSNorm(d, eps=spec.norm_eps)
        self.q, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.k, self.v = (nn.Linear(d, self.kv * self.hd, bias=False) for _ in range(2))
        self.gate, self.up = (nn.Linear(d, spec.ffn_dim, bias=False) for _ in range(2))
        self.down = nn.Linear(spec.ffn_dim, d, bias=False)

    @staticmethod
    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.rope(self.q(h).view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = self.rope(self.k(h).view(b, t, self.kv, self.hd).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, -1))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class PlainLlama(nn.Module):
    """A hand-written llama of a llama ModelSpec's shape (the same-architecture reference)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        d, hd = spec.d_model, spec.d_model // spec.n_heads
        self.wte = nn.Embedding(spec.vocab_size, d)
        self.blocks = nn.ModuleList(LlamaBlock(spec) for _ in range(spec.n_layers))
        self.norm = nn.RMSNorm(d, eps=spec.norm_eps)
        self.head = nn.Linear(d, spec.vocab_size, bias=False)
        if spec.tie_embeddings:
            self.head.weight = self.wte.weight
        inv = 1.0 / spec.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
        emb = torch.outer(torch.arange(spec.context_length).float(), inv).repeat(1, 2)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        cos, sin = self.cos[: idx.shape[1]], self.sin[: idx.shape[1]]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.fc, self.out = nn.Linear(d, hidden, bias=False), nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=2))
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class PlainGPT(nn.Module):
    """nanoGPT-style GPT: learned positions, LayerNorm, GELU MLP, no linear biases, tied embeddings."""

    def __init__(self, vocab: int, ctx: int, d: int, layers: int, heads: int, hidden: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads, hidden) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def gpt_of(spec: ModelSpec) -> PlainGPT:
    """The nanoGPT-style GPT of the spec's size (gpt2: its own shape; llama: a GELU MLP of 1.5 x ffn_dim, the same
    parameter count as SwiGLU's three matrices)."""
    hidden = spec.ffn_dim if spec.family == "gpt2" else round(1.5 * spec.ffn_dim)
    return PlainGPT(spec.vocab_size, spec.context_length, spec.d_model, spec.n_layers, spec.n_heads, hidden)


# --- contenders: one optimizer step per call -----------------------------------------------------------------------

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class BareStep:
    """A 10-line loop over `loss_fn(x, y)` (compiled or not): forward, backward, clip, fused AdamW step."""

    def __init__(self, params: list[nn.Parameter], loss_fn: Any, batch: torch.Tensor, device: torch.device,
                 dtype: torch.dtype | None):
        self.params, self.loss_fn, self.device, self.dtype = params, loss_fn, device, dtype
        self.opt = torch.optim.AdamW(params, lr=1e-4, fused=device.type == "cuda")
        self.x, self.y = batch[:, :-1], batch[:, 1:]

    def __call__(self) -> float:
        t0 = time.perf_counter()
        autocast = torch.autocast(self.device.type, dtype=self.dtype) if self.dtype else contextlib.nullcontext()
        with autocast:
            loss = self.loss_fn(self.x, self.y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        loss.item()
        _sync(self.device)
        return time.perf_counter() - t0


class LoopStep:
    """Our train() generator, advanced one optimizer step per call (its step ends in a device sync already)."""

    def __init__(self, config: RunConfig, run_dir: Path):
        self.gen = train(config, run_dir)
        self.logs: list[str] = []

    def __call__(self) -> float:
        t0 = time.perf_counter()
        for event in self.gen:
            if event.type == "log":
                self.logs.append(f"{event.level}: {event.message}")
            if event.type == "step":
                return time.perf_counter() - t0
            if event.type == "finished":
                raise RuntimeError(f"the run ended early: {event.message}")
        raise RuntimeError("the run ended early")

    def close(self) -> None:
        self.gen.close()


@dataclass
class Result:
    case: str
    contender: str
    tokens_per_s: float
    mfu: float
    peak_gib: float
    first_step_s: float
    note: str = ""


def measure(make: Any, *, steps: int, warmup: int, tokens_per_step: int, flops_per_token: float, peak: float,
            device: torch.device, case: str, name: str) -> Result:
    """Build a contender (inside the measurement: its setup counts in the first step), time it, free it."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    step = make()
    step()
    first = time.perf_counter() - t0
    for _ in range(warmup - 1):
        step()
    times = [step() for _ in range(steps)]
    peak_mem = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    note = ""
    if isinstance(step, LoopStep):
        note = next((m for m in step.logs if "kernels " in m), "")
        step.close()
    del step
    gc.collect()
    tps = tokens_per_step / statistics.median(times)
    result = Result(case, name, tps, flops_per_token * tps / peak if peak else 0.0, peak_mem, first, note)
    print(f"  {name:28s} {tps:10,.0f} tok/s  MFU {100 * result.mfu:5.1f}%  peak {peak_mem:6.1f} GiB  first step "
          f"{first:6.1f} s" + (f"  [{note[:160]}]" if note else ""), flush=True)
    return result


# --- the cases ------------------------------------------------------------------------------------------------------

def train_config(spec: ModelSpec, dataset: Path, batch: int, mode: str, device: str, precision: str,
                 steps: int) -> RunConfig:
    spec_train = TrainSpec(steps=steps, batch_size=batch, warmup_steps=1, eval_every=0, save_every=0,
                           sample_tokens=0, precision=precision, device=device, kernels=mode, lr=1e-4)
    return RunConfig(model=spec.to_dict(), dataset=str(dataset), train=spec_train.to_dict(), seed=0)


def pretraining_case(case: str, spec: ModelSpec, batch: int, args: Any, tmp: Path, device: torch.device,
                     dtype: torch.dtype | None, peak: float) -> list[Result]:
    from desktop_app.engine.model.fast_path import KernelRequest, choose_kernels, prepare
    from desktop_app.engine.objectives.causal_lm import mean_loss

    seq = spec.context_length
    tokens = batch * seq
    total_steps = args.steps + args.warmup
    dataset = make_random_dataset(tmp / f"ds-{case}", spec.vocab_size, seq, (total_steps + 4) * batch * (seq + 1))
    fpt = issue_flops_per_token(spec, seq)
    common = {"steps": args.steps, "warmup": args.warmup, "tokens_per_step": tokens, "flops_per_token": fpt,
              "peak": peak, "device": device, "case": case}
    gen = torch.Generator().manual_seed(0)
    batch_ids = torch.randint(0, spec.vocab_size, (batch, seq + 1), generator=gen).to(device)
    results = []
    print(f"\n{case}: {spec.family} d{spec.d_model} x {spec.n_layers} layers, {spec.n_heads} heads "
          f"({spec.n_kv_heads} kv), vocab {spec.vocab_size}, batch {batch} x {seq}; issue 21: {ISSUE[case]}",
          flush=True)
    for mode in args.modes:
        # many steps: `auto` compiles only runs long enough to pay it back (the generator is closed after timing)
        config = train_config(spec, dataset, batch, mode, device.type, args.precision, 100_000)
        results.append(measure(lambda c=config, m=mode: LoopStep(c, tmp / f"run-{case}-{m}-{time.time_ns()}"),
                               name=f"train() kernels {mode}", **common))

    def bare_ours() -> BareStep:
        model = build_model(spec, seed=0).to(device).train()
        choice = choose_kernels(model, device, KernelRequest(requested=args.modes[0], steps=100_000))
        forward, _ = prepare(model, choice, tmp / "runs" / "bare")
        return BareStep(list(model.parameters()), lambda x, y: mean_loss(forward, x, y), batch_ids, device, dtype)

    results.append(measure(bare_ours, name=f"bare loop, kernels {args.modes[0]}", **common))

    def reference(make_model: Any) -> Any:
        def make() -> BareStep:
            model = make_model().to(device).train()

            def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                logits = model(x)
                return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

            return BareStep(list(model.parameters()), torch.compile(loss) if args.compile_references else loss,
                            batch_ids, device, dtype)
        return make

    if spec.family == "llama":
        results.append(measure(reference(lambda: PlainLlama(spec)), name="plain llama, compiled", **common))
    gpt_flops = issue_flops_per_token(spec, seq) if spec.family == "gpt2" else _gpt_flops(spec, seq)
    results.append(measure(reference(lambda: gpt_of(spec)), name="nanoGPT-style GPT, compiled",
                           **{**common, "flops_per_token": gpt_flops}))
    return results


def _gpt_flops(spec: ModelSpec, seq: int) -> float:
    hidden = round(1.5 * spec.ffn_dim)
    blocks = spec.n_layers * (4 * spec.d_model ** 2 + 2 * spec.d_model * hidden + 4 * spec.d_model)
    return 6.0 * blocks + 12.0 * spec.n_layers * spec.d_model * seq


def _chat_data(folder: Path, words: list[str], rows: int, seq: int) -> Path:
    """SFT records of random words, ~40-400 tokens each (packed into `seq`-token windows)."""
    rng = random.Random(0)
    lines = []
    while len(lines) < rows * seq // 150:
        user = " ".join(rng.choice(words) for _ in range(rng.randint(10, 120)))
        answer = " ".join(rng.choice(words) for _ in range(rng.randint(20, 250)))
        lines.append(json.dumps({"messages": [{"role": "user", "content": user},
                                              {"role": "assistant", "content": answer}]}))
    path = folder / "chats.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def lora_case(spec: ModelSpec, batch: int, args: Any, tmp: Path, device: torch.device, peak: float) -> list[Result]:
    """LoRA r16 on every projection vs full fine-tuning, SFT of the same model on packed windows, through train()."""
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer

    base = tmp / "lora-base"
    rng = random.Random(0)
    syllables = ["ka", "to", "mi", "re", "su", "no", "ha", "ri", "pe", "lo", "an", "et"]
    words = sorted({"".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(3000)})
    corpus = [" ".join(rng.choice(words) for _ in range(60)) for _ in range(3000)]
    tokenizer = hf_tokenizer(train_tokenizer(corpus, "byte-bpe", min(spec.vocab_size, 4096), 2))
    model = build_model(spec, seed=0)  # the model's 32000 rows cover the smaller tokenizer
    model.save_pretrained(base, safe_serialization=True)
    tokenizer.save_pretrained(base)
    data = _chat_data(tmp, words, (args.steps + args.warmup + 4) * batch, spec.context_length)
    seq = spec.context_length
    print(f"\nlora: SFT of the {spec.d_model}-wide {spec.n_layers}-layer llama, packed {seq}-token windows, batch "
          f"{batch}; issue 21: {ISSUE['lora']}", flush=True)
    results = []
    for adapter in ({"kind": "lora", "rank": 16, "alpha": 32.0}, {"kind": "none"}):
        name = "LoRA r16, train()" if adapter["kind"] == "lora" else "full SFT, train()"
        config = RunConfig(base_model=str(base), objective="sft", data=[str(data)], adapter=adapter,
                           method_options={"packing": True, "max_len": seq, "val_fraction": 0.0},
                           train=TrainSpec(steps=100_000, batch_size=batch, warmup_steps=1, eval_every=0,
                                           save_every=0, sample_tokens=0, precision=args.precision,
                                           device=device.type, kernels=args.modes[0], lr=1e-4).to_dict(), seed=0)
        # packed rows are full windows: tokens per step = batch x seq (the loop's tokens/s counts the same)
        flops = issue_flops_per_token(spec, seq) * (2.0 / 3.0 if adapter["kind"] == "lora" else 1.0)
        results.append(measure(lambda c=config, k=adapter["kind"]: LoopStep(c, tmp / f"run-lora-{k}-{time.time_ns()}"),
                               steps=args.steps, warmup=args.warmup, tokens_per_step=batch * seq, flops_per_token=flops,
                               peak=peak, device=device, case="lora", name=name))
    return results


def goals(results: list[Result]) -> list[str]:
    """Issue 21's goals, each with the figures it is judged by."""
    by = {(r.case, r.contender): r for r in results}
    out = []

    def get(case: str, prefix: str) -> Result | None:
        return next((r for (c, n), r in by.items() if c == case and n.startswith(prefix)), None)

    ours, ref = get("llama110m", "train() kernels auto"), get("llama110m", "plain llama")
    if ours and ref:
        out.append(f"llama 110M: train() {ours.tokens_per_s / ref.tokens_per_s:.2f}x the compiled plain llama (goal "
                   f">= 1.0x), peak memory {ours.peak_gib:.1f} vs {ref.peak_gib:.1f} GiB (goal: no higher)")
    big = get("llama1b", "train() kernels auto")
    if big:
        out.append(f"llama ~1B: train() MFU {100 * big.mfu:.1f}% (goal >= 55%)")
    gpt, nano = get("gpt2", "train() kernels auto"), get("gpt2", "nanoGPT")
    if gpt and nano:
        out.append(f"gpt2-small: train() {gpt.tokens_per_s / nano.tokens_per_s:.2f}x the compiled nanoGPT-style GPT "
                   "at vocab 50304 (goal >= 1.0x)")
    lora, full = get("lora", "LoRA"), get("lora", "full")
    if lora and full:
        out.append(f"LoRA: {lora.tokens_per_s:,.0f} tok/s = {lora.tokens_per_s / 139e3:.2f}x the issue's 139k (goal >= "
                   f"1.5x), {lora.tokens_per_s / full.tokens_per_s:.2f}x full SFT per token (goal >= 1.0x)")
    for case in ("llama110m", "gpt2", "llama1b"):
        loop, bare = get(case, "train() kernels auto"), get(case, "bare loop")
        if loop and bare:
            out.append(f"{case}: the loop's own cost {100 * (bare.tokens_per_s / loop.tokens_per_s - 1):+.1f}% over "
                       "a bare loop on the same kernels")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="llama110m,gpt2,lora,llama1b")
    ap.add_argument("--modes", default="auto", help="kernels for train(): auto,compile,liger,eager (first: the bare "
                    "loop's and LoRA's)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per contender")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation, autotuning)")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--json-out", type=Path, help="also write the results as JSON here")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, references uncompiled: checks this "
                    "script, measures nothing")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    args.compile_references = not args.smoke
    if args.smoke:
        device, args.precision, cases = torch.device("cpu"), "fp32", SMOKE
        args.steps, args.warmup = min(args.steps, 2), min(args.warmup, 1)
    elif not torch.cuda.is_available():
        print("bench_train_gpu needs a CUDA GPU (or --smoke on the CPU)", file=sys.stderr)
        return 2
    else:
        device, cases = torch.device("cuda"), CASES
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    peak = measure_matmul_peak(device, dtype or torch.float32, size=8192 if device.type == "cuda" else 512,
                               seconds=1.0)
    print(f"matmul peak {peak / 1e12:.1f} TFLOP/s ({args.precision}); timed {args.steps} steps after {args.warmup}",
          flush=True)
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for case in [c for c in args.cases.split(",") if c]:
            if case == "lora":
                spec, batch = cases["llama110m"]
                results += lora_case(spec, batch, args, tmp, device, peak)
            else:
                spec, batch = cases[case]
                results += pretraining_case(case, spec, batch, args, tmp, device, dtype, peak)
    print("\nGoals (issue 21):")
    for line in goals(results):
        print("  " + line)
    def plain(v: Any) -> Any:  # JSON has no NaN (the CPU smoke's memory)
        return (round(v, 4) if math.isfinite(v) else None) if isinstance(v, float) else v

    rows = [{k: plain(v) for k, v in r.__dict__.items()} for r in results]
    payload = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
               "peak_flops": peak, "results": rows}
    text = json.dumps(payload)
    print("\n" + text)
    if args.json_out:
        args.json_out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
