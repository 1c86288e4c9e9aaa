"""Sampling for one row of the shared decode batch: its own settings, its own random stream.

Rows of different requests decode together but must not share randomness (a request with a seed must
give the same text whoever else is being served), so each sampled row owns an engine `Sampler` of batch
1 with a private generator. Greedy rows without penalties need no state at all: the batcher takes one
argmax over all of them at once (`plain_greedy`).

OpenAI's presence and frequency penalties have no engine counterpart, so they are applied here, with
OpenAI's definition: logit -= frequency_penalty * count + presence_penalty * (count > 0), where count is
how often the token appears in this row's generated text so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from desktop_app.engine.generate.sampling import Sampler
from desktop_app.engine.generate.settings import SamplingSettings


@dataclass
class SamplingParams:
    """What one request asks for (already validated by the route)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    n: int = 1
    # Beam search (an extension; num_beams > 1 decodes on the batcher's beam path, see batcher.py).
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False

    def sampling(self, tokens: int = 0) -> SamplingSettings:
        """The engine's sampling settings of this request (`tokens`: the tokenizer's size, see SamplingSettings)."""
        return SamplingSettings(self.temperature, self.top_k, self.top_p, self.min_p, self.repetition_penalty, tokens)

    @property
    def plain_greedy(self) -> bool:
        return (self.temperature <= 0.0 and self.repetition_penalty == 1.0 and self.presence_penalty == 0.0
                and self.frequency_penalty == 0.0)


class RowSampler:
    """Picks the next token of one row from its logits [1, vocab]."""

    def __init__(self, params: SamplingParams, seed: int, vocab_size: int, device: torch.device,
                 prompt_ids: list[int], tokens: int = 0):
        self.plain_greedy = params.plain_greedy
        self.presence, self.frequency = float(params.presence_penalty), float(params.frequency_penalty)
        self.sampler = Sampler(params.sampling(tokens), seed=seed, batch=1, vocab_size=vocab_size, device=device)
        self.sampler.observe_prompt([prompt_ids])
        self.counts = (torch.zeros(1, vocab_size, device=device)
                       if (self.presence or self.frequency) and vocab_size > 0 else None)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """Next token id as a [1] long tensor."""
        if self.counts is not None:
            logits = logits.float() - self.frequency * self.counts - self.presence * (self.counts > 0).float()
        next_id = self.sampler(logits)
        if self.counts is not None:
            self.counts[0, next_id] += 1.0
        return next_id


def sample_rows(logits: torch.Tensor, samplers: list[RowSampler]) -> list[int]:
    """Next token of every row ([n, vocab] logits, one sampler per row), moved to Python in one go."""
    tokens = samplers[0].sampler.tokens if samplers else 0  # one model: one tokenizer size for every row
    # a padded vocabulary's extra ids are never chosen (the samplers mask them themselves)
    greedy_logits = logits[..., :tokens] if tokens and logits.shape[-1] > tokens else logits
    if all(s.plain_greedy for s in samplers):
        return greedy_logits.argmax(dim=-1).tolist()
    out = torch.empty(len(samplers), dtype=torch.long, device=logits.device)
    greedy = [i for i, s in enumerate(samplers) if s.plain_greedy]
    if greedy:
        index = torch.tensor(greedy, device=logits.device)
        out[index] = greedy_logits[index].argmax(dim=-1)
    for i, s in enumerate(samplers):
        if not s.plain_greedy:
            out[i : i + 1] = s(logits[i : i + 1])
    return out.tolist()
