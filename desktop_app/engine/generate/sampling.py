"""Logits processors and the per-token sampler of the decode loop.

Each processor takes logits of shape [batch, vocab] and returns processed logits of the same shape,
following Hugging Face's semantics (so a setting means the same thing here and in `generate()`):
repetition penalty, then temperature, top-k, top-p, min-p. The `Sampler` decides once, up front, which
processors are active, so a disabled setting costs nothing per token (no list of no-op processors
running over the full vocabulary on every step).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

import torch

from desktop_app.engine.generate.settings import SamplingSettings

_NEG_INF = float("-inf")


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Make tokens already in the text (seen[b, v] True) less likely (penalty > 1) or more (< 1).

    HF/CTRL semantics: positive logits are divided by the penalty, negative ones multiplied, so the
    token always moves in the same direction whatever the sign of its logit.
    """
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalized, logits)


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divide by the temperature (> 0): below 1 sharpens the distribution, above 1 flattens it."""
    return logits / temperature


def apply_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k highest logits of each row (ties with the k-th are kept too); 0 disables."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, _NEG_INF)


def apply_top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus sampling: keep the smallest set of most likely tokens whose probability reaches p.

    The most likely token is always kept, so p = 0 degenerates to greedy rather than to nothing.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
    cumulative = sorted_logits.softmax(dim=-1, dtype=torch.float32).cumsum(dim=-1)  # fp32 sums (HF: fp32 logits)
    # Ascending order: drop the low tail whose total mass is at most 1 - p.
    drop_sorted = cumulative <= (1.0 - p)
    drop_sorted[..., -1] = False
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, _NEG_INF)


def apply_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """Drop tokens whose probability is below min_p x the probability of the most likely token."""
    if min_p <= 0.0:
        return logits
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    threshold = probs.amax(dim=-1, keepdim=True) * min_p
    return logits.masked_fill(probs < threshold, _NEG_INF)


def process_logits(logits: torch.Tensor, settings: SamplingSettings, seen: torch.Tensor | None) -> torch.Tensor:
    """Every enabled processor in HF's order: repetition penalty (when `seen` is given), then, unless greedy
    (temperature 0), temperature, top-k, top-p, min-p. Pure tensor ops: no host reads, fixed shapes.
    (`settings.tokens` is the callers' to apply: they mask a padded vocabulary's ids first.)"""
    s = settings
    if seen is not None and s.repetition_penalty != 1.0:
        logits = apply_repetition_penalty(logits, seen, s.repetition_penalty)
    if s.temperature <= 0.0:
        return logits
    if s.temperature != 1.0:
        logits = apply_temperature(logits, s.temperature)
    if s.top_k:
        logits = apply_top_k(logits, s.top_k)
    if s.top_p < 1.0:
        logits = apply_top_p(logits, s.top_p)
    if s.min_p > 0.0:
        logits = apply_min_p(logits, s.min_p)
    return logits


def row_seeds(seed: int, keys: Sequence[int], samples: int) -> list[int]:
    """One seed per row (prompt-major, `samples` rows per prompt) from the call's seed, each prompt's key and the
    sample's number: a row's draws then depend on what it is, never on which other rows share its batch."""
    out = []
    for key in keys:
        for k in range(samples):
            digest = hashlib.blake2b(f"{int(seed)}/{int(key)}/{k}".encode(), digest_size=8).digest()
            out.append(int.from_bytes(digest, "little") >> 1)
    return out


def inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """The token of each row ([batch, vocab] probabilities, [batch] uniforms in [0, 1)) whose cumulative
    probability first exceeds its uniform: a draw from each row's distribution that reads nothing of other rows
    (cumulative sums in fp64; the target stays below the total, so a token without mass is never chosen)."""
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1]
    target = torch.minimum(uniform.double() * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target.unsqueeze(1), right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


class Sampler:
    """Picks the next token of every row from the last position's logits ([batch, vocab] -> [batch]).

    `settings`: the processors (SamplingSettings). Greedy (temperature 0) is a plain argmax. Sampling draws
    from a private `torch.Generator` seeded with `seed`, so the same seed and settings give the same text and
    other torch code is not disturbed. `seed` may also be one seed per row (`row_seeds`): each row then draws one
    uniform per token from its own generator (inverse_cdf), so its tokens do not depend on the other rows of the
    batch (a round of episodes split over processes samples what one process samples).
    Repetition penalty needs to know which tokens are in each row's text: call `observe(ids)` with every
    token appended (the prompt via `observe_prompt`).
    """

    def __init__(self, settings: SamplingSettings = SamplingSettings(), *, seed: int | Sequence[int] = 0,
                 batch: int = 1, vocab_size: int = 0, device: torch.device | str = "cpu"):
        self.greedy = settings.temperature <= 0.0
        # tokens: the tokenizer's size when the model's vocabulary is padded beyond it; the ids above are never
        # chosen (0 = every logit)
        tokens, top_k = settings.tokens, settings.top_k
        self.tokens = int(tokens) if tokens and (not vocab_size or tokens < vocab_size) else 0
        self.settings = SamplingSettings(
            temperature=float(settings.temperature),
            top_k=int(top_k) if top_k and (not vocab_size or top_k < vocab_size) else 0,
            top_p=float(settings.top_p), min_p=float(settings.min_p),
            repetition_penalty=float(settings.repetition_penalty), tokens=self.tokens)
        self.use_penalty = self.settings.repetition_penalty != 1.0
        self.seen: torch.Tensor | None = None
        if self.use_penalty:
            if vocab_size <= 0:
                raise ValueError("repetition penalty needs the vocabulary size")
            self.seen = torch.zeros(batch, vocab_size, dtype=torch.bool, device=device)
        self.generator: torch.Generator | None = None
        self.rows: list[random.Random] | None = None  # one generator per row (seeded per row)
        if not self.greedy and isinstance(seed, Sequence):
            self.rows = [random.Random(s) for s in seed]
        elif not self.greedy:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(int(seed))

    def observe_prompt(self, rows: list[list[int]]) -> None:
        """Mark each row's prompt tokens as seen (repetition penalty covers the prompt, like HF)."""
        if self.seen is None:
            return
        for b, ids in enumerate(rows):
            if ids:
                self.seen[b, torch.tensor(ids, dtype=torch.long, device=self.seen.device)] = True

    def observe(self, next_ids: torch.Tensor) -> None:
        """Mark the tokens just chosen ([batch] long tensor) as seen."""
        if self.seen is not None:
            self.seen.scatter_(1, next_ids.view(-1, 1), True)

    def process(self, logits: torch.Tensor) -> torch.Tensor:
        """The processed logits (what the next token is drawn from); -inf marks removed tokens."""
        if self.tokens and logits.shape[-1] > self.tokens:
            logits = logits.clone()
            logits[..., self.tokens:] = float("-inf")
        return process_logits(logits, self.settings,
                              self.seen[: logits.shape[0]] if self.use_penalty else None)  # type: ignore[index]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """Next token id per row ([batch] long tensor)."""
        logits = self.process(logits.float())
        if self.greedy:
            next_ids = logits.argmax(dim=-1)
        else:
            probs = logits.softmax(dim=-1, dtype=torch.float32)
            if self.rows is not None:
                uniform = torch.tensor([row.random() for row in self.rows[: probs.shape[0]]], dtype=torch.float64)
                next_ids = inverse_cdf(probs, uniform.to(probs.device))
            else:
                next_ids = torch.multinomial(probs, 1, generator=self.generator).view(-1)
        self.observe(next_ids)
        return next_ids
