"""Absolute Zero self-play as an objective of the one training loop.

Each optimizer step, the batch source plays one round with the current model, in named steps:
  propose  for every task type, P proposer prompts (K reference tasks from that type's buffer) are
           sampled, all types in one batch;
  validate the task world judges them (in the sandbox for the python world): invalid, trivial (an output that
           does not depend on the input, or the identity in disguise), valid; a valid task whose program is a
           held-out one (tasks/heldout_protocol.py) is judged and rewarded but never becomes a solver task;
  solve    S tasks per type (the new valid proposals first, then buffer tasks) get N solver samples
           each, again all types in one batch; the world checks every answer by value;
  score    solver: 1 / 0 / -0.5 (format) / -1 (unparseable); proposer: learnability 1 - solve rate
           (0 at 0 or 1), -0.5 for an invalid or trivial proposal, 0 for a duplicate (a program the run has seen,
           or one more of a crowded shape); advantages normalised per (role, type) (TRR++);
  record   new tasks enter the buffers; the round's line goes to selfplay.jsonl (the window's task browser).
Without a proposer (`proposer: false`) a round is solver-only RL on the world's generated seed tasks: the same
reward and update, so comparing the two isolates what the proposer adds.
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
from desktop_app.engine.evaluate.heldout import drain, mean_rate, solve_heldout
from desktop_app.engine.events import Log
from desktop_app.engine.generate.runners import forget_prepared_weights
from desktop_app.engine.method_options import SelfPlayOptions, typed_options
from desktop_app.engine.objectives.base import Objective, TrainContext, context_of
from desktop_app.engine.selfplay.buffer import TaskBuffer
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch, make_reference, policy_loss, reference_logps
from desktop_app.engine.selfplay.prompting import TaskPrompter, default_world, make_prompter
from desktop_app.engine.selfplay.rewards import learnability
from desktop_app.engine.selfplay.rollout import RoundSource, sample_completions
from desktop_app.engine.selfplay.round import DUPLICATE, HELD_OUT, INVALID, NEW, TRIVIAL, Decoded, Proposals, Round
from desktop_app.engine.tasks.base import PENALTY_FORMAT, Task, TaskWorld, get_world
from desktop_app.engine.tasks.heldout_protocol import HeldoutProtocol, program_key, program_shape

LOG_NAME = "selfplay.jsonl"


class SelfPlaySource(RoundSource):
    """Self-play rounds; the task buffers travel with the round in every checkpoint."""

    def __init__(self, objective: SelfPlayObjective):
        super().__init__(objective.play_round)
        self.o = objective

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "buffers": {t: b.state_dict() for t, b in self.o.buffers.items()},
                "proposed_heldout": sorted(self.o.proposed_heldout)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.o.proposed_heldout = set(state.get("proposed_heldout", []))
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
        self.protocol: HeldoutProtocol | None = None
        self.proposed_heldout: set[str] = set()  # held-out programs proposed so far (a repeat earns nothing)

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
        self.protocol = HeldoutProtocol.of_run(self.world, self.options)
        for task_type in self.options.task_types:
            self.seed_tasks[task_type] = seeds = self._seeds(task_type, ctx.seed)
            for task in seeds:
                self.buffers[task_type].add(task)
            self.heldout[task_type] = self.protocol.selection_sets[task_type]
        if float(self.options.kl_coef) > 0:
            self.reference = make_reference(ctx.adapter, ctx.load_reference)

    def _seeds(self, task_type: str, seed: int) -> list[Task]:
        """A buffer's first tasks: the identity program, the user's seed tasks and the world's generated ones, none
        with a held-out program (the user's are dropped with a note)."""
        assert self.world is not None and self.protocol is not None
        own = [Task.from_json(s) for s in self.options.seeds if s.get("type") == task_type]
        kept = [t for t in own if not self.protocol.holds(t.program)]
        if len(kept) < len(own):
            self.notes.append(Log("warning", f"{len(own) - len(kept)} of your {task_type} seed tasks use a held-out "
                                  "program; they were left out, so the held-out figures measure unseen programs"))
        generated = self.world.generate(task_type, int(self.options.seed_tasks_per_type), seed,
                                        exclude=self.protocol.reserved)
        return identity_tasks(self.world, task_type) + kept + generated

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
                finished: Any = None) -> tuple[list[list[int]], list[str]]:
        """`samples` replies to each prompt: their ids and texts (prompt-major)."""
        assert self.model is not None and self.prompter is not None
        codec = self.prompter.codec
        ids = sample_completions(self.model, encoded, samples=samples,
                                 max_new_tokens=int(self.options.max_new_tokens),
                                 temperature=float(self.options.temperature), top_p=float(self.options.top_p),
                                 seed=seed, stop_ids=self.prompter.stop_ids, max_len=self.max_len,
                                 newline_ids=codec.newline_ids() if max_lines else set(), max_lines=max_lines,
                                 finished=finished, tokens=codec.vocab_size())
        return ids, [codec.decode(c) for c in ids]

    def _sample_types(self, prompts: dict[str, list[list[int]]], samples: int, seed: int,
                      role: str) -> dict[str, Decoded]:
        """Every task type's prompts decoded in one batch (types whose replies are cut after different line counts
        apart); per type its prompts' decode. One decode per role instead of one per type: a round's decoding
        costs a third of the steps."""
        assert self.world is not None and self.prompter is not None
        world, prompter = self.world, self.prompter
        by_lines: dict[int, list[str]] = {}
        for task_type in prompts:
            lines = prompter.proposal_lines(world, task_type) if role == "proposer" else \
                prompter.answer_lines(world, task_type)
            by_lines.setdefault(lines, []).append(task_type)
        out: dict[str, Decoded] = {}
        for group, (lines, types) in enumerate(sorted(by_lines.items())):
            encoded = [ids for t in types for ids in prompts[t]]
            checks = [prompter.finished(world.answer_kind(t)) if role == "solver" else None
                      for t in types for _ in prompts[t]]
            ids, texts = self._sample(encoded, samples, seed + 7919 * group, max_lines=lines,
                                      finished=checks if any(c is not None for c in checks) else None)
            decoded, at = Decoded(encoded, ids, texts), 0
            for t in types:
                out[t] = decoded.part(at, len(prompts[t]), samples)
                at += len(prompts[t])
        return out

    # -- a round: propose, validate, solve, score, record ----------------------------------------------
    def play_round(self, round_index: int) -> EpisodeBatch:
        assert self.world is not None and self.prompter is not None
        rng = random.Random(f"{self.seed}-selfplay-{round_index}")
        forget_prepared_weights(self.model)  # the optimizer changed the weights in place since the last round
        seed = rng.randrange(2**31)
        rnd = Round(round_index)
        proposed = self._propose(rnd, rng, seed) if self.options.proposer else {}
        # per type: the tasks that train the solver, then the held-out hits (solved to reward the proposer only)
        trained = {t: self._solver_tasks(t, proposed.get(t), rng) for t in self.options.task_types}
        tasks = {t: trained[t] + (proposed[t].judged if t in proposed else []) for t in trained}
        solved = self._solve(rnd, tasks, seed + 104729)
        for task_type, solver_tasks in tasks.items():
            rates = self._score_solver(rnd, task_type, solver_tasks, solved[task_type], len(trained[task_type]))
            if task_type in proposed:
                self._score_proposer(rnd, task_type, proposed[task_type],
                                     {id(t): r for t, r in zip(solver_tasks, rates, strict=True)})
            self._type_stats(rnd, task_type, rates[: len(trained[task_type])])
        batch = rnd.batch()
        if self.reference is not None:
            reference_logps(self.reference, list(batch), model=self.model)
        self.last_rollouts = rnd.rollouts
        self._log(rnd)
        return batch

    def _propose(self, rnd: Round, rng: random.Random, seed: int) -> dict[str, Proposals]:
        """propose + validate: every type's proposals in one decode, judged by the world, each given its fate
        (`_fate`: invalid, trivial, duplicate, held-out or new)."""
        assert self.world is not None and self.prompter is not None
        o, world, prompter = self.options, self.world, self.prompter
        prompts = {t: [world.propose_prompt(t, self.buffers[t].sample(int(o.references), rng), rng)
                       for _ in range(o.proposals_per_type)] for t in o.task_types}
        start = time.perf_counter()
        decoded = self._sample_types({t: [prompter.propose_ids(p) for p in prompts[t]] for t in o.task_types}, 1,
                                     seed, "proposer")
        checked = time.perf_counter()
        out = {}
        for t in o.task_types:
            verdicts = world.validate(t, [prompter.proposal(text) for text in decoded[t].texts])
            out[t] = proposals = Proposals(prompts[t], decoded[t], verdicts)
            earlier: list[Task] = []  # this round's new and held-out proposals so far
            for verdict in verdicts:
                fate, reason = self._fate(t, verdict, earlier)
                proposals.fates.append(fate)
                proposals.reasons.append(reason)
            rnd.stats.proposals += len(verdicts)
            rnd.stats.valid += sum(v.valid for v in verdicts)
            rnd.stats.trivial += proposals.fates.count(TRIVIAL)
            rnd.stats.heldout_hits += proposals.fates.count(HELD_OUT)
            rnd.stats.duplicates += proposals.fates.count(DUPLICATE)
        rnd.stats.decode_s += checked - start
        rnd.stats.check_s += time.perf_counter() - checked
        return out

    def _fate(self, task_type: str, verdict: Any, earlier: list[Task]) -> tuple[str, str]:
        """What becomes of one proposal, and why: refused by the world (invalid, trivial); a program the run has
        seen (in the buffer, proposed before, or by an `earlier` proposal this round) or one more of a shape the
        buffer (with this round's new tasks) holds `max_tasks_per_shape` of: a duplicate, no reward, so repeating
        one easy program stops paying; a held-out program: judged and rewarded once, never a solver task; else new."""
        task = verdict.task
        if not verdict.valid or task is None:
            return (TRIVIAL if verdict.trivial else INVALID), verdict.reason
        key, buffer = program_key(task.program), self.buffers[task_type]
        if key in self.proposed_heldout or buffer.holds_program(task.program) \
                or any(program_key(t.program) == key for t in earlier):
            return DUPLICATE, "a program this run has seen: no reward"
        earlier.append(task)
        if self.protocol is not None and self.protocol.holds(task.program):
            self.proposed_heldout.add(key)
            return HELD_OUT, "a held-out program: rewarded once, never a solver task"
        cap, shape = int(self.options.max_tasks_per_shape), program_shape(task.program)
        crowd = buffer.shape_count(task.program) + sum(program_shape(t.program) == shape for t in earlier[:-1])
        if cap and crowd >= cap:
            earlier.pop()
            return DUPLICATE, f"{cap} buffer tasks already share its shape (equal up to constants): no reward"
        return NEW, ""

    def _solver_tasks(self, task_type: str, proposals: Proposals | None, rng: random.Random) -> list[Task]:
        """The type's tasks that train the solver: its fresh proposals first (their learnability needs a solve
        rate), then buffer tasks."""
        count = int(self.options.solver_tasks_per_type)
        fresh = proposals.fresh if proposals is not None else []
        return (fresh + self._draw(task_type, count, rng))[: max(count, len(fresh))]

    def _solve(self, rnd: Round, tasks: dict[str, list[Task]], seed: int) -> dict[str, tuple[Decoded, list[Any]]]:
        """solve: every type's tasks, N answers each, in one decode; the world checks every answer by value."""
        assert self.world is not None and self.prompter is not None
        world, prompter, n = self.world, self.prompter, int(self.options.solver_samples)
        start = time.perf_counter()
        decoded = self._sample_types({t: [prompter.solve_ids(world, task) for task in tasks[t]] for t in tasks}, n,
                                     seed, "solver")
        rnd.stats.decode_s += time.perf_counter() - start
        out = {}
        for t, replies in decoded.items():
            start = time.perf_counter()
            out[t] = (replies, world.check([task for task in tasks[t] for _ in range(n)],
                                           [prompter.answer(world, tasks[t][i // n], a)
                                            for i, a in enumerate(replies.texts)]))
            rnd.stats.check_s += time.perf_counter() - start
        return out

    def _score_solver(self, rnd: Round, task_type: str, tasks: list[Task], solved: tuple[Decoded, list[Any]],
                      trained: int) -> list[float]:
        """score the solver: 1 / 0 / -0.5 / -1 per answer, an episode each for the first `trained` tasks (none for
        the held-out hits after them); returns each task's solve rate."""
        assert self.world is not None
        replies, checks = solved
        n, o = int(self.options.solver_samples), self.options
        rates: list[float] = []
        for j, task in enumerate(tasks):
            group = checks[j * n:(j + 1) * n]
            rates.append(sum(c.correct for c in group) / n)
            if j >= trained:  # a held-out program a proposer wrote: solved only to reward the proposer
                rnd.stats.generated_tokens += sum(len(c) for c in replies.completion_ids[j * n:(j + 1) * n])
                continue
            for m, check in enumerate(group):
                i = j * n + m
                key = ("solver", task_type) if o.solver_baseline == "type" else ("solver", task_type, str(j))
                rnd.add(Episode(replies.prompt_ids[j], replies.completion_ids[i], 0.0, "solver", task_type),
                        check.reward, key)
                rnd.stats.format_errors += check.status in ("format", "unparseable")
                rnd.stats.answers += 1
                if m == 0:
                    rnd.rollouts.append({"role": "solver", "type": task_type, "prompt": self.world.solve_prompt(task),
                                         "answer": replies.texts[i], "verdict": check.status,
                                         "reward": check.reward, "reason": check.reason})
        return rates

    def _score_proposer(self, rnd: Round, task_type: str, proposals: Proposals, rates: dict[int, float]) -> None:
        """score and record the proposer: learnability (1 - solve rate; 0 at 0 or 1) for a new task or a held-out
        program's first proposal, nothing for a duplicate, the format penalty for an invalid or trivial one; new
        tasks enter the buffer."""
        buffer, decoded = self.buffers[task_type], proposals.decoded
        for i, (verdict, fate, reason) in enumerate(zip(proposals.verdicts, proposals.fates, proposals.reasons,
                                                        strict=True)):
            task = verdict.task
            if fate in (INVALID, TRIVIAL) or task is None:
                reward = PENALTY_FORMAT
                buffer.record({"round": rnd.index, "type": task_type, "program": decoded.texts[i][:300],
                               "verdict": fate, "reason": reason, "reward": reward})
            else:
                rate = rates.get(id(task)) if fate != DUPLICATE else None
                reward = learnability(rate) if rate is not None else 0.0
                if fate == NEW:
                    buffer.add(task)
                buffer.record({"round": rnd.index, "type": task_type, "program": task.program,
                               "inputs": list(task.inputs), "outputs": list(task.outputs), "verdict": fate,
                               "solve_rate": rate, "reward": reward, **({"reason": reason} if reason else {})})
            rnd.add(Episode(decoded.prompt_ids[i], decoded.completion_ids[i], 0.0, "proposer", task_type), reward,
                    ("proposer", task_type))
            rnd.rollouts.append({"role": "proposer", "type": task_type, "prompt": proposals.prompts[i],
                                 "answer": decoded.texts[i], "verdict": fate, "reward": reward, "reason": reason})

    def _type_stats(self, rnd: Round, task_type: str, rates: list[float]) -> None:
        """A type's figures of the round: mean rewards per role, solve rate and learnability of the trained tasks,
        the buffer's size, distinct programs and distinct shapes (programs equal up to constants)."""
        by_role: dict[str, list[float]] = {"solver": [], "proposer": []}
        for episode, reward in zip(rnd.episodes, rnd.rewards, strict=True):
            if episode.task_type == task_type:
                by_role[episode.role].append(reward)
        buffer, stats = self.buffers[task_type], rnd.stats.by_type
        stats[f"reward/solver/{task_type}"] = sum(by_role["solver"]) / max(1, len(by_role["solver"]))
        if self.options.proposer:
            stats[f"reward/proposer/{task_type}"] = sum(by_role["proposer"]) / max(1, len(by_role["proposer"]))
        stats[f"solve_rate/{task_type}"] = sum(rates) / max(1, len(rates))
        stats[f"learnability/{task_type}"] = sum(learnability(r) for r in rates) / max(1, len(rates))
        stats[f"buffer/{task_type}"] = float(len(buffer))
        stats[f"programs/{task_type}"] = float(buffer.distinct_programs)
        stats[f"shapes/{task_type}"] = float(buffer.distinct_shapes)

    def _draw(self, task_type: str, count: int, rng: random.Random) -> list[Task]:
        """Buffer tasks for the solver: from the whole buffer, or a `seed_share` of them from the seed tasks (all of
        them without a proposer: solver-only RL on the world's generated tasks)."""
        share = float(self.options.seed_share) if self.options.proposer else 1.0
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
