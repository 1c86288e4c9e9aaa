"""Absolute Zero self-play as an objective of the one training loop.

Each optimizer step, the batch source plays one round with the current model, in named steps:
  propose  for every task type, P proposer prompts (K reference tasks from that type's buffer) are
           sampled, all types in one batch;
  validate the task world judges them (in the sandbox for the python world): invalid, trivial (an output that
           does not depend on the input, or the identity in disguise), valid; a valid task whose program is a
           held-out one (tasks/heldout_protocol.py) teaches nothing: no reward, left out of the proposer's update
           as well as the solver's (a reward would push the model toward writing that program's text);
  solve    S tasks per type (the new valid proposals first, then buffer tasks) get N solver samples
           each, again all types in one batch; the world checks every answer by value;
  score    solver: 1 / 0 / -0.5 (format) / -1 (unparseable); proposer: learnability 1 - solve rate
           (0 at 0 or 1), -0.5 for an invalid or trivial proposal, `duplicate_reward` (0 unless set) for a
           duplicate (a program the run has seen, or one more of a crowded shape); advantages normalised per
           (role, type) (TRR++);
  record   new tasks enter the buffers; the round's figures, the curriculum's among them (distinct programs and
           shapes in the buffer, the solver's rate on the new tasks, their programs' size), go to the metrics,
           and the round's line to selfplay.jsonl (the window's task browser).
The first tasks (`tasks_from`): the world's generated ones (generator), the identity program alone (minimal, as
Absolute Zero starts: the proposer builds the whole curriculum), or the generator's shortest programs (simplest).
Without a proposer (`proposer: false`) a round is solver-only RL on the seed tasks: the same reward and update, so
comparing the two isolates what the proposer adds (from the minimal seed, the solver practises the identity alone:
the floor).
The loss is the REINFORCE++ / PPO-clip policy loss over completion tokens (one update per round, so the
ratio is 1 and clipping only matters when the options ask for more), plus an optional KL to a frozen
reference. Buffers and the round counter are the source's state, saved in every checkpoint; sampling
is seeded by (run seed, round) and each reply by its place in the round, so a resumed run plays the same rounds, and
a run on several processes (each decodes and judges its share of every step's prompts with its own sandbox workers,
then all gather the replies and verdicts and decide alike: rewards, fates, the task buffers) plays those of one.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.heldout import HeldoutSettings, TypeResult, drain, mean_rate, solve_heldout
from desktop_app.engine.events import Log
from desktop_app.engine.method_options import SelfPlayOptions, typed_options
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.objectives.episodes import EpisodeObjective, Part
from desktop_app.engine.selfplay.buffer import TaskBuffer
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch
from desktop_app.engine.selfplay.prompting import default_world
from desktop_app.engine.selfplay.rewards import learnability
from desktop_app.engine.selfplay.rollout import RoundSource
from desktop_app.engine.selfplay.round import (
    DUPLICATE,
    HELD_OUT,
    INVALID,
    NEW,
    TRIVIAL,
    Attempts,
    Decoded,
    Judge,
    Played,
    Proposals,
    Round,
)
from desktop_app.engine.tasks.base import PENALTY_FORMAT, Check, Task, TaskWorld, Validation, get_world
from desktop_app.engine.tasks.heldout_protocol import HeldoutProtocol, program_key, program_shape, programs_in_text

LOG_NAME = "selfplay.jsonl"
SIMPLEST_POOL = 10  # tasks_from simplest: the shortest programs among this many times the tasks asked for


def mean(values: list[float] | list[int]) -> float:
    return sum(values) / max(1, len(values))


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


class SelfPlayObjective(EpisodeObjective):
    name = "selfplay"

    def __init__(self, options: SelfPlayOptions | dict[str, Any] | None = None, world: TaskWorld | None = None):
        super().__init__()
        self._from_config = options is None  # made by the registry: the run config's method_options apply
        self.options: SelfPlayOptions = typed_options(SelfPlayOptions, options, "self-play")
        self.world = world
        self.buffers: dict[str, TaskBuffer] = {t: TaskBuffer() for t in self.options.task_types}
        self.heldout: dict[str, list[Task]] = {}
        self.seed_tasks: dict[str, list[Task]] = {}  # the buffers' first tasks (regenerated alike on resume)
        self.log_path: Path | None = None
        self.protocol: HeldoutProtocol | None = None

    # -- seam ----------------------------------------------------------------------------------------
    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        if ctx.tokenizer is None:
            raise UserError("self-play needs the model's tokenizer")
        if self._from_config and ctx.config.method_options:
            self.options = typed_options(SelfPlayOptions, ctx.config.method_options, "self-play")
            self.buffers = {t: TaskBuffer() for t in self.options.task_types}
        self.attach(ctx, model)
        self.log_path = Path(ctx.run_dir) / LOG_NAME if ctx.processes.rank == 0 else None  # process 0 writes it
        if self.world is None:
            name = default_world(ctx.tokenizer) if self.options.world == "auto" else self.options.world
            self.world = get_world(name, strict=bool(self.options.strict_sandbox), **dict(self.options.world_options))
            self.notes.append(Log("info", f"self-play on the {name} world with {self.prompter.style} prompts"))
        self.protocol = HeldoutProtocol.of_run(self.world, self.options)
        for task_type in self.options.task_types:
            self.seed_tasks[task_type] = seeds = self._seeds(task_type, ctx.seed)
            for task in seeds:
                self.buffers[task_type].add(task)
            self.heldout[task_type] = self.protocol.selection_sets[task_type]
        if float(self.options.kl_coef) > 0:
            self.keep_reference(ctx)

    def _seeds(self, task_type: str, seed: int) -> list[Task]:
        """A buffer's first tasks: the identity program, the user's seed tasks and the world's (`tasks_from`: none
        for minimal, the shortest programs for simplest), none with a held-out program (the user's are dropped with
        a note)."""
        assert self.world is not None and self.protocol is not None
        own = [Task.from_json(s) for s in self.options.seeds if s.get("type") == task_type]
        kept = [t for t in own if not self.protocol.holds(t.program)]
        if len(kept) < len(own):
            self.notes.append(Log("warning", f"{len(own) - len(kept)} of your {task_type} seed tasks use a held-out "
                                  "program; they were left out, so the held-out figures measure unseen programs"))
        return identity_tasks(self.world, task_type) + kept + self._generated(task_type, seed)

    def _generated(self, task_type: str, seed: int) -> list[Task]:
        """The world's seed tasks as `tasks_from` says: seed_tasks_per_type of them (generator), none (minimal), or
        the seed_tasks_per_type shortest programs of SIMPLEST_POOL times as many (simplest)."""
        assert self.world is not None and self.protocol is not None
        count, source = int(self.options.seed_tasks_per_type), self.options.tasks_from
        if source == "minimal" or not count:
            return []
        if source == "generator":
            return self.world.generate(task_type, count, seed, exclude=self.protocol.reserved)
        pool = self.world.generate(task_type, count * SIMPLEST_POOL, seed, exclude=self.protocol.reserved)
        return sorted(pool, key=lambda t: (len(t.program), t.program))[:count]

    def batch_source(self, ctx: TrainContext) -> SelfPlaySource:
        return SelfPlaySource(self)

    # -- a round: propose, validate, solve, score, record ----------------------------------------------
    def play_round(self, round_index: int) -> EpisodeBatch:
        """One round in its named steps (the module's docstring says what each does): its teaching episodes."""
        assert self.world is not None and self.prompter is not None
        rng = self.round_rng(round_index)
        seed = rng.randrange(2**31)
        rnd = Round(round_index)
        proposed = self._validate(rnd, self._propose(rnd, rng, seed)) if self.options.proposer else {}
        attempts = self._solve(rnd, self._solver_tasks(proposed, rng), seed + 104729)
        self._score(rnd, proposed, attempts)
        self._record(rnd, proposed, attempts)
        batch = rnd.batch()
        self.fill_reference(self.mine(batch))
        self.last_rollouts = rnd.rollouts
        self._log(rnd)
        return batch

    def _play_types(self, rnd: Round, prompts: dict[str, list[list[int]]], role: str, seed: int,
                    judge: Judge) -> dict[str, Played]:
        """Every task type's prompts decoded, one batch per line count (types whose replies are cut after different
        line counts apart: one decode per role instead of one per type, a third of the steps), and each reply judged
        by `judge(type, task indices, replies)` (JSON verdicts, one per reply) where it was decoded. On several
        processes each plays its share of the prompts and gathers the others' replies and verdicts, so every process
        holds every type's."""
        assert self.prompter is not None
        units = [(t, i) for t in prompts for i in range(len(prompts[t]))]
        mine = self.processes.share(len(units))
        start = time.perf_counter()
        replies = self._decode_share(prompts, units, mine, role, seed)
        rnd.stats.decode_s += time.perf_counter() - start
        start, verdicts = time.perf_counter(), {}
        for t in prompts:
            own = [u for u in mine if units[u][0] == t]
            found = judge(t, [units[u][1] for u in own], [text for u in own for text in replies[u][1]]) if own else []
            for k, u in enumerate(own):
                verdicts[u] = found[k * len(replies[u][1]):(k + 1) * len(replies[u][1])]
        rnd.stats.check_s += time.perf_counter() - start
        pooled = self.processes.pool([[replies[u][0], verdicts[u]] for u in mine], f"gathering the {role}s' replies")
        codec, out = self.prompter.codec, {t: Played(Decoded(prompts[t], [], []), []) for t in prompts}
        for u, (ids, found) in enumerate(pooled):
            played = out[units[u][0]]
            played.decoded.completion_ids += ids
            played.decoded.texts += replies[u][1] if u in replies else [codec.decode(c) for c in ids]
            played.verdicts += found
        return out

    def _decode_share(self, prompts: dict[str, list[list[int]]], units: list[tuple[str, int]], mine: range,
                      role: str, seed: int) -> dict[int, tuple[list[list[int]], list[str]]]:
        """This process's units (type, prompt) decoded, one decode per line count: each unit's replies' ids and
        texts. Every row's draws come from (seed, its unit, its sample), and each decode's token budget is its whole
        line count group's, so the replies are those one process decodes."""
        assert self.world is not None and self.prompter is not None
        world, prompter = self.world, self.prompter
        samples = 1 if role == "proposer" else int(self.options.solver_samples)
        lines_of = {t: prompter.proposal_lines(world, t) if role == "proposer" else prompter.answer_lines(world, t)
                    for t in prompts}
        out: dict[int, tuple[list[list[int]], list[str]]] = {}
        for lines in sorted(set(lines_of.values())):
            group = [u for u, (t, _) in enumerate(units) if lines_of[t] == lines]
            own = [u for u in group if u in mine]
            checks = [prompter.finished(world.answer_kind(units[u][0])) if role == "solver" else None for u in own]
            part = Part([prompts[units[u][0]][units[u][1]] for u in own], own,
                        max((len(prompts[units[u][0]][units[u][1]]) for u in group), default=0))
            ids, texts = self._sample(part, samples, seed, max_lines=lines,
                                      finished=checks if any(c is not None for c in checks) else None)
            for k, u in enumerate(own):
                out[u] = (ids[k * samples:(k + 1) * samples], texts[k * samples:(k + 1) * samples])
        return out

    def _propose(self, rnd: Round, rng: random.Random, seed: int) -> dict[str, tuple[list[str], Played]]:
        """propose: P proposer prompts per type (K reference tasks each from its buffer), every type's in one
        decode, and the world's verdict on each proposal; per type its prompts and what became of them."""
        assert self.world is not None and self.prompter is not None
        o, world, prompter = self.options, self.world, self.prompter
        prompts = {t: [world.propose_prompt(t, self.buffers[t].sample(int(o.references), rng), rng)
                       for _ in range(o.proposals_per_type)] for t in o.task_types}

        def judge(task_type: str, _indices: list[int], texts: list[str]) -> list[Any]:
            return [v.to_json() for v in world.validate(task_type, [prompter.proposal(text) for text in texts])]

        played = self._play_types(rnd, {t: [prompter.propose_ids(p) for p in prompts[t]] for t in o.task_types},
                                  "proposer", seed, judge)
        return {t: (prompts[t], played[t]) for t in o.task_types}

    def _validate(self, rnd: Round, drafts: dict[str, tuple[list[str], Played]]) -> dict[str, Proposals]:
        """validate: every type's proposals with the world's verdicts, each given its fate (`_fate`: invalid,
        trivial, duplicate, held-out or new)."""
        assert self.world is not None and self.prompter is not None
        start, out = time.perf_counter(), {}
        for t, (prompts, played) in drafts.items():
            texts = [self.prompter.proposal(text) for text in played.decoded.texts]
            verdicts = [Validation.from_json(v) for v in played.verdicts]
            out[t] = proposals = Proposals(prompts, played.decoded, verdicts)
            earlier: list[Task] = []  # this round's new and held-out proposals so far
            for verdict, text in zip(verdicts, texts, strict=True):
                fate, reason = self._fate(t, verdict, earlier) if not self._shows_heldout(text) else \
                    (HELD_OUT, "shows a held-out program: no reward, in no update")
                proposals.fates.append(fate)
                proposals.reasons.append(reason)
            rnd.stats.proposals += len(verdicts)
            rnd.stats.valid += sum(v.valid for v in verdicts)
            rnd.stats.trivial += proposals.fates.count(TRIVIAL)
            rnd.stats.heldout_hits += proposals.fates.count(HELD_OUT)
            rnd.stats.duplicates += proposals.fates.count(DUPLICATE)
        rnd.stats.check_s += time.perf_counter() - start
        return out

    def _shows_heldout(self, text: str) -> bool:
        """Does a proposal's text show a held-out program, valid or not? Any update on it, even a penalty, would
        train on that program's text."""
        return self.protocol is not None and self.protocol.count_in(programs_in_text(text)) > 0

    def _fate(self, task_type: str, verdict: Any, earlier: list[Task]) -> tuple[str, str]:
        """What becomes of one proposal, and why: refused by the world (invalid, trivial); a held-out program: no
        reward, in no update, never a solver task; a program the run has seen (in the buffer, or an `earlier`
        proposal this round) or one more of a shape the buffer (with this round's new tasks) holds
        `max_tasks_per_shape` of: a duplicate, no reward, so repeating one easy program stops paying; else new."""
        task = verdict.task
        if not verdict.valid or task is None:
            return (TRIVIAL if verdict.trivial else INVALID), verdict.reason
        if self.protocol is not None and self.protocol.holds(task.program):
            return HELD_OUT, "a held-out program: no reward, in no update"
        key, buffer = program_key(task.program), self.buffers[task_type]
        if buffer.holds_program(task.program) or any(program_key(t.program) == key for t in earlier):
            return DUPLICATE, "a program this run has seen: no reward"
        earlier.append(task)
        cap, shape = int(self.options.max_tasks_per_shape), program_shape(task.program)
        crowd = buffer.shape_count(task.program) + sum(program_shape(t.program) == shape for t in earlier[:-1])
        if cap and crowd >= cap:
            earlier.pop()
            return DUPLICATE, f"{cap} buffer tasks already share its shape (equal up to constants): no reward"
        return NEW, ""

    def _solver_tasks(self, proposed: dict[str, Proposals], rng: random.Random) -> dict[str, Attempts]:
        """Per type, the tasks that train the solver: its fresh proposals first (their learnability needs a solve
        rate), then buffer tasks."""
        count, out = int(self.options.solver_tasks_per_type), {}
        for t in self.options.task_types:
            fresh = proposed[t].fresh if t in proposed else []
            tasks = (fresh + self._draw(t, count, rng))[: max(count, len(fresh))]
            out[t] = Attempts(tasks, len(fresh), int(self.options.solver_samples))
        return out

    def _solve(self, rnd: Round, attempts: dict[str, Attempts], seed: int) -> dict[str, Attempts]:
        """solve: every type's tasks, N answers each, in one decode; the world checks every answer by value."""
        assert self.world is not None and self.prompter is not None
        world, prompter, n = self.world, self.prompter, int(self.options.solver_samples)

        def judge(task_type: str, indices: list[int], texts: list[str]) -> list[Any]:
            tasks = [attempts[task_type].tasks[j] for j in indices]
            return [c.to_json() for c in world.check([task for task in tasks for _ in range(n)],
                                                     [prompter.answer(world, tasks[i // n], a)
                                                      for i, a in enumerate(texts)])]

        played = self._play_types(rnd, {t: [prompter.solve_ids(world, task) for task in a.tasks]
                                        for t, a in attempts.items()}, "solver", seed, judge)
        for t, answers in played.items():
            attempts[t].replies = answers.decoded
            attempts[t].checks = [Check.from_json(c) for c in answers.verdicts]
        return attempts

    def _score(self, rnd: Round, proposed: dict[str, Proposals], attempts: dict[str, Attempts]) -> None:
        """score: per type, the solver's answers, then the proposals (rewarded by how their tasks were solved)."""
        for task_type, tried in attempts.items():
            self._score_solver(rnd, task_type, tried)
            if task_type in proposed:
                self._score_proposer(rnd, task_type, proposed[task_type], tried.rate_by_task())

    def _score_solver(self, rnd: Round, task_type: str, tried: Attempts) -> None:
        """score the solver: 1 / 0 / -0.5 / -1 per answer, an episode each."""
        assert self.world is not None and tried.replies is not None
        replies, n = tried.replies, tried.samples
        per_task = self.options.solver_baseline != "type"  # the advantage's baseline: per task, else per type
        for j, task in enumerate(tried.tasks):
            for m, check in enumerate(tried.checks[j * n:(j + 1) * n]):
                i = j * n + m
                key = ("solver", task_type, str(j)) if per_task else ("solver", task_type)
                rnd.add(Episode(replies.prompt_ids[j], replies.completion_ids[i], 0.0, "solver", task_type),
                        check.reward, key)
                rnd.stats.format_errors += check.status in ("format", "unparseable")
                rnd.stats.answers += 1
                if m == 0:
                    rnd.rollouts.append({"role": "solver", "type": task_type, "prompt": self.world.solve_prompt(task),
                                         "answer": replies.texts[i], "verdict": check.status,
                                         "reward": check.reward, "reason": check.reason})

    def _score_proposer(self, rnd: Round, task_type: str, proposals: Proposals, rates: dict[int, float]) -> None:
        """score the proposer: learnability (1 - solve rate; 0 at 0 or 1) for a new task, `duplicate_reward` for a
        duplicate, the format penalty for an invalid or trivial one; a held-out program is left out of the update."""
        decoded = proposals.decoded
        for i, (verdict, fate, reason) in enumerate(zip(proposals.verdicts, proposals.fates, proposals.reasons,
                                                        strict=True)):
            refused = fate in (INVALID, TRIVIAL) or verdict.task is None
            rate = None if refused or fate == DUPLICATE else rates.get(id(verdict.task))
            reward = PENALTY_FORMAT if refused else self.options.duplicate_reward if fate == DUPLICATE else (
                learnability(rate) if rate is not None else 0.0)
            proposals.rates.append(rate)
            proposals.rewards.append(reward)
            episode = Episode(decoded.prompt_ids[i], decoded.completion_ids[i], 0.0, "proposer", task_type)
            if fate == HELD_OUT:  # teaches nothing, not even through an advantage the group's other rewards give it
                rnd.stats.generated_tokens += len(episode.completion)
            else:
                rnd.add(episode, reward, ("proposer", task_type))
            rnd.rollouts.append({"role": "proposer", "type": task_type, "prompt": proposals.prompts[i],
                                 "answer": decoded.texts[i], "verdict": fate, "reward": reward, "reason": reason})

    def _record(self, rnd: Round, proposed: dict[str, Proposals], attempts: dict[str, Attempts]) -> None:
        """record: per type, new tasks enter the buffer and every proposal its history (the task browser's); then
        the type's figures of the round."""
        for task_type, tried in attempts.items():
            if task_type in proposed:
                self._record_proposals(rnd, task_type, proposed[task_type])
            self._type_stats(rnd, task_type, tried)

    def _record_proposals(self, rnd: Round, task_type: str, proposals: Proposals) -> None:
        buffer, texts = self.buffers[task_type], proposals.decoded.texts
        for i, (verdict, fate, reason) in enumerate(zip(proposals.verdicts, proposals.fates, proposals.reasons,
                                                        strict=True)):
            task, reward = verdict.task, proposals.rewards[i]
            if fate in (INVALID, TRIVIAL) or task is None:
                buffer.record({"round": rnd.index, "type": task_type, "program": texts[i][:300],
                               "verdict": fate, "reason": reason, "reward": reward})
                continue
            if fate == NEW:
                buffer.add(task)
            buffer.record({"round": rnd.index, "type": task_type, "program": task.program,
                           "inputs": list(task.inputs), "outputs": list(task.outputs), "verdict": fate,
                           "solve_rate": proposals.rates[i], "reward": reward,
                           **({"reason": reason} if reason else {})})

    def _type_stats(self, rnd: Round, task_type: str, tried: Attempts) -> None:
        """A type's figures of the round: mean rewards per role, solve rate and learnability of the solver's tasks,
        and the curriculum: the buffer's size, distinct programs and distinct shapes (programs equal up to
        constants), the solver's rate on the proposer's new tasks (at the frontier when neither 0 nor 1) and the
        size of their programs (characters)."""
        by_role: dict[str, list[float]] = {"solver": [], "proposer": []}
        for episode, reward in zip(rnd.episodes, rnd.rewards, strict=True):
            if episode.task_type == task_type:
                by_role[episode.role].append(reward)
        buffer, stats, rates = self.buffers[task_type], rnd.stats.by_type, tried.rates()
        stats[f"reward/solver/{task_type}"] = mean(by_role["solver"])
        if self.options.proposer:
            stats[f"reward/proposer/{task_type}"] = mean(by_role["proposer"])
        stats[f"solve_rate/{task_type}"] = mean(rates)
        stats[f"learnability/{task_type}"] = mean([learnability(r) for r in rates])
        stats[f"buffer/{task_type}"] = float(len(buffer))
        stats[f"programs/{task_type}"] = float(buffer.distinct_programs)
        stats[f"shapes/{task_type}"] = float(buffer.distinct_shapes)
        if tried.fresh:
            stats[f"new_task_solve_rate/{task_type}"] = mean(rates[: tried.fresh])
            stats[f"program_size/{task_type}"] = mean([len(t.program) for t in tried.tasks[: tried.fresh]])

    def _draw(self, task_type: str, count: int, rng: random.Random) -> list[Task]:
        """Buffer tasks for the solver: from the whole buffer, or a `seed_share` of them from the seed tasks (all of
        them without a proposer: solver-only RL on the seed tasks; none from the minimal seed with a proposer)."""
        share = float(self.options.seed_share) if self.options.proposer else 1.0
        if self.options.proposer and self.options.tasks_from == "minimal":
            share = 0.0  # the seed is the identity alone: the proposer's buffer is the whole practice
        buffer = self.buffers[task_type]
        if not share:
            return buffer.sample(count, rng)
        out = []
        for _ in range(count):
            pool = self.seed_tasks.get(task_type) if rng.random() < share else None
            pool = pool or buffer.tasks
            if pool:
                out.append(pool[rng.randrange(len(pool))])
        return out

    def _log(self, rnd: Round) -> None:
        """One JSON line per round for the window's task browser (a view; checkpoints hold the real state): the
        rollouts, the proposals with their fate, and the round's buffer figures."""
        if self.log_path is None:
            return
        proposals = [entry for b in self.buffers.values() for entry in b.history if entry["round"] == rnd.index]
        figures = {"proposals": rnd.stats.proposals, "trivial": rnd.stats.trivial,
                   "heldout_hits": rnd.stats.heldout_hits, "duplicates": rnd.stats.duplicates,
                   "programs": {t: b.distinct_programs for t, b in self.buffers.items()},
                   "shapes": {t: b.distinct_shapes for t, b in self.buffers.items()},
                   "tasks": {t: len(b) for t, b in self.buffers.items()}}
        line = json.dumps({"round": rnd.index, "rollouts": rnd.rollouts, "proposals": proposals, "buffers": figures})
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

    # -- evaluation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Greedy solve rate per type on the fixed held-out tasks; val_loss = 1 - their mean (best / early stop). Each
        process solves its share of every type's tasks and the counts are gathered."""
        assert self.world is not None and self.prompter is not None
        settings = HeldoutSettings(max_len=self.max_len, max_new_tokens=int(self.options.max_new_tokens))
        mine = {t: [tasks[i] for i in self.processes.share(len(tasks))] for t, tasks in self.heldout.items()}
        solved = drain(solve_heldout(model, self.prompter, self.world, mine, settings))
        counts = self.processes.pool([[t, solved[t].n, solved[t].solved] if t in solved else [t, 0, 0]
                                      for t in self.heldout], "gathering held-out results")  # one entry per type each
        results = {t: TypeResult(t, sum(n for u, n, _ in counts if u == t), sum(k for u, _, k in counts if u == t))
                   for t in self.heldout if any(u == t and n for u, n, _ in counts)}
        out = {f"heldout_solve_rate/{t}": r.rate for t, r in results.items()}
        out["heldout_solve_rate"] = mean_rate(results)
        out["val_loss"] = 1.0 - out["heldout_solve_rate"]
        return out

    def stalled(self, evaluations: int, best_val_loss: float) -> str:
        return (f"the held-out solve rate has not risen for {evaluations} evaluations (best "
                f"{1.0 - best_val_loss:.3f}, mean over the task types)")

    def close(self) -> None:
        if self.world is not None:
            self.world.close()


IDENTITY_PROGRAMS = {"mini": "f = lambda x: x", "python": "def f(x):\n    return x\n"}
IDENTITY_INPUTS = {"mini": {"single": ("[1, 2, 3]",), "induction": ("[1]", "[2, 3]", "[4, 5, 6]", "[7, 8]")},
                   "python": {"single": ("[1, 2, 3]",), "induction": ("1", "[2, 3]", "'ab'", "4")}}


def identity_tasks(world: TaskWorld, task_type: str) -> list[Task]:
    """The identity program as the first task of every buffer (the Absolute Zero seed). Written out here: the
    world refuses the identity from a proposer as trivial."""
    program, inputs = IDENTITY_PROGRAMS.get(world.name), IDENTITY_INPUTS.get(world.name, {})
    if program is None:
        return []
    given = inputs["induction" if task_type == "induction" else "single"]
    induction = task_type == "induction"
    return [Task(world.name, task_type, program, given, given, "identity" if induction and world.name == "python"
                 else "", len(given) // 2 if induction else 0)]
