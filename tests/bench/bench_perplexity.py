"""Bits per byte and perplexity of a real model: `eval --text`'s figures against a direct computation from the same
model's logits on the same text (run by hand; the issue's check with SmolLM2-135M-Instruct).

    .venv/bin/python tests/bench/bench_perplexity.py MODEL TEXT_FILE [--max-bytes N] [--json OUT]

MODEL: anything the app opens (a .gguf file, a Hugging Face folder, a run). The direct computation is written out
here, independently of evaluate/perplexity.py: the file's text (cut to --max-bytes on a character boundary),
tokenized without special tokens, prefixed by BOS (else EOS), cut into lm-evaluation-harness's rolling windows of the
model's context, every token's -log p summed; bits per byte = that / ln 2 / the text's UTF-8 bytes. The two should
agree within 0.5% (the goal); they differ by rounding only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def direct(model, tokenizer, text: str, context: int) -> dict[str, float]:
    import torch

    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    tokens = [prefix, *ids]
    nats, start = 0.0, 0  # window k predicts ids[start:end] from the `context` tokens before each
    with torch.no_grad():
        while start < len(ids):
            end = min(len(ids), start + context)
            window = tokens[max(0, end - context): end]  # tokens[i] predicts ids[i]
            logits = model(input_ids=torch.tensor([window])).logits[0].float()
            first = start - max(0, end - context)  # positions of the window that predict ids[start:end]
            logps = torch.log_softmax(logits[first:], dim=-1)
            nats -= float(logps.gather(1, torch.tensor(ids[start:end]).view(-1, 1)).sum())
            start = end
    size = len(text.encode("utf-8"))
    return {"bits_per_byte": nats / math.log(2) / size, "perplexity": math.exp(nats / len(ids)),
            "text_tokens": len(ids), "text_bytes": size}


def main() -> None:
    from desktop_app.engine.evaluate.heldout import drain
    from desktop_app.engine.evaluate.perplexity import MAX_BYTES, cut_utf8, score_text
    from desktop_app.engine.generate.prompts import context_length
    from desktop_app.engine.model.loading import load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("text")
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    loaded = load_model(args.model, device="cpu")
    model, tokenizer = loaded.model, loaded.tokenizer
    model.eval()
    context = context_length(model) or 2048
    start = time.perf_counter()
    ours = drain(score_text(model, tokenizer, [args.text], max_bytes=args.max_bytes, context=context))
    seconds = time.perf_counter() - start
    text = cut_utf8(Path(args.text).read_text(encoding="utf-8"), args.max_bytes)
    reference = direct(model, tokenizer, text, min(context, 8192))
    gap = abs(ours["bits_per_byte"] - reference["bits_per_byte"]) / reference["bits_per_byte"]
    for name, figures in (("eval --text", ours), ("direct", reference)):
        print(f"{name:12s} bits/byte {figures['bits_per_byte']:.4f}  perplexity {figures['perplexity']:.2f}  "
              f"tokens {figures['text_tokens']}  bytes {figures['text_bytes']}")
    print(f"relative difference in bits per byte: {gap:.2e} (goal < 5e-3); eval took {seconds:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "model": args.model,
                                               "text": args.text, "eval": ours, "direct": reference,
                                               "relative_difference": gap}, indent=1))


if __name__ == "__main__":
    main()
