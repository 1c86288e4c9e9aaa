"""The token loop of the lean and transformers runners, one for every caller: the streaming decoder (decode.py)
and the RL methods' rollouts (selfplay/rollout.py). Prefill, then per step: sample every row's next token, hand
the tokens to the caller, stop once the caller says every row has ended, else run the model one step.

The caller keeps each row's bookkeeping (stop ids, stop strings, a finished answer) and tells the loop which rows
are still going through `going(row)`. Rollouts also let rows that have ended leave the batch once half of them have
(`prune_finished`: a chat model's long replies otherwise keep a batch of short ones running); only with greedy
sampling and no per-row sampler state, where it cannot change a row's draws.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from desktop_app.engine.generate.prefill import prefill_rows
from desktop_app.engine.generate.runners import Runner
from desktop_app.engine.generate.sampling import Sampler
from desktop_app.engine.generate.settings import PromptRows, SamplingSettings
from desktop_app.engine.generate.thread_tuner import ThreadTuner


@dataclass
class LoopOptions:
    """How one loop runs: the runner ("auto", "lean", "hf"), the sampling seed, whether a prefix that every prompt
    shares is prefilled once and finished rows leave the batch (rollouts: many prompts behind one instruction,
    replies of very different lengths), and the thread tuner that times each step (the streaming decoder's)."""

    backend: str = "auto"
    seed: int | Sequence[int] | None = None  # one for the call, or one per row (sampling.row_seeds)
    share_prefix: bool = False
    prune_finished: bool = False
    tuner: ThreadTuner | None = None


@dataclass
class Step:
    """One step's tokens: `tokens[i]` is the next token of row `rows[i]` (rows numbered prompt-major)."""

    rows: list[int]
    tokens: list[int]


def token_steps(model: torch.nn.Module, batch: PromptRows, budget: int, sampling: SamplingSettings,
                going: Callable[[int], bool], options: LoopOptions | None = None) -> Iterator[Step]:
    """Up to `budget` steps of every row still `going`. Closing the iterator (a cancelled stream) frees the KV
    cache at once."""
    options = options or LoopOptions()
    device = next(model.parameters()).device
    sampler = Sampler(sampling, seed=options.seed, batch=batch.count,
                      vocab_size=int(getattr(model.config, "vocab_size", 0) or 0), device=device)
    sampler.observe_prompt(batch.rows())
    with torch.inference_mode():
        runner, logits = prefill_rows(model, batch, budget, options.backend, share_prefix=options.share_prefix)
    order = list(range(batch.count))  # the row each of the runner's rows decodes
    try:
        for step in range(budget):
            with torch.inference_mode():
                next_ids = sampler(logits)
            yield Step(order, next_ids.tolist())
            live = [i for i, row in enumerate(order) if going(row)]
            if not live or step == budget - 1:
                return
            if options.prune_finished and sampler.greedy and sampler.seen is None and len(live) <= len(order) // 2:
                keep = torch.tensor(live, dtype=torch.long, device=device)
                runner.reorder(keep)
                next_ids, order = next_ids.index_select(0, keep), [order[i] for i in live]
            with torch.inference_mode():
                logits = timed_step(runner, next_ids, options.tuner)
    finally:
        del runner


def timed_step(runner: Runner, next_ids: torch.Tensor, tuner: ThreadTuner | None) -> torch.Tensor:
    if tuner is None:
        return runner.step(next_ids)
    tuner.apply()
    started = time.perf_counter()
    logits = runner.step(next_ids)
    tuner.record(time.perf_counter() - started)
    return logits
