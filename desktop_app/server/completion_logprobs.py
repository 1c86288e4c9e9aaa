"""Log-probabilities for /v1/completions: `echo` and `logprobs`, in OpenAI's legacy `logprobs` object.

This is what evaluation harnesses read (lm-evaluation-harness's `local-completions` sends token-id prompts with
`echo: true, logprobs: 1, max_tokens: 1` and sums the log-probabilities of the continuation's tokens), so the
numbers are computed as its own HF backend computes them: one forward over the whole sequence, right-padded
rows in a batch without an attention mask (causal attention never looks right, so padding changes nothing for
the real tokens), float32 log-softmax of the raw logits (no temperature, no penalties).

The object, per choice: `tokens` (each token's own decoded text), `token_logprobs` (None for the first token of
an echoed prompt: nothing precedes it), `top_logprobs` (per position the `logprobs` most likely tokens, plus the
token that is there, as OpenAI always includes it; None where token_logprobs is None) and `text_offset` (where
each token's text starts: counted from the start of the prompt, also when the prompt is not echoed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

MAX_LOGPROBS = 20  # most alternatives per position (OpenAI allows 5, vLLM 20)
TOKEN_BUDGET = 4096  # tokens per scoring forward: bounds the float32 logits held at once (tokens x vocabulary)


@dataclass
class Scored:
    """One sequence: each token's log-probability given the ones before (None for the first) and the
    alternatives at each position (token id -> log-probability; None for the first)."""

    ids: list[int]
    logprobs: list[float | None]
    top: list[dict[int, float] | None]


def _chunks(order: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Rows (longest first) grouped so rows x longest stays within `budget` tokens (at least one row each)."""
    out: list[list[int]] = []
    for i in order:
        if out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _score_row(logits: torch.Tensor, ids: list[int], top_k: int, extend: bool) -> Scored:
    """logits [len(ids), vocab] of one row -> its Scored; `extend`: with the most likely next token appended."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    if extend:
        ids = [*ids, int(lp[-1].argmax())]
    else:
        lp = lp[:-1]
    target = torch.tensor(ids[1:], dtype=torch.long, device=lp.device)
    picked = lp.gather(1, target[:, None])[:, 0].tolist()
    top: list[dict[int, float] | None] = [None]
    if top_k > 0 and len(ids) > 1:
        values, indices = torch.topk(lp, min(top_k, lp.shape[-1]), dim=-1)
        top += [dict(zip(i, v, strict=True)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)]
    else:
        top += [{} for _ in ids[1:]]
    for position, (token, value) in enumerate(zip(ids[1:], picked, strict=True), start=1):
        top[position][token] = value  # type: ignore[index]  # OpenAI lists the token that is there too
    return Scored(list(ids), [None, *picked], top)


@torch.inference_mode()
def score_sequences(model: Any, rows: list[list[int]], top_k: int, pad_id: int, *, extend: bool = False,
                    budget: int = TOKEN_BUDGET) -> list[Scored]:
    """Every token's log-probability (and the `top_k` alternatives) of each row of token ids, in order;
    `extend`: each row with its most likely next token appended (and scored)."""
    device = next(model.parameters()).device
    lengths = [len(r) for r in rows]
    order = sorted(range(len(rows)), key=lambda i: -lengths[i])
    out: list[Scored | None] = [None] * len(rows)
    for chunk in _chunks(order, lengths, budget):
        batch = torch.full((len(chunk), lengths[chunk[0]]), pad_id, dtype=torch.long)
        for j, i in enumerate(chunk):
            batch[j, : lengths[i]] = torch.tensor(rows[i], dtype=torch.long)
        logits = model(batch.to(device)).logits
        for j, i in enumerate(chunk):
            out[i] = _score_row(logits[j, : lengths[i]], rows[i], top_k, extend)
    return [s for s in out if s is not None]


def token_texts(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's own text (a token holding part of a character decodes to the replacement character)."""
    return tokenizer.batch_decode([[i] for i in ids]) if ids else []


def _top_texts(tokenizer: Any, top: dict[int, float] | None) -> dict[str, float] | None:
    if top is None:
        return None
    keys = list(top)
    # Two ids may decode to the same text: the likelier one is kept, as a JSON object cannot hold both.
    out: dict[str, float] = {}
    for text, value in zip(token_texts(tokenizer, keys), top.values(), strict=True):
        if text not in out or value > out[text]:
            out[text] = value
    return out


def logprobs_object(tokenizer: Any, scored: Scored, start: int, offset: int) -> dict[str, Any]:
    """OpenAI's `logprobs` for the tokens of `scored` from position `start` on; the first one's text begins
    at character `offset`."""
    texts = token_texts(tokenizer, scored.ids[start:])
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    return {"tokens": texts, "token_logprobs": scored.logprobs[start:],
            "top_logprobs": [_top_texts(tokenizer, t) for t in scored.top[start:]], "text_offset": offsets}


def prompt_texts(tokenizer: Any, prompt: Any, ids: list[list[int]]) -> list[str]:
    """The text each prompt echoes: a string prompt as it was sent, token ids decoded."""
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return list(prompt)
    return [tokenizer.decode(p) for p in ids]


def one_token(tokenizer: Any, token: int, end_ids: set[int], stop: list[str]) -> tuple[str, str]:
    """(text, finish_reason) of a one-token completion: an end token or a stop string is "stop"."""
    if token in end_ids:
        return "", "stop"
    text = tokenizer.decode([token], skip_special_tokens=True)
    cuts = [text.find(s) for s in stop if s in text]
    return (text[: min(cuts)], "stop") if cuts else (text, "length")


def scoring_needs_no_decoding(params: Any) -> bool:
    """True when the completion is at most one greedy token: the scoring forward's own prediction gives it,
    so no decode step is needed (lm-evaluation-harness's log-likelihood requests)."""
    if params.max_tokens == 0:
        return True
    return (params.max_tokens == 1 and params.temperature == 0 and params.num_beams == 1
            and params.repetition_penalty == 1.0 and params.presence_penalty == 0 and params.frequency_penalty == 0)
