"""GRPO with reward functions, as an objective of the one training loop.

Each step samples `prompts_per_step` prompts from a JSONL file (`prompt`, optional `answer`), draws a
group of G completions per prompt with the app's decode engine, scores each with the weighted reward
mix (built-in functions and the user's own reward file), normalises rewards within each prompt's group
and applies the shared clipped policy loss (+ optional KL to a frozen reference).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from desktop_app.engine.data.prompt_files import load_prompts
from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import GRPOOptions, typed_options
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.objectives.episodes import EpisodeObjective
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, reference_logps, teaching_episodes
from desktop_app.engine.selfplay.rewards import RewardMix, load_user_reward


@dataclass
class _Played:
    """A round's completions as episodes (prompt-major, G per prompt), their texts and reward parts, and this
    process's seconds decoding and scoring."""

    episodes: list[Episode]
    texts: list[str]
    parts: list[dict[str, float]]
    decode_s: float
    score_s: float


class GRPOObjective(EpisodeObjective):
    name = "grpo"

    def __init__(self, options: GRPOOptions | dict[str, Any] | None = None):
        super().__init__()
        self._from_config = options is None  # made by the registry: the run config's method_options apply
        self._configure(options or {})
        self.records: list[dict[str, str]] = []

    def _configure(self, options: GRPOOptions | dict[str, Any]) -> None:
        self.options: GRPOOptions = typed_options(GRPOOptions, options, "GRPO")
        o = self.options
        user = load_user_reward(o.reward_file) if o.reward_file else None
        weights = dict(o.weights)
        if user is not None:
            weights.setdefault("user", 1.0)
        self.mix = RewardMix(weights=weights, length_target=o.length_target, format_pattern=o.format_pattern,
                             user=user).check()

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        if ctx.tokenizer is None:
            raise UserError("GRPO needs the model's tokenizer")
        config = ctx.config
        if self._from_config:
            self._configure({**config.method_options, **({"prompts": list(config.data)} if config.data else {})})
        self.records = load_prompts(self.options.prompts)
        self.attach(ctx, model)
        if float(self.options.kl_coef) > 0 or "likelihood" in self.mix.weights:
            self.keep_reference(ctx)

    def _encode(self, prompts: list[str]) -> list[list[int]]:
        """chat: each prompt is one user turn through the chat template; plain: the prompt text as it is."""
        assert self.prompter is not None
        codec = self.prompter.codec
        return [self.prompter.question_ids(p) if self.prompter.chat else codec.encode(p) for p in prompts]

    # -- a round: draw prompts, sample a group for each, score, normalise within the groups -------------------
    def play_round(self, round_index: int) -> EpisodeBatch:
        rng = self.round_rng(round_index)
        chosen = [self.records[rng.randrange(len(self.records))] for _ in range(int(self.options.prompts_per_step))]
        g = int(self.options.group_size)
        played = self._play(chosen, rng.randrange(2**31))
        rewards, sums = self._score(played.parts)
        kept = teaching_episodes(played.episodes, rewards, [i // g for i in range(len(rewards))])
        self.fill_reference(self.mine(kept))
        n, ids = max(1, len(rewards)), [e.completion for e in played.episodes]
        stats = {"reward": sum(rewards) / n, **{f"reward/{k}": v / n for k, v in sums.items()},
                 "response_length": sum(len(c) for c in ids) / n,
                 "rollout_tokens_per_s": sum(len(c) for c in ids) / max(played.decode_s, 1e-9),
                 "check_share": played.score_s / max(played.decode_s + played.score_s, 1e-9),
                 "episodes": float(len(kept))}
        self.last_rollouts = [{"prompt": chosen[i // g]["prompt"], "answer": text, "reward": rewards[i]}
                              for i, text in enumerate(played.texts)]
        return EpisodeBatch(kept, stats)

    def _play(self, chosen: list[dict[str, str]], seed: int) -> _Played:
        """G completions of each prompt and their reward parts: this process samples and scores its share of the
        prompts (all of them in one process) and gathers the others', so every process holds the whole round."""
        assert self.prompter is not None
        g, encoded = int(self.options.group_size), self._encode([r["prompt"] for r in chosen])
        t0 = time.perf_counter()
        part = self.share(encoded)
        ids, texts = self._sample(part, g, seed, int(self.options.max_lines))
        t1 = time.perf_counter()
        episodes = [Episode(part.prompts[i // g], ids[i], 0.0, "policy", "grpo") for i in range(len(ids))]
        records = [chosen[part.keys[i // g]] for i in range(len(ids))]
        parts = [self.mix.parts(r["prompt"], text, r["answer"], likelihood)
                 for r, text, likelihood in zip(records, texts, self._likelihoods(episodes), strict=True)]
        played = _Played(episodes, texts, parts, t1 - t0, time.perf_counter() - t1)
        groups = self.processes.pool([[[c, p] for c, p in zip(ids[k * g:(k + 1) * g], parts[k * g:(k + 1) * g],
                                                            strict=True)] for k in range(len(part.keys))],
                                     "gathering a GRPO round")
        if len(groups) == len(part.keys):
            return played
        own = {key * g + s: episodes[k * g + s] for k, key in enumerate(part.keys) for s in range(g)}
        pooled = [row for group in groups for row in group]  # prompt-major, as one process decodes them
        played.episodes = [own.get(i) or Episode(encoded[i // g], c, 0.0, "policy", "grpo")  # own: reference log-probs
                           for i, (c, _) in enumerate(pooled)]
        played.texts = [self.prompter.codec.decode(c) for c, _ in pooled]
        played.parts = [p for _, p in pooled]
        return played

    def _likelihoods(self, episodes: list[Episode]) -> list[float]:
        """Each completion's mean log-probability under the reference, when the mix rewards it (else 0)."""
        if "likelihood" not in self.mix.weights or self.reference is None:
            return [0.0] * len(episodes)
        reference_logps(self.reference, episodes, model=self.model)
        return [sum(e.ref_logps or [0.0]) / max(1, len(e.ref_logps or [])) for e in episodes]

    def _score(self, parts: list[dict[str, float]]) -> tuple[list[float], dict[str, float]]:
        """Each completion's reward from its parts (the mix's functions' values), and the sum of each part."""
        rewards, sums = [], {}
        for values in parts:
            for name, value in values.items():
                sums[name] = sums.get(name, 0.0) + value
            rewards.append(self.mix.total(values))
        return rewards, sums

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Greedy mean reward on the first `eval_prompts` prompts (val_loss = -reward for best/early stop)."""
        records = self.records[: int(self.options.eval_prompts)]
        part = self.share(self._encode([r["prompt"] for r in records]))  # this process's share of them
        _, texts = self._sample(part, 1, 0, int(self.options.max_lines), temperature=0.0)
        scores = [self.mix.total(self.mix.parts(records[k]["prompt"], t, records[k]["answer"]))
                  for k, t in zip(part.keys, texts, strict=True)]
        scores = self.processes.pool(scores, "gathering the evaluation's rewards")
        mean = sum(scores) / max(1, len(scores))
        return {"eval_reward": mean, "val_loss": -mean}
