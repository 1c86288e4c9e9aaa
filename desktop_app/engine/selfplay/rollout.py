"""Batched rollouts through the app's own decode engine (KV cache, lean runners, seeded sampler; on CUDA the
static path of generate/static_decode.py: a kept static cache, CUDA graphs, sampling on the GPU).

Rollouts never move the training RNG: the sampler draws from its own generator seeded per step, so a
resumed run samples the same completions. The model is put in eval mode (no dropout) for the duration.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from desktop_app.engine.data.batches import BatchSource
from desktop_app.engine.generate.rows import Check, Row
from desktop_app.engine.generate.sampling import row_seeds
from desktop_app.engine.generate.settings import DecodeLimits, PromptRows, SamplingSettings
from desktop_app.engine.generate.static_decode import log_choice, static_completions, use_static_path
from desktop_app.engine.generate.token_loop import LoopOptions, token_steps


@dataclass
class TextCodec:
    """Tokenizer adapter: tokenizers.Tokenizer or a transformers tokenizer behind one interface."""

    tokenizer: Any
    _newlines: set[int] = field(default_factory=set)

    def encode(self, text: str) -> list[int]:
        if hasattr(self.tokenizer, "encode") and not hasattr(self.tokenizer, "apply_chat_template"):
            return list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size()) if hasattr(self.tokenizer, "get_vocab_size") \
            else len(self.tokenizer)

    def newline_ids(self) -> set[int]:
        if not self._newlines:
            self._newlines = {i for i in range(self.vocab_size()) if "\n" in self.decode([i])}
        return self._newlines


@dataclass(frozen=True)
class RolloutOptions:
    """What sample_completions decodes: `samples` completions per prompt of at most `max_new_tokens` (fewer when
    `max_len`, the context, leaves less room after the prompts), drawn at `temperature` / `top_p` from `seed`;
    each cut after its first stop id (kept), its `max_lines`-th token holding a line break (`newline_ids`; 0 = no
    limit), or once `finished(its ids)` says its answer is complete (one check, or one per prompt). `pad_id` pads
    the prompts on the left; `backend`: auto (the static path on CUDA, the lean runners elsewhere), static, lean
    or hf; `tokens`: the tokenizer's size when the model's vocabulary is padded beyond it (those ids are never
    sampled).

    A decode that is one process's share of a larger one (a round split over processes) says so: `keys` are its
    prompts' places in the whole (each row then draws from its own generator, seeded by (seed, key, sample): the
    rows sample what they would in one batch with all the others; any keys turn this on) and `longest` the whole's
    longest prompt (the token budget is the whole's)."""

    samples: int = 1
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: Collection[int] = frozenset()
    pad_id: int = 0
    max_len: int | None = None
    newline_ids: Collection[int] = frozenset()
    max_lines: int = 0
    finished: Check | Sequence[Check | None] | None = None
    backend: str = "auto"
    tokens: int = 0
    keys: Sequence[int] | None = None
    longest: int = 0

    def fit(self, prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], DecodeLimits]:
        """The prompts as the context holds them (an over-long one keeps its end, leaving room to answer) and
        the limits of their completions (the token budget that fits after the longest)."""
        longest = self.longest
        if self.max_len is not None:
            keep = max(1, self.max_len - self.max_new_tokens)
            prompts = [list(p)[-keep:] for p in prompts]
            longest = min(longest, keep)
        longest = max([longest] + [len(p) for p in prompts])
        budget = self.max_new_tokens if self.max_len is None else max(1, min(self.max_new_tokens,
                                                                             self.max_len - longest))
        return [list(p) for p in prompts], DecodeLimits(budget, self.stop_ids, (), self.newline_ids, self.max_lines)

    @property
    def sampling(self) -> SamplingSettings:
        return SamplingSettings(temperature=self.temperature, top_p=self.top_p, tokens=self.tokens)

    def seeds(self, prompts: int) -> int | list[int]:
        """The call's seed, or one per row when `keys` place its prompts in a larger decode."""
        if self.keys is None:
            return self.seed
        if len(self.keys) != prompts:
            raise ValueError(f"{len(self.keys)} keys for {prompts} prompts")
        return row_seeds(self.seed, self.keys, self.samples)


