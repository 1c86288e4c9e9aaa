"""What the rollout methods share (GRPO and self-play): each step's batch is a round of episodes played with the
current model, and the loss is the clipped policy loss over their completions (selfplay/policy.py).

`EpisodeObjective` holds that part once: the model, prompter and reference it plays with, the round's seeded RNG,
the one call into the decode engine, splitting a round into micro-batches, the loss and the rollouts shown at each
evaluation. A subclass says how a round is played (`play_round`) and how it is evaluated.

On several processes (torchrun) each plays its share of a round: it decodes and judges its share of the prompts
(`Part`; every row draws from its own generator, seeded by (round seed, prompt's place, sample), so the tokens are
those one process would draw) and gathers the others' replies and verdicts (`processes.pool`), so every process holds
the whole round and makes the same decisions (rewards, advantages, task buffers). Each then trains its share of the
round's teaching episodes, each episode weighing in the loss what it weighs in one process's (`split`), so DDP's
average of the gradients is one process's gradient.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from desktop_app.engine.generate.runners import forget_prepared_weights
from desktop_app.engine.objectives.base import Objective, Processes, TrainContext, context_of
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, make_reference, policy_loss, reference_logps
from desktop_app.engine.selfplay.prompting import TaskPrompter, make_prompter
from desktop_app.engine.selfplay.rollout import RolloutOptions, RoundSource, sample_completions


@dataclass(frozen=True)
class Part:
    """The prompts of a decode this process plays: their ids, their places in the whole decode (`keys`, which seed
    their rows) and the whole's longest prompt (its token budget)."""

    prompts: list[list[int]]
    keys: list[int]
    longest: int


