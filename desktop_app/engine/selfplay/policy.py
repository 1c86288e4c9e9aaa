"""The policy-gradient part shared by self-play and GRPO: episodes, completion log-probs, the loss.

loss = token-mean of -min(r * A, clip(r, 1 - e, 1 + e) * A) + kl_coef * k3(ref || policy), over completion
tokens only, where A is the episode's normalised advantage and r = exp(logp - logp_old). Each round is
used for one update, so r = 1 and the loss reduces to REINFORCE with normalised advantages; the clipped
form stays so more updates per round remain PPO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.training_forward import next_token_logps, uses_fused_loss
from desktop_app.engine.selfplay.rewards import grouped_advantages


@dataclass
class Episode:
    prompt: list[int]
    completion: list[int]
    advantage: float
    role: str
    task_type: str
    ref_logps: list[float] | None = None


class EpisodeBatch(list):
    """One round's episodes; `stats` are the round's figures (the same for every micro-batch of it). `scales`: what
    each episode's summed token losses are multiplied by (None: the micro-batch's token mean); the rollout methods set
    them so that a micro-batch on any process adds what its episodes add to one process's loss."""

    stats: dict[str, float]

    def __init__(self, episodes: Any = (), stats: dict[str, float] | None = None,
                 scales: list[float] | None = None):
        super().__init__(episodes)
        self.stats = dict(stats or {})
        self.scales = scales


def teaching_episodes(episodes: list[Episode], rewards: Sequence[float], groups: Sequence[object]) -> list[Episode]:
    """Set each episode's advantage (its reward normalised within its group) and keep those that teach: an advantage
    other than 0 and a completion. At least one is kept, so every round makes a step."""
    for episode, advantage in zip(episodes, grouped_advantages(rewards, groups), strict=True):
        episode.advantage = advantage
    return [e for e in episodes if e.advantage != 0.0 and e.completion] or episodes[:1]


ADAPTER_OFF = "adapter-off"  # the reference is the trained model with its LoRA adapters switched off


def make_reference(adapter: bool, load_reference: Callable[[], torch.nn.Module] | None) -> Any:
    """The frozen reference for a KL term: the base itself (LoRA: adapters off; else a frozen copy loaded
    from the base folder, so a resumed run gets the very same reference). A run without a base has none."""
    if adapter:
        return ADAPTER_OFF
    if load_reference is None:

        raise UserError("a KL penalty (kl_coef > 0) or the likelihood reward needs a base model to compare with: "
                        "train from a base model, or set kl_coef to 0")
    return load_reference()


@torch.no_grad()
def reference_logps(reference: Any, episodes: list[Episode], chunk: int = 16, model: Any = None) -> None:
    """Fill each episode's `ref_logps` from the frozen reference (for the KL term and likelihood reward)."""
    if reference == ADAPTER_OFF:
        assert model is not None
        was = model.training
        model.eval()
        try:
            with model.disable_adapter():
                reference_logps(model, episodes, chunk)
        finally:
            model.train(was)
        return
    for i in range(0, len(episodes), chunk):
        part = episodes[i:i + chunk]
        logps, _ = completion_logps(reference, part)
        for row, e in enumerate(part):
            e.ref_logps = logps[row, : len(e.completion)].tolist()


