"""The settings every decode loop shares, as small frozen values instead of long keyword lists.

- `SamplingSettings`: how the next token is drawn (temperature, top-k, top-p, min-p, repetition penalty, the
  tokenizer's size when the model's vocabulary is padded beyond it). The static path keys its graphs by them.
- `DecodeLimits`: when a row ends (its token budget, stop ids, stop strings, a line limit).
- `PromptRows`: the rows of one call: `samples` rows per prompt, prompt-major, left-padded with `pad_id`.
- `BeamSettings`: beam search's own settings (beams, length penalty, stopping rule, returned beams).
- `Vocab`: what the loops need of the tokenizer: ids -> text, the padding id, the tokenizer's size.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import astuple, dataclass, field


@dataclass(frozen=True)
class SamplingSettings:
    """One call's sampling settings (every row of a static call shares them; they key the captured graphs)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    tokens: int = 0  # the tokenizer's size when the model's vocabulary is padded beyond it (0 = every logit)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def key(self) -> tuple:
        return astuple(self)

    def normalized(self, vocab: int) -> SamplingSettings:
        """top_k >= vocab is no filter; greedy ignores the filters (only the penalty applies)."""
        top_k = self.top_k if 0 < self.top_k < vocab else 0
        tokens = self.tokens if 0 < self.tokens < vocab else 0
        if self.temperature <= 0.0:
            return SamplingSettings(0.0, 0, 1.0, 0.0, self.repetition_penalty, tokens)
        return SamplingSettings(float(self.temperature), top_k, float(self.top_p), float(self.min_p),
                                float(self.repetition_penalty), tokens)


def _ids(values: Iterable[int]) -> frozenset[int]:
    return frozenset(int(i) for i in values)


@dataclass(frozen=True)
class DecodeLimits:
    """When a row ends: after `budget` new tokens, at a stop id (kept as its last token), at a stop string (the
    text is cut before it), or at its `max_lines`-th token holding a line break (`newline_ids`; 0 = no limit)."""

    budget: int
    stop_ids: Collection[int] = frozenset()  # kept as a frozenset
    stop: Sequence[str] = ()  # kept as a tuple
    newline_ids: Collection[int] = frozenset()  # kept as a frozenset
    max_lines: int = 0

    def __post_init__(self) -> None:
        # Callers pass sets, lists or tuples: kept as immutable values (a frozen dataclass sets them this way).
        object.__setattr__(self, "stop_ids", _ids(self.stop_ids))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "newline_ids", _ids(self.newline_ids))


@dataclass(frozen=True)
class PromptRows:
    """The rows of one decode call: `samples` rows per prompt, prompt-major (row = prompt index * samples + k),
    left-padded with `pad_id` when prompts differ in length."""

    prompts: Sequence[Sequence[int]]
    samples: int = 1
    pad_id: int = 0

    @property
    def count(self) -> int:
        return len(self.prompts) * self.samples

    @property
    def longest(self) -> int:
        return max(len(p) for p in self.prompts)

    def rows(self) -> list[list[int]]:
        """Every row's prompt ids, prompt-major."""
        return [list(p) for p in self.prompts for _ in range(self.samples)]


@dataclass(frozen=True)
class BeamSettings:
    """Beam search: `num_beams` running beams per prompt, finished ones scored sum / length ** length_penalty,
    `early_stopping` false | true | never (transformers' values), the `num_return` best returned, and a
    repetition penalty on the log-probabilities."""

    num_beams: int
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return: int = 1
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class Vocab:
    """What the decode loops need of the tokenizer: `decode` (ids -> text; None: no text), the padding id (None:
    the loop picks one) and `tokens`, its size when the model's vocabulary is padded beyond it (0 = every id)."""

    decode: Callable[[Sequence[int]], str] | None = field(default=None, compare=False)
    pad: int | None = None
    tokens: int = 0
