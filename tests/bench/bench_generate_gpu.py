"""Benchmark (CUDA): the app's decoder against transformers on the same GPU, same run; and a self-play step.

Run by hand where a GPU is lent (see docs/gpu.md for the exact commands):

    python tests/bench/bench_generate_gpu.py --models llama-110m          # decode table, one model (~5 min)
    python tests/bench/bench_generate_gpu.py --models gpt2-124m
    python tests/bench/bench_generate_gpu.py --decode 0 --selfplay 40     # self-play step split, CUDA vs CPU

Decode (random-initialised llama 110M / gpt2 124M, bf16, a 16-token prompt, --tokens new tokens, greedy, no
end-of-sequence token, medians of --repeats; tokens/s = all rows' new tokens / wall time of the whole call,
prompt included; every contender warmed up first, so compile and capture times are not counted):
  app        stream_text (what generate, chat and the server's engine call): the static path (static KV cache,
             CUDA graphs per batch/length bucket, sampling and stop checks on the GPU, tokens read every 8 steps)
             and the text layer (incremental detokenizer, stop strings)
  app-tok    the same decode without the text layer (static_completions: what rollouts call)
  app-eager  app-tok with CUDA graphs off (each step's kernels launched one by one)
  app-compiled  app-tok with each step compiled by torch.compile before capture (AZR_DECODE_COMPILE=1;
             opt-in: add it to --contenders to decide the default by measurement; each shape compiles once)
  hf         transformers generate() (dynamic cache)
  hf-static  generate(cache_implementation="static"): transformers then compiles the forward with
             torch.compile(mode="reduce-overhead"), i.e. CUDA graphs (its documented fast path)
The ratio column is app / hf-static. TTFT: the app's time to first token at batch 1 (median). Exactness: the
app's greedy tokens against generate() in fp32 (TF32 off) on the same random weights.

Self-play (--selfplay STEPS): builds the CPU demo's base (mini-world corpus, 160-token BPE, the tiny preset
pretrained on the GPU for --pretrain steps), then runs STEPS self-play steps of the demo's settings (held-out
evaluation every 10 steps, as the demo does) on CUDA and on the CPU (1 thread, as the demo), and prints the
time of a step split into rollouts, answer checking, update and evaluation, and rounds per minute. The CPU it
runs on is the GPU machine's; the reference machine's figure (AMD EPYC, 2 cores: ~0.23 s per step) is printed
beside it.

Goals (issue 22): app >= 1,500 tokens/s at batch 1 and >= 30,000 at batch 32 (110-124M); app >= 2x hf-static
at every size and batch; a self-play step on CUDA >= 5x faster than on the reference CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.generate import static_cache
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.device_sampling import SamplingSettings
from desktop_app.engine.generate.settings import DecodeLimits, PromptRows
from desktop_app.engine.generate.static_decode import StaticOptions, static_completions
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.specs import GenerateSpec

REFERENCE_CPU_STEP_S = 0.23  # the CPU demo's self-play step on the reference machine (docs/selfplay.md)
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while", "a", "cat", "sat", "on", "the",
         "mat", "and", "watched", "birds", "fly", "over", "the", "river", "towards", "an", "old", "mill", "at", "the",
         "end", "of", "a", "long", "green", "valley"]


DEVICE = "cuda"
SHAPES = {"hidden": 768, "layers": 12, "heads": 12}  # --dry-run shrinks them


def build(name: str, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    h, n, heads = SHAPES["hidden"], SHAPES["layers"], SHAPES["heads"]
    if name == "llama-110m":
        cfg = LlamaConfig(vocab_size=32000, hidden_size=h, intermediate_size=h * 8 // 3, num_hidden_layers=n,
                          num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=1024,
                          tie_word_embeddings=True, attn_implementation="sdpa")
        model = LlamaForCausalLM(cfg)
    elif name == "gpt2-124m":
        model = GPT2LMHeadModel(GPT2Config(n_embd=h, n_layer=n, n_head=heads, attn_implementation="sdpa"))
    else:
        raise SystemExit(f"unknown model {name!r}: llama-110m or gpt2-124m")
    model.config.eos_token_id = None  # every contender generates exactly --tokens tokens
    model.generation_config.eos_token_id = None
    return model.to(DEVICE, dtype).eval()


def tokenizer():
    corpus = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(40)) + f" {i}" for i in range(400)]
    tok = hf_tokenizer(train_tokenizer(corpus, "byte-bpe", 2048, min_frequency=1))
    tok.eos_token = None  # no stop token: every row runs to the budget (the random model would hit one)
    return tok


def prompt_of(tok, length: int) -> tuple[str, list[int]]:
    ids = tok(" ".join(WORDS * 4), add_special_tokens=False)["input_ids"][:length]
    text = tok.decode(ids)
    again = tok(text, add_special_tokens=False)["input_ids"]
    return text, again


def sync_time(fn) -> tuple[float, object]:
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def run_app(loaded: LoadedModel, prompt: str, batch: int, tokens: int) -> tuple[float, float]:
    spec = GenerateSpec(max_new_tokens=tokens, temperature=0.0, top_k=0)
    wall, stats = sync_time(lambda: [e for e in stream_text(loaded, [prompt] * batch, spec) if e.type == "generation"])
    produced = sum(len(s.token_ids) for s in stats)
    assert produced == batch * tokens, f"the app stopped early: {produced} of {batch * tokens} tokens"
    return produced / wall, statistics.median(s.ttft_ms for s in stats)


def run_tokens(model, ids: list[int], batch: int, tokens: int, graphs: bool | None, compiled: bool = False) -> float:
    options = StaticOptions(graphs=graphs, compile_steps=compiled)
    wall, out = sync_time(lambda: static_completions(model, PromptRows([ids] * batch), DecodeLimits(tokens),
                                                     SamplingSettings(), 0, options))
    return sum(len(o) for o in out) / wall


def run_hf(model, ids: list[int], batch: int, tokens: int, static: bool) -> float:
    enc = torch.tensor([ids] * batch, device=DEVICE)
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones_like(enc))
    if static:
        kw["cache_implementation"] = "static"
    with torch.inference_mode():
        wall, out = sync_time(lambda: model.generate(enc, **kw))
    return (out.shape[1] - enc.shape[1]) * batch / wall


def exactness(name: str, ids: list[int], tokens: int = 64) -> str:
    """The app's greedy tokens against generate() in fp32 on the same weights (TF32 off)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        model = build(name, torch.float32)
        prompts = [ids, ids[:7], ids[3:12], ids[:2]]
        ours = static_completions(model, PromptRows(prompts), DecodeLimits(tokens), SamplingSettings())
        same = 0
        for p, o in zip(prompts, ours, strict=True):
            with torch.inference_mode():
                ref = model.generate(torch.tensor([p], device=DEVICE), max_new_tokens=tokens, do_sample=False,
                                     pad_token_id=0)[0, len(p):].tolist()
            same += o == ref
        del model  # its kept decoder goes with it
        return f"{same}/{len(prompts)} prompts identical to generate() over {tokens} greedy tokens (fp32)"
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def decode_table(args) -> None:
    tok = tokenizer()
    where = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (dry run: tiny shapes, fp32)"
    print(f"torch {torch.__version__}, {where}; bf16, {args.prompt}-token prompt, "
          f"{args.tokens} new tokens, greedy, medians of {args.repeats}; tokens/s")
    for name in args.models.split(","):
        bench_model(name, tok, args)
        torch.cuda.empty_cache()


