"""Absolute Zero self-play as an objective of the one training loop.

Each optimizer step, the batch source plays one round with the current model:
  propose  for every task type, P proposer prompts (K reference tasks from that type's buffer) are
           sampled, all types in one batch; the task world validates them (in the sandbox for the python world);
  solve    S tasks per type (the new valid proposals first, then buffer tasks) get N solver samples
           each, again all types in one batch; the world checks every answer by value;
  reward   solver: 1 / 0 / -0.5 (format) / -1 (unparseable); proposer: learnability 1 - solve rate
           (0 at 0 or 1), -0.5 for an invalid proposal; advantages normalised per (role, type) (TRR++).
The loss is the REINFORCE++ / PPO-clip policy loss over completion tokens (one update per round, so the
ratio is 1 and clipping only matters when the options ask for more), plus an optional KL to a frozen
reference. Buffers and the round counter are the source's state, saved in every checkpoint; sampling
is seeded by (run seed, round), so a resumed run plays the same rounds.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.heldout import drain, heldout_programs, heldout_tasks, mean_rate, solve_heldout
from desktop_app.engine.events import Log
from desktop_app.engine.generate.runners import forget_prepared_weights
from desktop_app.engine.method_options import SelfPlayOptions, typed_options
from desktop_app.engine.objectives.base import Objective, TrainContext, context_of
from desktop_app.engine.selfplay.buffer import TaskBuffer
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, make_reference, policy_loss, reference_logps
from desktop_app.engine.selfplay.prompting import TaskPrompter, default_world, make_prompter
from desktop_app.engine.selfplay.rewards import grouped_advantages, learnability
from desktop_app.engine.selfplay.rollout import RoundSource, sample_completions
from desktop_app.engine.tasks.base import PENALTY_FORMAT, Task, TaskWorld, get_world

LOG_NAME = "selfplay.jsonl"
class SelfPlaySource(RoundSource):
    """Self-play rounds; the task buffers travel with the round in every checkpoint."""

    def __init__(self, objective: SelfPlayObjective):
        super().__init__(objective.play_round)
        self.o = objective

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "buffers": {t: b.state_dict() for t, b in self.o.buffers.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        for task_type, buffer_state in state.get("buffers", {}).items():
            if task_type in self.o.buffers:
                self.o.buffers[task_type].load_state_dict(buffer_state)
        self.o.truncate_log(self.round)


class SelfPlayObjective(Objective):
    name = "selfplay"

    def __init__(self, options: SelfPlayOptions | dict[str, Any] | None = None, world: TaskWorld | None = None):
        super().__init__()
        self._from_config = options is None  # made by the registry: the run config's method_options apply
        self.options: SelfPlayOptions = typed_options(SelfPlayOptions, options, "self-play")
        self.world = world
        self.buffers: dict[str, TaskBuffer] = {t: TaskBuffer() for t in self.options.task_types}
        self.heldout: dict[str, list[Task]] = {}
        self.seed_tasks: dict[str, list[Task]] = {}  # the buffers' first tasks (regenerated alike on resume)
        self.model: torch.nn.Module | None = None
        self.reference: Any = None
        self.prompter: TaskPrompter | None = None
        self.seed = 0
        self.max_len = 512
        self.last_rollouts: list[dict[str, Any]] = []
        self.log_path: Path | None = None

    # -- seam ----------------------------------------------------------------------------------------
    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        if ctx.tokenizer is None:
            raise UserError("self-play needs the model's tokenizer")
        if self._from_config and ctx.config.method_options:
            self.options = typed_options(SelfPlayOptions, ctx.config.method_options, "self-play")
            self.buffers = {t: TaskBuffer() for t in self.options.task_types}
        self.model, self.seed = model, ctx.seed
        self.prompter = make_prompter(ctx.tokenizer, self.options.prompt_style, model)
        self.log_path = Path(ctx.run_dir) / LOG_NAME
        self.max_len = context_of(ctx, model)
        if self.world is None:
            name = default_world(ctx.tokenizer) if self.options.world == "auto" else self.options.world
            self.world = get_world(name, strict=bool(self.options.strict_sandbox), **dict(self.options.world_options))
            self.notes.append(Log("info", f"self-play on the {name} world with {self.prompter.style} prompts"))
        for task_type in self.options.task_types:
            excluded = heldout_programs(self.world, task_type, list(self.options.exclude_heldout),
                                        int(self.options.heldout_per_type))
            seeds = identity_tasks(self.world, task_type)
            seeds += [Task.from_json(s) for s in self.options.seeds if s.get("type") == task_type]
            seeds += self.world.generate(task_type, int(self.options.seed_tasks_per_type), ctx.seed,
                                         **({"exclude": excluded} if excluded else {}))
            self.seed_tasks[task_type] = seeds
            for task in seeds:
                self.buffers[task_type].add(task)
            self.heldout[task_type] = heldout_tasks(self.world, task_type, self.options.heldout_per_type,
                                                    int(self.options.heldout_seed))
        if float(self.options.kl_coef) > 0:
            self.reference = make_reference(ctx.adapter, ctx.load_reference)

    def batch_source(self, ctx: TrainContext) -> SelfPlaySource:
        return SelfPlaySource(self)

    def split(self, batch: EpisodeBatch, micro_batch: int) -> list[EpisodeBatch]:
        return [EpisodeBatch(batch[i:i + micro_batch], batch.stats) for i in range(0, len(batch), micro_batch)] \
            or [EpisodeBatch([], batch.stats)]

    def to_device(self, micro: EpisodeBatch, device: torch.device) -> EpisodeBatch:
        return micro

    def tokens(self, micro: EpisodeBatch) -> int:
        return sum(len(e.prompt) + len(e.completion) for e in micro)

    # -- rollouts ------------------------------------------------------------------------------------
    def _sample(self, encoded: list[list[int]], samples: int, seed: int, max_lines: int,
                temperature: float | None = None, finished: Any = None) -> list[str]:
        assert self.model is not None and self.prompter is not None
        codec = self.prompter.codec
        ids = sample_completions(self.model, encoded, samples=samples,
                                 max_new_tokens=int(self.options.max_new_tokens),
                                 temperature=float(self.options.temperature if temperature is None else temperature),
                                 top_p=float(self.options.top_p), seed=seed, stop_ids=self.prompter.stop_ids,
                                 max_len=self.max_len, newline_ids=codec.newline_ids() if max_lines else set(),
                                 max_lines=max_lines, finished=finished, tokens=codec.vocab_size())
        self._last_ids = (encoded, ids)
        return [codec.decode(c) for c in ids]

    def _sample_types(self, prompts: dict[str, list[list[int]]], samples: int, seed: int, role: str
                      ) -> dict[str, tuple[list[list[int]], list[list[int]], list[str]]]:
        """Every task type's prompts decoded in one batch (types whose replies are cut after different line counts
        apart); per type its prompt ids, completion ids (prompt-major, `samples` per prompt) and texts. One decode
        per role instead of one per type: a round's decoding costs a third of the steps."""
        assert self.world is not None and self.prompter is not None
        world, prompter = self.world, self.prompter
        by_lines: dict[int, list[str]] = {}
        for task_type in prompts:
            lines = prompter.proposal_lines(world, task_type) if role == "proposer" else \
                prompter.answer_lines(world, task_type)
            by_lines.setdefault(lines, []).append(task_type)
        out: dict[str, tuple[list[list[int]], list[list[int]], list[str]]] = {}
        for group, (lines, types) in enumerate(sorted(by_lines.items())):
            encoded = [ids for t in types for ids in prompts[t]]
            checks = [prompter.finished(world.answer_kind(t)) if role == "solver" else None
                      for t in types for _ in prompts[t]]
            texts = self._sample(encoded, samples, seed + 7919 * group, max_lines=lines,
                                 finished=checks if any(c is not None for c in checks) else None)
            prompt_ids, completion_ids = self._last_ids
            at = 0
            for t in types:
                count = len(prompts[t])
                out[t] = (prompt_ids[at: at + count], completion_ids[at * samples: (at + count) * samples],
                          texts[at * samples: (at + count) * samples])
                at += count
        return out

    def play_round(self, round_index: int) -> EpisodeBatch:
        assert self.world is not None and self.prompter is not None
        o, rng = self.options, random.Random(f"{self.seed}-selfplay-{round_index}")
        world, prompter, types = self.world, self.prompter, list(o.task_types)
        forget_prepared_weights(self.model)  # the optimizer changed the weights in place since the last round
        seed = rng.randrange(2**31)
        episodes: list[Episode] = []
        rewards: list[float] = []
        groups: list[tuple[str, str]] = []
        stats: dict[str, float] = {}
        rollouts: list[dict[str, Any]] = []
        valid_count = proposals = 0
        format_errors = answers = 0
        lengths: list[int] = []
        gen_tokens = 0
        # propose: every type's proposals in one decode
        prompts = {t: [world.propose_prompt(t, self.buffers[t].sample(int(o.references), rng), rng)
                       for _ in range(o.proposals_per_type)] for t in types}
        t0 = time.perf_counter()
        proposed = self._sample_types({t: [prompter.propose_ids(p) for p in prompts[t]] for t in types}, 1, seed,
                                      "proposer")
        t1 = time.perf_counter()
        verdicts = {t: world.validate(t, [prompter.proposal(text) for text in proposed[t][2]]) for t in types}
        t_check = time.perf_counter() - t1
        t_gen = t1 - t0
        # solve: per type its new valid proposals first (their learnability needs a solve rate), then buffer tasks
        solver_tasks: dict[str, list[Task]] = {}
        for t in types:
            new_tasks = [v.task for v in verdicts[t] if v.valid and v.task is not None]
            proposals += len(verdicts[t])
            valid_count += len(new_tasks)
            solver_tasks[t] = (new_tasks + self._draw(t, o.solver_tasks_per_type, rng))[: max(
                o.solver_tasks_per_type, len(new_tasks))]
        n = o.solver_samples
        t0 = time.perf_counter()
        solved = self._sample_types({t: [prompter.solve_ids(world, task) for task in solver_tasks[t]] for t in types},
                                    n, seed + 104729, "solver")
        t_gen += time.perf_counter() - t0
        for task_type in types:
            buffer, tasks = self.buffers[task_type], solver_tasks[task_type]
            s_prompt_ids, s_completion_ids, answers_text = solved[task_type]
            t1 = time.perf_counter()
            checks = world.check([t for t in tasks for _ in range(n)],
                                 [prompter.answer(world, tasks[i // n], a) for i, a in enumerate(answers_text)])
            t_check += time.perf_counter() - t1
            rates = []
            type_rewards = []
            for j, task in enumerate(tasks):
                group = checks[j * n:(j + 1) * n]
                rates.append(sum(c.correct for c in group) / n)
                for m, check in enumerate(group):
                    idx = j * n + m
                    episodes.append(Episode(s_prompt_ids[j], s_completion_ids[idx], 0.0, "solver", task_type))
                    rewards.append(check.reward)
                    type_rewards.append(check.reward)
                    groups.append(("solver", task_type) if o.solver_baseline == "type" else ("solver", task_type, j))
                    format_errors += check.status in ("format", "unparseable")
                    answers += 1
                    lengths.append(len(s_completion_ids[idx]))
                    gen_tokens += len(s_completion_ids[idx])
                    if m == 0:
                        rollouts.append({"role": "solver", "type": task_type, "prompt": world.solve_prompt(task),
                                         "answer": answers_text[idx], "verdict": check.status,
                                         "reward": check.reward, "reason": check.reason})
            rate_of = {id(t): r for t, r in zip(tasks, rates, strict=True)}
            prompt_ids, completion_ids, texts = proposed[task_type]
            proposer_rewards = []
            for i, verdict in enumerate(verdicts[task_type]):
                if verdict.valid and verdict.task is not None:
                    rate = rate_of.get(id(verdict.task), 0.0)
                    reward = learnability(rate)
                    added = buffer.add(verdict.task)
                    buffer.record({"round": round_index, "type": task_type, "program": verdict.task.program,
                                   "inputs": list(verdict.task.inputs), "outputs": list(verdict.task.outputs),
                                   "verdict": "valid" if added else "duplicate", "solve_rate": rate,
                                   "reward": reward})
                else:
                    reward = PENALTY_FORMAT
                    buffer.record({"round": round_index, "type": task_type, "program": texts[i][:300],
                                   "verdict": "invalid", "reason": verdict.reason, "reward": reward})
                episodes.append(Episode(prompt_ids[i], completion_ids[i], 0.0, "proposer", task_type))
                rewards.append(reward)
                proposer_rewards.append(reward)
                groups.append(("proposer", task_type))
                lengths.append(len(completion_ids[i]))
                gen_tokens += len(completion_ids[i])
                rollouts.append({"role": "proposer", "type": task_type, "prompt": prompts[task_type][i],
                                 "answer": texts[i], "verdict": "valid" if verdict.valid else "invalid",
                                 "reward": reward, "reason": verdict.reason})
            stats[f"reward/solver/{task_type}"] = sum(type_rewards) / max(1, len(type_rewards))
            stats[f"reward/proposer/{task_type}"] = sum(proposer_rewards) / max(1, len(proposer_rewards))
            stats[f"solve_rate/{task_type}"] = sum(rates) / max(1, len(rates))
            learn = [learnability(r) for r in rates]
            stats[f"learnability/{task_type}"] = sum(learn) / max(1, len(learn))
            stats[f"buffer/{task_type}"] = float(len(buffer))
        advantages = grouped_advantages(rewards, groups)
        for episode, advantage in zip(episodes, advantages, strict=True):
            episode.advantage = advantage
        kept = [e for e in episodes if e.advantage != 0.0 and e.completion] or episodes[:1]
        if self.reference is not None:
            self._reference_logps(kept)
        total = t_gen + t_check
        stats.update({
            "reward": sum(rewards) / max(1, len(rewards)), "proposal_validity": valid_count / max(1, proposals),
            "format_errors": format_errors / max(1, answers), "response_length": sum(lengths) / max(1, len(lengths)),
            "rollout_tokens_per_s": gen_tokens / max(t_gen, 1e-9), "checks_per_s": (answers + proposals) / max(
                t_check, 1e-9), "check_share": t_check / max(total, 1e-9), "episodes": float(len(kept)),
        })
        self.last_rollouts = rollouts
        self._log(round_index, rollouts)
        return EpisodeBatch(kept, stats)

    def _draw(self, task_type: str, count: int, rng: random.Random) -> list[Task]:
        """Buffer tasks for the solver: from the whole buffer, or a `seed_share` of them from the seed tasks."""
        share, buffer = float(self.options.seed_share), self.buffers[task_type]
        if not share:
            return buffer.sample(count, rng)
        out = []
        for _ in range(count):
            pool = self.seed_tasks.get(task_type) if rng.random() < share else None
            pool = pool or buffer.tasks
            if pool:
                out.append(pool[rng.randrange(len(pool))])
        return out

    def _log(self, round_index: int, rollouts: list[dict[str, Any]]) -> None:
        """One JSON line per round for the window's task browser (a view; checkpoints hold the real state)."""
        if self.log_path is None:
            return
        proposals = [entry for b in self.buffers.values() for entry in b.history if entry["round"] == round_index]
        line = json.dumps({"round": round_index, "rollouts": rollouts, "proposals": proposals})
        with open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def truncate_log(self, last_round: int) -> None:
        """After a resume, forget the rounds the checkpoint does not contain (they will be played again)."""
        if self.log_path is None or not self.log_path.exists():
            return
        keep = []
        for line in self.log_path.read_text(encoding="utf-8").splitlines():
            try:
                if int(json.loads(line).get("round", 0)) <= last_round:
                    keep.append(line)
            except (ValueError, AttributeError):
                continue
        self.log_path.write_text("".join(k + "\n" for k in keep), encoding="utf-8")

    def _reference_logps(self, episodes: list[Episode]) -> None:
        assert self.reference is not None
        reference_logps(self.reference, episodes, model=self.model)

    # -- loss ----------------------------------------------------------------------------------------
    def loss(self, model: torch.nn.Module, micro: EpisodeBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return policy_loss(model, micro, clip=float(self.options.clip), kl_coef=float(self.options.kl_coef))

    # -- evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Greedy solve rate per type on the fixed held-out tasks; val_loss = 1 - their mean (best / early stop)."""
        assert self.world is not None and self.prompter is not None
        results = drain(solve_heldout(model, self.prompter, self.world, self.heldout, max_len=self.max_len,
                                      max_new_tokens=int(self.options.max_new_tokens)))
        out = {f"heldout_solve_rate/{t}": r.rate for t, r in results.items()}
        out["heldout_solve_rate"] = mean_rate(results)
        out["val_loss"] = 1.0 - out["heldout_solve_rate"]
        return out

    def stalled(self, evaluations: int, best_val_loss: float) -> str:
        return (f"the held-out solve rate has not risen for {evaluations} evaluations (best "
                f"{1.0 - best_val_loss:.3f}, mean over the task types)")

    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        return [(r["prompt"][-200:], f"{r['answer'].strip()}  [{r['verdict']}, reward {r['reward']:+.2f}]")
                for r in self.last_rollouts[:3]]

    def close(self) -> None:
        if self.world is not None:
            self.world.close()


IDENTITY_PROPOSALS = {
    "mini": {"single": "f = lambda x: x\ninput: [1, 2, 3]",
             "induction": "f = lambda x: x\ninputs: [[1], [2, 3], [4, 5, 6], [7, 8]]"},
    "python": {"single": "```python\ndef f(x):\n    return x\n```\nInput: f([1, 2, 3])",
               "induction": "```python\ndef f(x):\n    return x\n```\nf(1)\nf([2, 3])\nf('ab')\nf(4)\n"
                            "Message: identity"},
}


def identity_tasks(world: TaskWorld, task_type: str) -> list[Task]:
    """The identity program as the first task of every buffer (the Absolute Zero seed), validated by the world."""
    proposals = IDENTITY_PROPOSALS.get(world.name)
    if proposals is None:
        return []
    verdict = world.validate(task_type, [proposals["induction" if task_type == "induction" else "single"]])[0]
    return [verdict.task] if verdict.valid and verdict.task is not None else []