def policy_loss(model: torch.nn.Module, micro: EpisodeBatch, *, clip: float = 0.2,
                kl_coef: float = 0.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped policy loss (+ KL) of one micro-batch and its metrics (the round's stats, kl, entropy): the token
    mean, or each episode's token sum times its scale (`micro.scales`)."""
    device = next(model.parameters()).device
    stats = {k: torch.tensor(v) for k, v in micro.stats.items()}
    if not micro:  # (a process whose share of a round is empty: its figures still add up with the others')
        zero = sum(p.sum() * 0.0 for p in model.parameters() if p.requires_grad)
        return zero, {**stats, "kl": torch.zeros(()), "entropy": torch.zeros(())}
    (logps, entropy), mask = completion_logps(model, micro, with_entropy=True)
    adv = torch.tensor([e.advantage for e in micro], device=device).unsqueeze(1)
    if micro.scales is not None:  # each episode's token sum, scaled
        mask = mask * torch.tensor(micro.scales, device=device, dtype=mask.dtype).unsqueeze(1)
    norm = mask.sum().clamp(min=1) if micro.scales is None else torch.ones((), device=device)
    ratio = torch.exp(logps - logps.detach())
    per_token = -torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    kl_value = torch.zeros((), device=device)
    if kl_coef > 0 and any(e.ref_logps for e in micro):
        ref = logps.detach().clone()
        for i, e in enumerate(micro):
            if e.ref_logps:
                ref[i, : len(e.ref_logps)] = torch.tensor(e.ref_logps, device=device)
        log_ratio = ref - logps
        kl = torch.exp(log_ratio) - log_ratio - 1  # k3 estimator: unbiased, always >= 0
        per_token = per_token + kl_coef * kl
        kl_value = (kl * mask).sum() / norm
    loss = (per_token * mask).sum() / norm
    stats["kl"] = kl_value.detach()
    stats["entropy"] = ((entropy * mask).sum() / norm).detach()
    return loss, stats


def completion_logps(model: torch.nn.Module, episodes: list[Episode], with_entropy: bool = False) -> Any:
    """Per-token log-probs of each completion given its prompt ([B, Tc]) and the completion mask."""
    device = next(model.parameters()).device
    width = max(len(e.completion) for e in episodes)
    if uses_fused_loss(model, device):
        rows = [e.prompt + e.completion for e in episodes]
        ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
        for i, r in enumerate(rows):  # right padding: positions start at 0 for every row
            ids[i, : len(r)] = torch.tensor(r)
        return _fused_completion_logps(model, episodes, ids.to(device), width, with_entropy)
    return _packed_completion_logps(model, episodes, width, with_entropy)


PACKED_LINE = 256  # tokens per packed line: short prompts share lines instead of padding to the longest row


def pack_lines(lengths: list[int], capacity: int) -> list[list[int]]:
    """Indices of rows grouped into lines of at most `capacity` tokens (first fit, longest first); a row longer
    than the capacity gets a line of its own."""
    lines: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for j, left in enumerate(room):
            if lengths[i] <= left:
                lines[j].append(i)
                room[j] -= lengths[i]
                break
        else:
            lines.append([i])
            room.append(capacity - lengths[i])
    return lines


def _packed_completion_logps(model: torch.nn.Module, episodes: list[Episode], width: int,
                             with_entropy: bool) -> Any:
    """completion_logps with the rows packed into lines (position ids restart at each row, so attention never
    crosses rows): the same numbers as one padded row each, without computing the padding (a self-play round's
    rows differ in length by 2x and more, so padding to the longest row was over half the work on a CPU)."""
    device = next(model.parameters()).device
    lengths = [len(e.prompt) + len(e.completion) for e in episodes]
    lines = pack_lines(lengths, max(PACKED_LINE, max(lengths)))
    span = max(sum(lengths[i] for i in line) for line in lines)
    ids = torch.zeros(len(lines), span, dtype=torch.long)
    positions = torch.zeros(len(lines), span, dtype=torch.long)
    select = torch.zeros(len(lines), span - 1, dtype=torch.bool)
    owner: list[int] = []  # the episode and completion column of each selected position, in row-major order
    cols: list[int] = []
    for row, line in enumerate(lines):
        at = 0
        for i in sorted(line):
            e, n = episodes[i], lengths[i]
            ids[row, at: at + n] = torch.tensor(e.prompt + e.completion)
            positions[row, at: at + n] = torch.arange(n)
            p, c = len(e.prompt), len(e.completion)
            select[row, at + p - 1: at + p - 1 + c] = True
            owner += [i] * c
            cols += range(c)
            at += n
        positions[row, at:] = torch.arange(span - at)  # the tail of padding: an example of its own
    ids, positions, select = ids.to(device), positions.to(device), select.to(device)
    token_lp, token_entropy = next_token_logps(model, ids[:, :-1], ids[:, 1:], select,
                                               position_ids=positions[:, :-1], with_entropy=with_entropy)
    where = (torch.tensor(owner, dtype=torch.long, device=device), torch.tensor(cols, dtype=torch.long, device=device))
    return _per_episode(token_lp, token_entropy if with_entropy else None, where, (len(episodes), width))


def _per_episode(token_lp: torch.Tensor, token_entropy: torch.Tensor | None, where: tuple[torch.Tensor, torch.Tensor],
                 shape: tuple[int, int]) -> Any:
    """The selected positions' log-probs (and entropies) laid out per episode and completion column, with the mask."""
    logps = torch.zeros(shape, device=token_lp.device).index_put(where, token_lp)
    mask = torch.zeros(shape, device=token_lp.device).index_put(where, torch.ones_like(token_lp))
    if token_entropy is not None:
        entropy = torch.zeros(shape, device=token_lp.device).index_put(where, token_entropy.detach())
        return (logps, entropy), mask
    return logps, mask


def _fused_completion_logps(model: torch.nn.Module, episodes: list[Episode], ids: torch.Tensor, width: int,
                            with_entropy: bool) -> Any:
    """completion_logps through the hidden states: only the completion positions reach the output projection,
    chunk by chunk (no full logits). Right padding needs no attention mask: a causal row never sees its padding."""
    device = ids.device
    select = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.bool)
    cols: list[int] = []
    for i, e in enumerate(episodes):
        p, c = len(e.prompt), len(e.completion)
        select[i, p - 1: p - 1 + c] = True
        cols += range(c)
    select = select.to(device)
    token_lp, token_entropy = next_token_logps(model, ids[:, :-1], ids[:, 1:], select, with_entropy=with_entropy)
    where = (select.nonzero()[:, 0], torch.tensor(cols, dtype=torch.long, device=device))
    return _per_episode(token_lp, token_entropy if with_entropy else None, where, (ids.shape[0], width))