def bench_model(name: str, tok, args) -> None:
    contenders = args.contenders.split(",")
    text, ids = prompt_of(tok, args.prompt)
    print(f"\n{name}: prompt {len(ids)} tokens; exactness: {exactness(name, ids)}")
    width = {c: max(9, len(c)) for c in contenders}
    header = f"{'model':>10} {'batch':>5} | " + " ".join(f"{c:>{width[c]}}" for c in contenders) + \
             f" | {'app/hf-static':>13} {'app TTFT':>9}"
    print(header)
    print("-" * len(header))
    model = build(name, torch.bfloat16 if DEVICE == "cuda" else torch.float32)
    loaded = LoadedModel(model=model, tokenizer=tok, spec=None, kind="hf", path=Path("."), name=name)
    runs = {
        "app": lambda b: run_app(loaded, text, b, args.tokens),
        "app-tok": lambda b: (run_tokens(model, ids, b, args.tokens, None), 0.0),
        "app-eager": lambda b: (run_tokens(model, ids, b, args.tokens, False), 0.0),
        "app-compiled": lambda b: (run_tokens(model, ids, b, args.tokens, None, compiled=True), 0.0),
        "hf": lambda b: (run_hf(model, ids, b, args.tokens, False), 0.0),
        "hf-static": lambda b: (run_hf(model, ids, b, args.tokens, True), 0.0),
    }
    for batch in (int(b) for b in args.batches.split(",")):
        rates: dict[str, list[float]] = {c: [] for c in contenders}
        ttfts: list[float] = []
        for c in contenders:  # warm-up: compile, capture, allocate
            t0 = time.perf_counter()
            runs[c](batch)
            if time.perf_counter() - t0 > 20:
                print(f"  ({c} warm-up at batch {batch}: {time.perf_counter() - t0:.0f} s)", flush=True)
        for _ in range(args.repeats):  # interleaved, so drifts hit all alike
            for c in contenders:
                rate, ttft = runs[c](batch)
                rates[c].append(rate)
                if c == "app":
                    ttfts.append(ttft)
        med = {c: statistics.median(v) for c, v in rates.items()}
        ratio = med["app"] / med["hf-static"] if "app" in med and "hf-static" in med else float("nan")
        ttft = f"{statistics.median(ttfts):7.1f}ms" if ttfts else "-"
        print(f"{name:>10} {batch:>5} | " + " ".join(f"{med[c]:{width[c]},.0f}" for c in contenders) +
              f" | {ratio:12.2f}x {ttft:>9}", flush=True)
    decoder = static_cache.kept_decoder(model)
    if decoder is not None:
        print(f"  graphs: {decoder.graphs.captures} captured, {decoder.graphs.replays} replays "
              f"({decoder.graphs.reason}); cache {decoder.rows} rows x {decoder.columns} columns")