class EpisodeObjective(Objective):
    """A rollout method: `options` carry max_new_tokens, temperature, top_p, clip, kl_coef and prompt_style."""

    options: Any
    shares_evaluation = True  # each process decodes its share of the evaluation's prompts

    def __init__(self) -> None:
        super().__init__()
        self.model: torch.nn.Module | None = None
        self.reference: Any = None  # the frozen base of the KL term (and GRPO's likelihood reward), else None
        self.prompter: TaskPrompter | None = None
        self.seed = 0
        self.max_len = 512
        self.last_rollouts: list[dict[str, Any]] = []  # the last round's examples, shown at each evaluation
        self.processes = Processes()  # the processes sharing each round (one: all of it here)

    def attach(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        """Keep the model the rounds are played with, its prompter and the longest sequence it may build."""
        self.model, self.seed, self.processes = model, ctx.seed, ctx.processes
        self.prompter = make_prompter(ctx.tokenizer, self.options.prompt_style, model)
        self.max_len = context_of(ctx, model)

    def keep_reference(self, ctx: TrainContext) -> None:
        self.reference = make_reference(ctx.adapter, ctx.load_reference)

    # -- a round -------------------------------------------------------------------------------------------
    def batch_source(self, ctx: TrainContext) -> RoundSource:
        return RoundSource(self.play_round)

    def play_round(self, round_index: int) -> EpisodeBatch:
        raise NotImplementedError

    def round_rng(self, round_index: int) -> random.Random:
        """The round's RNG, seeded by (run seed, method, round) so a resumed run plays the same rounds."""
        rng = random.Random(f"{self.seed}-{self.name}-{round_index}")  # the name seeds it: renaming changes rounds
        forget_prepared_weights(self.model)  # the optimizer changed the weights in place since the last round
        return rng

    def share(self, prompts: list[list[int]]) -> Part:
        """This process's share of a decode's prompts (all of them in one process)."""
        mine = self.processes.share(len(prompts))
        return Part([prompts[i] for i in mine], list(mine), max((len(p) for p in prompts), default=0))

    def mine(self, episodes: list[Episode]) -> list[Episode]:
        """This process's share of a round's teaching episodes: the ones it trains (`split`)."""
        return [episodes[i] for i in self.processes.share(len(episodes))]

    def _sample(self, part: Part, samples: int, seed: int, max_lines: int,
                finished: list[Callable[[list[int]], bool] | None] | None = None,
                temperature: float | None = None) -> tuple[list[list[int]], list[str]]:
        """`samples` replies to each prompt of `part`: their ids and texts (prompt-major). finished: per prompt, the
        check that its answer is complete (or None); temperature: the options' unless given (greedy evaluation).
        The rollout methods' one call into the decode engine."""
        assert self.model is not None and self.prompter is not None
        codec = self.prompter.codec
        if not part.prompts:
            return [], []
        rollout = RolloutOptions(
            samples=samples, max_new_tokens=int(self.options.max_new_tokens),
            temperature=float(self.options.temperature) if temperature is None else temperature,
            top_p=float(self.options.top_p), seed=seed, stop_ids=self.prompter.stop_ids, max_len=self.max_len,
            newline_ids=codec.newline_ids() if max_lines else set(), max_lines=max_lines, finished=finished,
            tokens=codec.vocab_size(), keys=part.keys, longest=part.longest)
        ids = sample_completions(self.model, part.prompts, rollout)
        return ids, [codec.decode(c) for c in ids]

    def fill_reference(self, episodes: list[Episode]) -> None:
        """The reference's log-probabilities of the episodes that lack them (for the KL term)."""
        if float(self.options.kl_coef) > 0 and self.reference is not None:
            reference_logps(self.reference, [e for e in episodes if e.ref_logps is None], model=self.model)

    # -- the loop's side ---------------------------------------------------------------------------------------
    def shard(self, batch: EpisodeBatch, rank: int, world: int) -> EpisodeBatch:
        return batch  # every process holds the whole round; `split` takes this process's share of it

    def split(self, batch: EpisodeBatch, micro_batch: int) -> list[EpisodeBatch]:
        """This process's share of the round (`mine`) in micro-batches of at most `micro_batch` episodes. One process
        trains the round's micro-batches P (its first `micro_batch` episodes, the next, ...), each the token mean of
        its T_P tokens, weighted |P| / K by the loop (K: the round's episodes). Elsewhere an episode of P keeps that
        weight: its token sum is scaled by |P| / (K T_P) times N M / m (m: the episodes of the micro-batch it is in, M:
        this process's, N: processes), which the loop's weighting (m / M) and DDP's average (1 / N) undo (in one
        process that scale is 1 / T_P: the token mean, computed as such). An empty share adds nothing but still
        reports the round's figures."""
        if self.processes.world == 1:
            return [EpisodeBatch(batch[i:i + micro_batch], batch.stats) for i in range(0, len(batch), micro_batch)] \
                or [EpisodeBatch([], batch.stats)]
        share = list(self.processes.share(len(batch)))
        if not share:
            return [EpisodeBatch([], batch.stats)]
        weights = _piece_weights(batch, micro_batch)
        scale = self.processes.world * len(share)
        out = []
        for at in range(0, len(share), micro_batch):
            chunk = share[at:at + micro_batch]
            out.append(EpisodeBatch([batch[i] for i in chunk], batch.stats,
                                    scales=[weights[i] * scale / len(chunk) for i in chunk]))
        return out

    def to_device(self, micro: EpisodeBatch, device: torch.device) -> EpisodeBatch:
        return micro  # the loss puts each micro-batch's tokens on the model's device

    def tokens(self, micro: EpisodeBatch) -> int:
        return sum(len(e.prompt) + len(e.completion) for e in micro)

    def loss(self, model: torch.nn.Module, micro: EpisodeBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return policy_loss(model, micro, clip=float(self.options.clip), kl_coef=float(self.options.kl_coef))

    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        """The last round's first rollouts, with their verdict (where the method gives one) and reward."""
        return [(r["prompt"][-200:], f"{r['answer'].strip()}  [{_verdict(r)}reward {r['reward']:+.2f}]")
                for r in self.last_rollouts[:3]]


def _piece_weights(batch: EpisodeBatch, micro_batch: int) -> list[float]:
    """Each episode's weight in one process's loss: |P| / (K T_P), P its micro-batch there (episodes in order, at
    most `micro_batch` each), T_P the completion tokens of P, K the round's episodes."""
    out: list[float] = []
    for at in range(0, len(batch), micro_batch):
        piece = batch[at:at + micro_batch]
        tokens = max(1, sum(len(e.completion) for e in piece))
        out += [len(piece) / (len(batch) * tokens)] * len(piece)
    return out


def _verdict(rollout: dict[str, Any]) -> str:
    return f"{rollout['verdict']}, " if "verdict" in rollout else ""
