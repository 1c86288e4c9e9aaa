"""GRPO with reward functions, as an objective of the one training loop.

Each step samples `prompts_per_step` prompts from a JSONL file (`prompt`, optional `answer`), draws a
group of G completions per prompt with the app's decode engine, scores each with the weighted reward
mix (built-in functions and the user's own reward file), normalises rewards within each prompt's group
and applies the shared clipped policy loss (+ optional KL to a frozen reference).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from desktop_app.engine.data.prompt_files import load_prompts
from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import GRPOOptions, typed_options
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.objectives.episodes import EpisodeObjective
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, reference_logps, teaching_episodes
from desktop_app.engine.selfplay.rewards import RewardMix, load_user_reward


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

    def _generate(self, prompts: list[str], samples: int, seed: int, temperature: float) -> tuple[list, list, list]:
        assert self.prompter is not None
        codec = self.prompter.codec
        # chat: each prompt is one user turn through the chat template; plain: the prompt text as it is
        encoded = [self.prompter.question_ids(p) if self.prompter.chat else codec.encode(p) for p in prompts]
        ids, texts = self._sample(encoded, samples, seed, int(self.options.max_lines), temperature=temperature)
        return encoded, ids, texts

    # -- a round: draw prompts, sample a group for each, score, normalise within the groups -------------------
    def play_round(self, round_index: int) -> EpisodeBatch:
        rng = self.round_rng(round_index)
        chosen = [self.records[rng.randrange(len(self.records))] for _ in range(int(self.options.prompts_per_step))]
        g = int(self.options.group_size)
        t0 = time.perf_counter()
        encoded, ids, texts = self._generate([r["prompt"] for r in chosen], g, rng.randrange(2**31),
                                             float(self.options.temperature))
        t_gen = time.perf_counter() - t0
        episodes = [Episode(encoded[i // g], ids[i], 0.0, "policy", "grpo") for i in range(len(ids))]
        likelihoods = self._likelihoods(episodes)
        t1 = time.perf_counter()
        rewards, sums = self._score([chosen[i // g] for i in range(len(texts))], texts, likelihoods)
        t_reward = time.perf_counter() - t1
        kept = teaching_episodes(episodes, rewards, [i // g for i in range(len(rewards))])
        self.fill_reference(kept)
        n = max(1, len(rewards))
        stats = {"reward": sum(rewards) / n, **{f"reward/{k}": v / n for k, v in sums.items()},
                 "response_length": sum(len(c) for c in ids) / n,
                 "rollout_tokens_per_s": sum(len(c) for c in ids) / max(t_gen, 1e-9),
                 "check_share": t_reward / max(t_gen + t_reward, 1e-9), "episodes": float(len(kept))}
        self.last_rollouts = [{"prompt": chosen[i // g]["prompt"], "answer": texts[i], "reward": rewards[i]}
                              for i in range(len(texts))]
        return EpisodeBatch(kept, stats)

    def _likelihoods(self, episodes: list[Episode]) -> list[float]:
        """Each completion's mean log-probability under the reference, when the mix rewards it (else 0)."""
        if "likelihood" not in self.mix.weights or self.reference is None:
            return [0.0] * len(episodes)
        reference_logps(self.reference, episodes, model=self.model)
        return [sum(e.ref_logps or [0.0]) / max(1, len(e.ref_logps or [])) for e in episodes]

    def _score(self, records: list[dict[str, str]], texts: list[str],
               likelihoods: list[float]) -> tuple[list[float], dict[str, float]]:
        """Each completion's reward from the mix, and the sum of each part of it."""
        rewards, sums = [], {}
        for record, text, likelihood in zip(records, texts, likelihoods, strict=True):
            parts = self.mix.parts(record["prompt"], text, record["answer"], likelihood)
            for name, value in parts.items():
                sums[name] = sums.get(name, 0.0) + value
            rewards.append(self.mix.total(parts))
        return rewards, sums

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Greedy mean reward on the first `eval_prompts` prompts (val_loss = -reward for best/early stop)."""
        records = self.records[: int(self.options.eval_prompts)]
        _, _, texts = self._generate([r["prompt"] for r in records], 1, 0, 0.0)
        scores = [self.mix.total(self.mix.parts(r["prompt"], t, r["answer"])) for r, t in zip(records, texts,
                                                                                                strict=True)]
        mean = sum(scores) / max(1, len(scores))
        return {"eval_reward": mean, "val_loss": -mean}
