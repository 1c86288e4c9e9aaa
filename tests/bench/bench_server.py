"""Benchmark: the local API server under concurrent streaming clients, and its overhead over the engine.

Run by hand:  .venv/bin/python tests/bench/bench_server.py [--preset mini] [--clients 1,4,16] [--tokens 64]

Builds a randomly initialised model of the preset (~12M `mini` by default) with a small trained
tokenizer, starts `python -m desktop_app serve` on it in a subprocess (127.0.0.1, a free port), and
drives it from this process with asyncio + httpx (raw server-sent events, so the client costs little):
  - for each client count C: C clients each send --requests streaming /v1/completions requests one
    after the other (greedy, --tokens new tokens, a different prompt per request). Aggregate tokens/s =
    all completion tokens (from the usage chunk) / wall time of the whole load; TTFT = time from sending a
    request to its first text chunk, p50 and p99 over all requests of that load.
  - HTTP overhead for one client: the same requests sequentially through (a) the engine's stream_text in
    this process (threads="auto", what `generate` does), (b) the server's batcher in this process without
    HTTP, (c) the server over HTTP (the C=1 load). Overhead = 1 - (c) / (a).
Goals (issue 14): 16 clients >= 3x one client's aggregate tokens/s; HTTP overhead <= 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "while", "cat", "sat", "on", "mat", "and",
         "watched", "birds", "fly", "river", "towards", "old", "mill", "valley"]


def prompt(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(24 + i % 9))


def build_model(folder: Path, preset_name: str) -> None:
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
    from desktop_app.engine.model.architecture import build_model as build
    from desktop_app.engine.presets import preset

    spec = preset(preset_name)
    build(spec, seed=0).save_pretrained(folder)
    # A tokenizer with exactly the model's vocabulary: with fewer tokens, the ids it lacks decode to nothing
    # and a random model's text would stay empty for many steps (no first chunk to time). Random letter
    # words give BPE enough distinct pairs to learn that many tokens.
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(60_000)]
    corpus = [prompt(i) for i in range(400)] + [" ".join(words[i:i + 50]) for i in range(0, len(words), 50)]
    tokenizer = train_tokenizer(corpus, "byte-bpe", spec.vocab_size, min_frequency=1)
    assert tokenizer.get_vocab_size() == spec.vocab_size, tokenizer.get_vocab_size()
    hf_tokenizer(tokenizer).save_pretrained(folder)


def start_server(model: Path, workspace: Path, threads: int) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "desktop_app", "serve", str(model), "--port", "0", "--workspace", str(workspace),
               "--threads", str(threads)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    line = lines.get(timeout=300)
    assert line.startswith("serving on "), line
    return proc, line.split()[-1]


async def one_request(client, url: str, model: str, text: str, tokens: int) -> tuple[float, int]:
    """(TTFT seconds, completion tokens) of one streaming completion."""
    body = {"model": model, "prompt": text, "max_tokens": tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, used = None, 0
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                used = chunk["usage"]["completion_tokens"]
            elif ttft is None and chunk["choices"] and chunk["choices"][0]["text"]:
                ttft = time.perf_counter() - t0
    return (ttft if ttft is not None else time.perf_counter() - t0), used


async def load(url: str, model: str, clients: int, requests: int, tokens: int) -> dict[str, float]:
    import httpx

    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        async def session(k: int) -> list[tuple[float, int]]:
            return [await one_request(client, url, model, prompt(k * requests + i), tokens) for i in range(requests)]

        t0 = time.perf_counter()
        results = await asyncio.gather(*(session(k) for k in range(clients)))
        wall = time.perf_counter() - t0
    flat = sorted(r for rs in results for r in rs)
    ttfts = sorted(t for t, _ in flat)
    produced = sum(n for _, n in flat)
    return {"clients": clients, "requests": len(flat), "tokens": produced, "wall": wall, "rate": produced / wall,
            "p50": statistics.median(ttfts) * 1e3, "p99": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))] * 1e3}


def direct_engine(loaded, requests: int, tokens: int, threads: int) -> float:
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.specs import GenerateSpec

    produced, t0 = 0, time.perf_counter()
    for i in range(requests):
        spec = GenerateSpec(max_new_tokens=tokens, temperature=0.0, top_k=0)
        events = stream_text(loaded, prompt(i), spec, threads=threads or "auto")
        produced += sum(len(e.token_ids) for e in events if e.type == "generation")
    return produced / (time.perf_counter() - t0)


def _cpu(process) -> float:
    t = process.cpu_times()
    return t.user + t.system


def direct_batcher(batcher, loaded, requests: int, tokens: int) -> float:
    from desktop_app.engine.generate.prompts import encode_prompt
    from desktop_app.engine.generate.row_sampler import SamplingParams
    from desktop_app.server.batcher import Done, GenerationRequest

    produced, t0 = 0, time.perf_counter()
    for i in range(requests):
        done: queue.Queue = queue.Queue()
        ids = encode_prompt(loaded.tokenizer, prompt(i))
        batcher.submit(GenerationRequest([ids], SamplingParams(max_tokens=tokens, temperature=0), chat=False,
                                         sink=lambda ev, q=done: [q.put(e) for e in ev if isinstance(e, Done)]))
        produced += done.get(timeout=600).completion_tokens
    return produced / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--requests", type=int, default=4, help="requests per client, one after the other")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="decode threads everywhere (0 = automatic)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats of the one-client comparison")
    args = parser.parse_args()

    import psutil
    import torch

    from desktop_app.engine.devices import cpu_cores
    from desktop_app.engine.model.loading import load_model

    with tempfile.TemporaryDirectory(prefix="azr-bench-server-") as tmp:
        folder = Path(tmp) / f"{args.preset}-model"
        build_model(folder, args.preset)
        loaded = load_model(folder)
        params = sum(p.numel() for p in loaded.model.parameters())
        print(f"torch {torch.__version__}, {cpu_cores()} cores; preset {args.preset} ({params / 1e6:.1f}M parameters), "
              f"{args.tokens} new tokens per request, greedy, {args.requests} requests per client")
        proc, url = start_server(folder, Path(tmp) / "ws", args.threads)
        try:
            asyncio.run(load(url, folder.name, 2, 1, 8))  # warm-up (first allocations, thread tuning)
            rows = [asyncio.run(load(url, folder.name, int(c), args.requests, args.tokens))
                    for c in args.clients.split(",")]
            base = rows[0]["rate"]
            print(f"\n{'clients':>7} {'requests':>8} {'tokens':>7} {'wall s':>7} {'tok/s':>7} {'vs 1':>5} "
                  f"{'TTFT p50 ms':>11} {'TTFT p99 ms':>11}")
            for r in rows:
                print(f"{r['clients']:>7} {r['requests']:>8} {r['tokens']:>7} {r['wall']:>7.2f} {r['rate']:>7.1f} "
                      f"{r['rate'] / base:>4.2f}x {r['p50']:>11.0f} {r['p99']:>11.0f}")
            # One client: engine, batcher without HTTP, HTTP; interleaved so load changes hit all alike.
            from desktop_app.server.batcher import Batcher

            batcher = Batcher(loaded, threads=args.threads or None)
            batcher.start()
            direct_engine(loaded, 1, 8, args.threads)
            direct_batcher(batcher, loaded, 1, 8)
            runs: dict[str, list[float]] = {"engine": [], "batcher": [], "http": []}
            # CPU seconds per token (less sensitive than wall time to other programs on a shared machine):
            # this process for the engine; the server process (and this client) for HTTP.
            me, server = psutil.Process(), psutil.Process(proc.pid)
            cpu = {"engine": 0.0, "server": 0.0, "client": 0.0}
            produced = args.repeats * args.requests * args.tokens
            for _ in range(args.repeats):
                c0 = _cpu(me)
                runs["engine"].append(direct_engine(loaded, args.requests, args.tokens, args.threads))
                cpu["engine"] += _cpu(me) - c0
                runs["batcher"].append(direct_batcher(batcher, loaded, args.requests, args.tokens))
                c0, s0 = _cpu(me), _cpu(server)
                runs["http"].append(asyncio.run(load(url, folder.name, 1, args.requests, args.tokens))["rate"])
                cpu["client"] += _cpu(me) - c0
                cpu["server"] += _cpu(server) - s0
            batcher.close()
        finally:
            proc.terminate()
            code = proc.wait(60)
        print(f"server exited with status {code} on SIGTERM")
        rate = {k: statistics.median(v) for k, v in runs.items()}
        print(f"\none client, {args.requests} requests x {args.tokens} tokens, medians of {args.repeats}: engine "
              f"stream_text {rate['engine']:.1f} tok/s; server batcher without HTTP {rate['batcher']:.1f} tok/s "
              f"({1 - rate['batcher'] / rate['engine']:+.1%} overhead); over HTTP {rate['http']:.1f} tok/s "
              f"({1 - rate['http'] / rate['engine']:+.1%} overhead)")
        print(f"CPU per token (max {args.tokens} tokens/request, EOS may end some earlier): engine "
              f"{cpu['engine'] / produced * 1e3:.2f} ms; server over HTTP {cpu['server'] / produced * 1e3:.2f} ms "
              f"(+{cpu['server'] / cpu['engine'] - 1:.1%}), plus the client {cpu['client'] / produced * 1e3:.2f} ms")

if __name__ == "__main__":
    main()
