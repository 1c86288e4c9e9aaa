"""GRPO with reward functions, as an objective of the one training loop.

Each step samples `prompts_per_step` prompts from a JSONL file (`prompt`, optional `answer`), draws a
group of G completions per prompt with the app's decode engine, scores each with the weighted reward
mix (built-in functions and the user's own reward file), normalises rewards within each prompt's group
and applies the shared clipped policy loss (+ optional KL to a frozen reference).
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from desktop_app.engine.data.prompt_files import load_prompts
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.runners import forget_prepared_weights
from desktop_app.engine.method_options import GRPOOptions, typed_options
from desktop_app.engine.objectives.base import Objective, TrainContext, context_of
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, make_reference, policy_loss, reference_logps
from desktop_app.engine.selfplay.prompting import TaskPrompter, make_prompter
from desktop_app.engine.selfplay.rewards import RewardMix, grouped_advantages, load_user_reward
from desktop_app.engine.selfplay.rollout import RoundSource, sample_completions


class GRPOObjective(Objective):
    name = "grpo"

    def __init__(self, options: GRPOOptions | dict[str, Any] | None = None):
        super().__init__()
        self._from_config = options is None  # made by the registry: the run config's method_options apply
        self._configure(options or {})
        self.records: list[dict[str, str]] = []
        self.model: torch.nn.Module | None = None
        self.reference: Any = None
        self.prompter: TaskPrompter | None = None
        self.seed, self.max_len = 0, 512
        self.last_rollouts: list[dict[str, Any]] = []

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
        self.model, self.seed = model, ctx.seed
        self.prompter = make_prompter(ctx.tokenizer, self.options.prompt_style, model)
        self.max_len = context_of(ctx, model)
        if float(self.options.kl_coef) > 0 or "likelihood" in self.mix.weights:
            self.reference = make_reference(ctx.adapter, ctx.load_reference)

    def batch_source(self, ctx: TrainContext) -> RoundSource:
        return RoundSource(self.play_round)

    def split(self, batch: EpisodeBatch, micro_batch: int) -> list[EpisodeBatch]:
        return [EpisodeBatch(batch[i:i + micro_batch], batch.stats) for i in range(0, len(batch), micro_batch)] \
            or [EpisodeBatch([], batch.stats)]

    def to_device(self, micro: EpisodeBatch, device: torch.device) -> EpisodeBatch:
        return micro

    def tokens(self, micro: EpisodeBatch) -> int:
        return sum(len(e.prompt) + len(e.completion) for e in micro)

    def _generate(self, prompts: list[str], samples: int, seed: int, temperature: float) -> tuple[list, list, list]:
        assert self.model is not None and self.prompter is not None
        codec = self.prompter.codec
        # chat: each prompt is one user turn through the chat template; plain: the prompt text as it is
        encoded = [self.prompter.question_ids(p) if self.prompter.chat else codec.encode(p) for p in prompts]
        ids = sample_completions(self.model, encoded, samples=samples,
                                 max_new_tokens=int(self.options.max_new_tokens),
                                 temperature=temperature, top_p=float(self.options.top_p), seed=seed,
                                 stop_ids=self.prompter.stop_ids, max_len=self.max_len,
                                 newline_ids=codec.newline_ids() if self.options.max_lines else set(),
                                 max_lines=int(self.options.max_lines), tokens=codec.vocab_size())
        return encoded, ids, [codec.decode(c) for c in ids]

    def play_round(self, round_index: int) -> EpisodeBatch:
        rng = random.Random(f"{self.seed}-grpo-{round_index}")
        forget_prepared_weights(self.model)  # the optimizer changed the weights in place since the last round
        chosen = [self.records[rng.randrange(len(self.records))] for _ in range(int(self.options.prompts_per_step))]
        g = int(self.options.group_size)
        t0 = time.perf_counter()
        encoded, ids, texts = self._generate([r["prompt"] for r in chosen], g, rng.randrange(2**31),
                                             float(self.options.temperature))
        t_gen = time.perf_counter() - t0
        episodes = [Episode(encoded[i // g], ids[i], 0.0, "policy", "grpo") for i in range(len(ids))]
        likelihoods = [0.0] * len(episodes)
        if "likelihood" in self.mix.weights and self.reference is not None:
            reference_logps(self.reference, episodes, model=self.model)
            likelihoods = [sum(e.ref_logps or [0.0]) / max(1, len(e.ref_logps or [])) for e in episodes]
        rewards, sums, t1 = [], {}, time.perf_counter()
        for i, text in enumerate(texts):
            record = chosen[i // g]
            parts = self.mix.parts(record["prompt"], text, record["answer"], likelihoods[i])
            for name, value in parts.items():
                sums[name] = sums.get(name, 0.0) + value
            rewards.append(self.mix.total(parts))
        t_reward = time.perf_counter() - t1
        for e, a in zip(episodes, grouped_advantages(rewards, [i // g for i in range(len(rewards))]), strict=True):
            e.advantage = a
        kept = [e for e in episodes if e.advantage != 0.0 and e.completion] or episodes[:1]
        if float(self.options.kl_coef) > 0 and self.reference is not None:
            reference_logps(self.reference, [e for e in kept if e.ref_logps is None], model=self.model)
        n = max(1, len(rewards))
        stats = {"reward": sum(rewards) / n, **{f"reward/{k}": v / n for k, v in sums.items()},
                 "response_length": sum(len(c) for c in ids) / n,
                 "rollout_tokens_per_s": sum(len(c) for c in ids) / max(t_gen, 1e-9),
                 "check_share": t_reward / max(t_gen + t_reward, 1e-9), "episodes": float(len(kept))}
        self.last_rollouts = [{"prompt": chosen[i // g]["prompt"], "answer": texts[i], "reward": rewards[i]}
                              for i in range(len(texts))]
        return EpisodeBatch(kept, stats)

    def loss(self, model: torch.nn.Module, micro: EpisodeBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return policy_loss(model, micro, clip=float(self.options.clip), kl_coef=float(self.options.kl_coef))

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Greedy mean reward on the first `eval_prompts` prompts (val_loss = -reward for best/early stop)."""
        records = self.records[: int(self.options.eval_prompts)]
        _, _, texts = self._generate([r["prompt"] for r in records], 1, 0, 0.0)
        scores = [self.mix.total(self.mix.parts(r["prompt"], t, r["answer"])) for r, t in zip(records, texts,
                                                                                                strict=True)]
        mean = sum(scores) / max(1, len(scores))
        return {"eval_reward": mean, "val_loss": -mean}

    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        return [(r["prompt"][-200:], f"{r['answer'].strip()}  [reward {r['reward']:+.2f}]")
                for r in self.last_rollouts[:3]]