@torch.no_grad()
def sample_completions(model: torch.nn.Module, prompts: Sequence[Sequence[int]], options: RolloutOptions | None = None,
                       **keywords: Any) -> list[list[int]]:
    """`samples` completions per prompt (prompt-major order), as `options` (RolloutOptions) says; `keywords` are
    its fields (`sample_completions(model, prompts, samples=4, temperature=0.8, ...)`), over `options` when both
    are given. A prompt's completion is cut after its first stop id (kept), after its `max_lines`-th token that
    holds a line break, or once `finished(its ids)` says its answer is complete (a chat reply's closing </answer>
    tag or code fence); `finished` may also be one check per prompt (prompts of several task types in one batch).

    Prompts are left-padded into one batch and prefilled once; their cache rows are repeated per sample. A prefix
    that all prompts share (a chat template, a task's instructions) is prefilled once for all of them.
    """
    options = replace(options or RolloutOptions(), **keywords)
    if not prompts:
        return []
    prompts, limits = options.fit(prompts)
    checks = _row_checks(options.finished, len(prompts), options.samples)
    rows = PromptRows(prompts, options.samples, options.pad_id)
    was_training = model.training
    model.eval()
    static, reason = use_static_path(model, options.backend)
    try:
        if static:  # on CUDA: static cache, CUDA graphs, sampling and stop checks on the GPU
            log_choice(model, reason)
            completions = static_completions(model, rows, limits, options.sampling, options.seeds(len(prompts)))
            return [c if check is None else cut_when_finished(c, check) for c, check in zip(completions, checks,
                                                                                           strict=True)]
        with torch.inference_mode():
            return _decode_rows(model, rows, limits, checks, options)
    finally:
        model.train(was_training)


def _decode_rows(model: torch.nn.Module, rows: PromptRows, limits: DecodeLimits, checks: list[Check | None],
                 options: RolloutOptions) -> list[list[int]]:
    """The lean / transformers runners' rollouts: token_loop.py's steps until each row's Row (rows.py) ends it."""
    states = [Row(limits, check=check) for check in checks]
    loop = LoopOptions(options.backend, options.seeds(len(rows.prompts)), share_prefix=True, prune_finished=True)
    for step in token_steps(model, rows, limits.budget, options.sampling, lambda b: states[b].reason is None, loop):
        for b, token in zip(step.rows, step.tokens, strict=True):
            if states[b].reason is None:
                states[b].push(token)
    return [s.ids for s in states]


def _row_checks(finished: Any, prompts: int, samples: int) -> list[Check | None]:
    """The completeness check of every completion (prompt-major): one for all, or one per prompt."""
    if finished is None or callable(finished):
        return [finished] * (prompts * samples)
    per_prompt = list(finished)
    if len(per_prompt) != prompts:
        raise ValueError(f"{len(per_prompt)} completeness checks for {prompts} prompts")
    return [check for check in per_prompt for _ in range(samples)]


def cut_when_finished(ids: list[int], finished: Check) -> list[int]:
    """A completion cut where `finished` first holds (the static path checks stop ids on the device; a check in
    Python on the host runs on its tokens afterwards, with the same result as checking every step)."""
    for end in range(1, len(ids) + 1):
        if finished(ids[:end]):
            return ids[:end]
    return ids


class RoundSource(BatchSource):
    """The batch source of a rollout method: every take plays one round with the current model
    (`play_round(round) -> EpisodeBatch`); its position is the round, so a resumed run plays the same rounds."""

    def __init__(self, play_round: Callable[[int], Any]):
        super().__init__()
        self.play_round = play_round
        self.round = 0

    def take(self, count: int) -> tuple[Any, list[int]]:
        self.round += 1
        return self.play_round(self.round), [self.round]

    def skip(self, position: list[int]) -> None:
        self.round = max(self.round, int(position[0]) if position else self.round)

    def state_dict(self) -> dict[str, Any]:
        return {"round": self.round}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round = int(state.get("round", 0))
