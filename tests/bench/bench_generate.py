"""Benchmark: our decode loop (stream_text) vs transformers `generate()` on the same model, same run.

Run by hand:  .venv/bin/python tests/bench/bench_generate.py [--models tiny,mini,small] [--tokens 64]

For each model (~1M `tiny`, ~12M `mini`, ~28M `small` llama presets, randomly initialised) and batch
size (1, 8) it prints decode tokens/s (all rows' new tokens / wall time of the whole call, prompt
included) and time to first token (TTFT: wall time of a 1-token call), greedy, for:
  ours     stream_text with threads="auto" (what the app and the CLI use: a ThreadTuner picks 1 thread
           or all cores by timing, see desktop_app/engine/generate/thread_tuner.py)
  ours@1   stream_text pinned to 1 thread
  gen@1    transformers generate() with 1 torch thread (the reference the goal was stated against)
  gen@N    generate() with all cores (torch's default)
under three conditions:
  idle         nothing else running in this process
  busy-python  another Python thread spinning (holds the GIL between switches: a busy GUI thread)
  busy-native  another thread running torch matmuls (holds a core, not the GIL: e.g. training)
Runs are interleaved (ours, ours@1, gen@1, gen@N, repeat) so load changes hit all alike; medians of
--repeats. The tuner's state carries over between calls on the same model (as in the app), so each
row also shows how it copes with the condition changing under it. Figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.devices import cpu_cores
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.threads import torch_threads
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.presets import preset
from desktop_app.engine.specs import GenerateSpec

PROMPT = ("The quick brown fox jumps over the lazy dog while the cat sat on the mat and watched "
          "the birds fly over the river towards the old mill at the end of the valley")


class Busy:
    """A background thread that keeps one core busy, the Python way or the native way."""

    def __init__(self, kind: str):
        self.kind, self.stop = kind, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.kind == "busy-python":
            x = 0
            while not self.stop.is_set():
                for i in range(1000):
                    x += i * i
        else:
            torch.set_num_threads(1)
            a = torch.randn(256, 256)
            while not self.stop.is_set():
                a = (a @ a).clamp_(-1, 1)

    def __enter__(self) -> Busy:
        if self.kind != "idle":
            self.thread.start()
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()


def ours(loaded: LoadedModel, batch: int, tokens: int, threads: int | str | None) -> tuple[float, float, int]:
    spec = GenerateSpec(max_new_tokens=tokens, temperature=0.0, samples=batch)
    t0 = time.perf_counter()
    stats = [e for e in stream_text(loaded, PROMPT, spec, threads=threads) if e.type == "generation"]
    wall = time.perf_counter() - t0
    produced = sum(len(s.token_ids) for s in stats)
    return produced / wall, min(s.ttft_ms for s in stats), produced


def hf(loaded: LoadedModel, batch: int, tokens: int, threads: int | None) -> tuple[float, float, int]:
    enc = loaded.tokenizer([PROMPT] * batch, return_tensors="pt")
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch_threads(threads), torch.inference_mode():
        t0 = time.perf_counter()
        loaded.model.generate(**enc, max_new_tokens=1, min_new_tokens=1, **kw)
        ttft = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        # max_time: with 2 threads beside a busy thread generate() can crawl at ~1 token/s; the rate is
        # measured on what it produced in 30 s.
        out = loaded.model.generate(**enc, max_new_tokens=tokens, min_new_tokens=tokens, max_time=30.0, **kw)
        wall = time.perf_counter() - t0
    produced = (out.shape[1] - enc["input_ids"].shape[1]) * batch
    return produced / wall, ttft, produced


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,mini,small")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--conditions", default="idle,busy-python,busy-native")
    args = parser.parse_args()

    corpus = [f"{PROMPT} {i} " * 3 for i in range(400)]
    tok = hf_tokenizer(train_tokenizer(corpus, "byte-bpe", 4096, min_frequency=1))
    cores = cpu_cores()
    print(f"torch {torch.__version__}, {cores} cores; prompt {len(tok(PROMPT)['input_ids'])} tokens, "
          f"{args.tokens} new tokens, greedy, medians of {args.repeats}")
    print(f"ours: threads='auto' (ThreadTuner: 1 vs {cores}); generate(): 1 thread and {cores} threads")
    header = (f"{'model':>6} {'params':>6} {'cond':>11} {'batch':>5} | {'ours':>6} {'ours@1':>6} {'gen@1':>6} "
              f"{'gen@' + str(cores):>6} {'vs@1':>5} {'vs@' + str(cores):>5} | {'ours TTFT':>9} {'gen@1 TTFT':>10}")
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        spec = preset(name)
        model = build_model(spec, seed=0)
        params = sum(p.numel() for p in model.parameters())
        loaded = LoadedModel(model=model, tokenizer=tok, spec=spec, kind="hf", path=Path("."), name=name)
        for batch in (int(b) for b in args.batches.split(",")):
            for condition in args.conditions.split(","):
                with Busy(condition):
                    ours(loaded, batch, 4, "auto")  # warm-up every path
                    hf(loaded, batch, 4, 1)
                    hf(loaded, batch, 4, cores)
                    runs: dict[str, list[tuple[float, float, int]]] = {"ours": [], "ours1": [], "gen1": [], "genN": []}
                    for _ in range(args.repeats):  # interleaved, so load changes hit all alike
                        runs["ours"].append(ours(loaded, batch, args.tokens, "auto"))
                        runs["ours1"].append(ours(loaded, batch, args.tokens, 1))
                        runs["gen1"].append(hf(loaded, batch, args.tokens, 1))
                        runs["genN"].append(hf(loaded, batch, args.tokens, cores))
                rate = {k: statistics.median(x[0] for x in v) for k, v in runs.items()}
                ttft = {k: statistics.median(x[1] for x in v) for k, v in runs.items()}
                assert all(x[2] == batch * args.tokens for x in runs["ours"]), "a run stopped early"
                print(f"{name:>6} {params / 1e6:5.1f}M {condition:>11} {batch:>5} | {rate['ours']:6.0f} "
                      f"{rate['ours1']:6.0f} {rate['gen1']:6.0f} {rate['genN']:6.0f} "
                      f"{rate['ours'] / rate['gen1']:5.2f} {rate['ours'] / rate['genN']:5.2f} | "
                      f"{ttft['ours']:7.1f}ms {ttft['gen1']:8.1f}ms", flush=True)


if __name__ == "__main__":
    main()