def selfplay_split(args) -> None:
    from desktop_app.engine.objectives.selfplay import SelfPlayObjective
    from desktop_app.engine.recipes.selfplay_demo import DEMO_SELFPLAY, run_demo
    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.train.loop import train

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for event in run_demo(Path(tmp) / "demo", minutes=60, pretrain_steps=args.pretrain, selfplay_steps=1,
                              eval_every=1000, corpus_tasks=4000, train_overrides={"device": DEVICE}):
            if getattr(event, "type", "") == "finished" and getattr(event, "reason", "") != "completed":
                raise SystemExit(f"the demo base failed: {event}")
        base = Path(tmp) / "demo" / "pretrain"
        took = time.perf_counter() - t0
        print(f"\nself-play: demo base pretrained on {DEVICE} ({args.pretrain} steps, {took:.0f} s)")
        results = {}
        for label, device in (("cuda", DEVICE), ("cpu", "cpu")):
            steps = args.selfplay if label == "cuda" else max(args.selfplay // 3, min(args.selfplay, 12))
            objective = SelfPlayObjective(dict(DEMO_SELFPLAY))
            rounds: list[float] = []
            evals: list[float] = []
            play, evaluate = objective.play_round, objective.evaluate

            def timed_play(index, play=play, rounds=rounds):
                t = time.perf_counter()
                out = play(index)
                rounds.append(time.perf_counter() - t)
                return out

            def timed_eval(model, ctx, evaluate=evaluate, evals=evals):
                t = time.perf_counter()
                out = evaluate(model, ctx)
                evals.append(time.perf_counter() - t)
                return out

            objective.play_round, objective.evaluate = timed_play, timed_eval
            spec = TrainSpec(steps=steps, batch_size=64, micro_batch_size=32, lr=2e-4, warmup_steps=5,
                             schedule="constant", eval_every=10, save_every=0, sample_tokens=0, log_every=1,
                             early_stopping_patience=0, grad_clip=1.0, threads=1, device=device)
            config = RunConfig(base_model=str(base), objective="selfplay", train=spec.to_dict(), seed=0)
            stamps, shares = [], []
            for event in train(config, Path(tmp) / f"sp-{label}", objective=objective):
                if event.type == "step":
                    stamps.append(event.elapsed_s)
                    shares.append(event.metrics.get("check_share", 0.0))
            objective.close()
            skip = 3  # the first steps allocate, capture graphs and warm caches
            step = (stamps[-1] - stamps[skip]) / (len(stamps) - 1 - skip)
            round_s = statistics.mean(rounds[skip:])
            check = statistics.mean(shares[skip:]) * round_s
            eval_s = sum(evals) / (len(stamps)) if evals else 0.0
            results[label] = step
            print(f"  {label}: {step * 1e3:6.1f} ms per step ({60 / step:,.0f} rounds per minute) = rollouts "
                  f"{(round_s - check) * 1e3:.1f} ms, checking {check * 1e3:.1f} ms, evaluation (every 10) "
                  f"{eval_s * 1e3:.1f} ms, update and the rest {(step - round_s - eval_s) * 1e3:.1f} ms")
        print(f"  CUDA vs this machine's CPU (1 thread): {results['cpu'] / results['cuda']:.1f}x; vs the reference "
              f"2-core EPYC (~{REFERENCE_CPU_STEP_S * 1e3:.0f} ms): {REFERENCE_CPU_STEP_S / results['cuda']:.1f}x "
              "(goal >= 5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama-110m,gpt2-124m")
    parser.add_argument("--batches", default="1,8,32,128")
    parser.add_argument("--contenders", default="app,app-tok,app-eager,hf,hf-static")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--decode", type=int, default=1, help="1: the decode table; 0: skip it")
    parser.add_argument("--selfplay", type=int, default=0, help="self-play steps per device (0: skip)")
    parser.add_argument("--pretrain", type=int, default=600, help="pretraining steps of the demo base")
    parser.add_argument("--dry-run", action="store_true", help="check the script on the CPU: tiny shapes, no "
                                                                "figures worth reading")
    args = parser.parse_args()
    global DEVICE
    if args.dry_run:
        DEVICE = "cpu"
        SHAPES.update(hidden=64, layers=2, heads=4)
    elif not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU (or --dry-run)")
    if 0 < args.selfplay < 6:
        raise SystemExit("--selfplay needs at least 6 steps: the first 3 (allocation, graph capture) are not timed")
    if args.decode:
        decode_table(args)
    if args.selfplay:
        selfplay_split(args)


if __name__ == "__main__":
    main()
