"""The prefill every decode loop starts with: prompts left-padded into one batch, prefilled into a lean (or
transformers) runner, and each prompt's cache rows repeated for its samples. It starts token_loop.py's
loop, which the streaming decoder (decode.py) and the RL methods' rollouts (selfplay/rollout.py) both run.

A prefix that every prompt shares (a chat template, a task's instructions) can be prefilled once for all of them
(`share_prefix`): the rollouts' batches are many prompts behind one long instruction.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from desktop_app.engine.generate.runners import Runner, left_padded, make_runner
from desktop_app.engine.generate.settings import PromptRows

MIN_SHARED_PREFIX = 8  # tokens: below this a separate prefill of the prefix saves less than it costs


def prefill_rows(model: torch.nn.Module, rows: PromptRows, budget: int, backend: str, *,
                 share_prefix: bool = False) -> tuple[Runner, torch.Tensor]:
    """A runner holding every row's prompt with room for `budget` new tokens, and the rows' first logits (rows
    prompt-major: each prompt's samples follow it)."""
    prompts, device = rows.prompts, next(model.parameters()).device
    shared = shared_prefix(prompts) if share_prefix else 0
    if shared:
        runner = make_runner(model, 1, rows.longest + budget, backend)
        runner.prefill(torch.tensor([list(prompts[0][:shared])], dtype=torch.long, device=device), None)
        runner.expand(len(prompts))
        ids, mask = left_padded([p[shared:] for p in prompts], rows.pad_id, device)
        logits = runner.extend(ids, mask)
    else:
        runner = make_runner(model, len(prompts), rows.longest + budget, backend)
        ids, mask = left_padded(prompts, rows.pad_id, device)
        logits = runner.prefill(ids, mask)
    if rows.samples > 1:
        runner.expand(rows.samples)
        logits = logits.repeat_interleave(rows.samples, dim=0)
    return runner, logits


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens at the start of every prompt (each keeping at least one of its own); 0 for one prompt or fewer than
    MIN_SHARED_PREFIX."""
    if len(prompts) < 2:
        return 0
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    length = 0
    while length < limit and all(p[length] == first[length] for p in prompts):
        length += 1
    return length if length >= MIN_SHARED_PREFIX else 0
