"""The complete demonstration of self-play, within a time budget, every curve live.

From scratch (the CPU demo): seed corpus of the mini world -> tokenizer + dataset -> pretrain the tiny preset
(stops on validation loss or its share of the time, and hands on its best checkpoint) -> Absolute Zero self-play
from that checkpoint for the rest of the time -> optionally (`control=True`) the controls, each for self-play's wall
time from the same checkpoint:
  solver-only RL   the same reward and update with no proposer, on the world's generated tasks
                   (`solver_rl_generator`), and, when self-play starts from another seed (`tasks_from` minimal: the
                   identity program alone, as Absolute Zero starts; or simplest), on that same seed alone
                   (`solver_rl_minimal`: the floor); the differences are what the proposer (Absolute Zero's idea) adds;
  continued pretraining on the seed corpus: what simply training longer gives.
From a base model (`base=`: any chat model, e.g. on a GPU): self-play from it directly (the python world by
default); the controls are solver-only RL and supervised fine-tuning on the world's generated tasks.

Held-out protocol (tasks/heldout_protocol.py): every model is measured on one reported set per type (DEMO_EVAL,
seed 9002); self-play and solver-only RL pick their best checkpoint and stop early on a selection set (seed 9001)
drawn with the reported programs left out. The programs of both sets are in no training stream: not in the corpus,
the seed tasks, the proposer's tasks that reach the solver, nor the controls' data.
Measured: the base, self-play's final checkpoint and its best by the selection set, each control's final
checkpoint. Results go to each run folder's evaluations file, and the demo ends with Finished(step=the self-play
run's last step, result={"before", "final", "best", "solver_rl_generator", ..., "control": {task type: solve rate},
"curriculum": {task type: what the proposer built}, ...}).
The phases are real runs (run.json: pretraining, objective "selfplay" with its method options, the controls'),
so the window and the Library show each with its method.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log, ModelEvaluated, Progress
from desktop_app.engine.method_options import TASK_TYPES, SelfPlayOptions
from desktop_app.engine.run_folder import read_metrics, tail_records
from desktop_app.engine.specs import DataSpec, RunConfig, TrainSpec
from desktop_app.engine.tasks import get_world
from desktop_app.engine.tasks.heldout_protocol import REPORTED_SEED, SELECTION_SEED, HeldoutProtocol

DEMO_WORLD = {"references": 2}  # mini's default depth (2): programs a tiny model learns within minutes
HELDOUT_SEEDS = [SELECTION_SEED, REPORTED_SEED]  # programs of both sets stay out of every training stream
# Half the solver's tasks come from 1,000 generated seed tasks per type (the kind the held-out sets hold), the rest
# from the whole buffer (the proposer's tasks). From the same three bases and time, mean held-out gains: the whole
# buffer with 64 seeds +0.03 / +0.07 / +0.06, half from those 64 +0.03 / +0.11 / +0.08, half from 1,000 (no seed
# practised ~75 times) +0.05 / +0.15 / +0.10 (README: the demo table).
DEMO_SELFPLAY = {"world": "mini", "world_options": DEMO_WORLD, "proposals_per_type": 2, "solver_tasks_per_type": 6,
                 "solver_samples": 4, "max_new_tokens": 40, "heldout_per_type": 200, "heldout_seed": SELECTION_SEED,
                 "seed_tasks_per_type": 1000, "seed_share": 0.5, "exclude_heldout": HELDOUT_SEEDS}
DEMO_EVAL = {"per_type": 400, "heldout_seed": REPORTED_SEED}  # the reported figures: the `eval` verb's default set
PRETRAIN = {"batch_size": 32, "lr": 3e-3, "warmup_steps": 50, "schedule": "constant", "eval_every": 100,
            "save_every": 100, "keep_last": 2, "early_stopping_patience": 5, "sample_tokens": 0}
# Robust to the end: the learning rate anneals to 0 over the phase's time limit (at a constant 2e-4 a late update
# collapsed one seed in three: entropy 0.3 -> 1.9 after ~1,450 steps; annealed, the same start rose to its end), and
# the phase stops when its own held-out solve rate has not risen for 12 evaluations (600 steps: a guard against a
# collapse, long enough not to cut off the gains the annealed end still brings). All cores, as pretraining and the
# control use (one thread ran a step in 360 ms here, two in 226 ms).
SELFPLAY_TRAIN = {"batch_size": 64, "micro_batch_size": 32, "lr": 2e-4, "warmup_steps": 5, "schedule": "cosine",
                  "min_lr_ratio": 0.0, "early_stopping_patience": 12, "eval_every": 50, "save_every": 50,
                  "keep_last": 2, "sample_tokens": 0, "log_every": 1, "grad_clip": 1.0, "threads": 0}
# A base model (a real chat model; on a GPU): fewer, longer rollouts, a smaller selection set, both cores.
BASE_SELFPLAY = {"world": "auto", "proposals_per_type": 2, "solver_tasks_per_type": 4, "solver_samples": 4,
                 "max_new_tokens": 128, "heldout_per_type": 50, "heldout_seed": SELECTION_SEED,
                 "seed_tasks_per_type": 64, "exclude_heldout": HELDOUT_SEEDS}
BASE_TRAIN = {"batch_size": 32, "micro_batch_size": 8, "lr": 5e-6, "eval_every": 20, "save_every": 20, "threads": 0}
BASE_EVAL = {"per_type": 0, "heldout_seed": REPORTED_SEED}  # the world's default count (python: 100 per type)
CONTROL_LR = 1e-3  # continued pretraining anneals from here to 0 over the control's time (the strongest plain use)
# What each figure of the summary measures, and the controls in the order they run.
ARMS = {"before": "the base", "final": "self-play's final checkpoint",
        "best": "self-play's best checkpoint by its selection set",
        "solver_rl_minimal": "solver-only RL on the identity program alone (the floor), final checkpoint",
        "solver_rl_simplest": "solver-only RL on the generator's simplest tasks, final checkpoint",
        "solver_rl_generator": "solver-only RL on the world's generated tasks, final checkpoint",
        "control": "the plain-training control's final checkpoint"}


def control_arms(tasks_from: str) -> list[tuple[str, str]]:
    """The controls in the order they run: (arm, what it is in words)."""
    arms = [("solver_rl_generator", "solver-only RL on the world's generated tasks (no proposer)"),
            ("control", "continued pretraining on the seed corpus")]
    if tasks_from != "generator":
        arms.insert(0, (f"solver_rl_{tasks_from}", f"solver-only RL from self-play's own seed ({tasks_from}; no "
                        "proposer)"))
    return arms


@dataclass
class DemoSettings:
    """What run_demo does besides its time budget (`minutes`).

    From scratch (no `base`): a seed corpus of `corpus_tasks` tasks, and pretraining for up to `pretrain_share` of
    the time. `pretrain_steps` / `selfplay_steps` cap the phases by steps as well (tests use them for a seeded run
    that does not depend on the machine's speed); `eval_every` (0: the recipe's) sets how often self-play measures
    and saves. `control`: also run the controls, each for self-play's wall time. `base`: self-play from this model
    instead (`world`: its task world; the world's default otherwise). `tasks_from`: self-play's first tasks
    (generator, minimal: the identity alone, simplest). `selfplay_options`, `train_overrides` and `eval_options`
    override the recipe's method options, TrainSpec fields and held-out evaluation."""

    seed: int = 0
    corpus_tasks: int = 12000
    pretrain_share: float = 0.5
    selfplay_options: dict[str, Any] | None = None
    pretrain_steps: int = 100_000
    selfplay_steps: int = 100_000
    eval_every: int = 0
    train_overrides: dict[str, Any] | None = None
    control: bool = False
    base: str = ""
    world: str = ""
    device: str = "auto"
    eval_options: dict[str, Any] | None = None
    tasks_from: str = ""


def demo_plan(minutes: float, settings: DemoSettings | None = None) -> list[str]:
    """What the demo runs, in the order it runs it, in words (the window shows this in place of the form)."""
    settings = settings or DemoSettings()
    steps = []
    if not settings.base:
        pretrain = minutes * settings.pretrain_share
        steps += [f"writes a seed corpus of {settings.corpus_tasks:,} mini-world programs with their runs (the "
                  "held-out programs left out)",
                  f"prepares it into a dataset and pretrains the tiny preset on it for up to {pretrain:.1f} min"]
    world = settings.world or ("the base's task world" if settings.base else "the mini world")
    steps += [f"measures the {'base' if settings.base else 'pretrained'} model on {world}'s held-out tasks "
              "(deduction, abduction, induction)",
              "self-play (Absolute Zero) for the remaining time: the model proposes programs, solves them, and "
              "learns from rewards the sandbox checks",
              "measures the final and the best checkpoint on the same held-out tasks"]
    if settings.control:
        plain = "fine-tuning on generated tasks" if settings.base else "continued pretraining"
        words = [plain if arm == "control" else what for arm, what in control_arms(settings.tasks_from or "generator")]
        steps.append(f"runs the controls ({'; '.join(words)}), each for self-play's wall time")
    return [f"{i}. {step}" for i, step in enumerate(steps, 1)]


def run_demo(out_dir: str | Path, *, minutes: float = 15.0, controls: Controls | None = None,
             settings: DemoSettings | None = None, **options: Any) -> Iterator[Event]:
    """The demo within `minutes` (from scratch, pretraining gets up to settings.pretrain_share of it; the controls,
    when asked, the self-play phase's wall time on top). `settings`, or its fields as keywords (seed=..., base=...);
    an unknown keyword is a TypeError, as for any call."""
    settings = replace(settings or DemoSettings(), **options)
    return _demo(Path(out_dir).expanduser(), minutes, controls or Controls(), settings)


def _demo(out: Path, minutes: float, controls: Controls, settings: DemoSettings) -> Iterator[Event]:
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: choose a new folder for the demo")
    if minutes <= 0.5:
        raise UserError("give the demo at least a minute (--minutes)")
    base = settings.base
    if base and not Path(base).expanduser().exists():
        raise UserError(f"base model {base} does not exist (give a run, checkpoint, export or Hugging Face folder)")
    demo = Demo(out, controls, time.monotonic() + minutes * 60.0, settings)
    out.mkdir(parents=True, exist_ok=True)
    yield from demo.run(minutes)


def phase_budget(budget_s: float, overrides: dict[str, Any]) -> float:
    """A phase's time limit: what the demo's minutes leave it, or less when the caller's settings ask for less."""
    asked = float(overrides.get("time_budget_s") or 0.0)
    return max(1.0, min(budget_s, asked) if asked > 0 else budget_s)


class Demo:
    """One demo's folder, clock and settings; each phase is a method that yields its events."""

    def __init__(self, out: Path, controls: Controls, deadline: float, settings: DemoSettings):
        self.out, self.controls, self.deadline, self.settings = out, controls, deadline, settings
        self.seed = settings.seed
        self.train_overrides: dict[str, Any] = settings.train_overrides or {}
        base = settings.base
        # a base model: the world's own tasks (python by default for a chat model), asked through its chat template
        self.selfplay_options: dict[str, Any] = SelfPlayOptions.from_dict(
            {**(BASE_SELFPLAY if base else DEMO_SELFPLAY), **({"world": settings.world} if settings.world else {}),
             **({"tasks_from": settings.tasks_from} if settings.tasks_from else {}),
             **(settings.selfplay_options or {})}).check().to_dict()
        self.arms = control_arms(str(self.selfplay_options["tasks_from"]))
        self.selfplay_train: dict[str, Any] = {
            **SELFPLAY_TRAIN, **(BASE_TRAIN if base else {}), "steps": settings.selfplay_steps,
            "device": settings.device,
            **({"eval_every": settings.eval_every, "save_every": settings.eval_every} if settings.eval_every else {}),
            **self.train_overrides}
        self.eval_options: dict[str, Any] = {**(BASE_EVAL if base else DEMO_EVAL), "device": settings.device,
                                             **(settings.eval_options or {})}
        self.dataset: Path | None = None
        self.world = ""  # the world the evaluations use (resolved from the base's tokenizer for "auto")
        self.results: dict[str, dict[str, float]] = {}
        self.steps: dict[str, int] = {}

    # -- the whole demo --------------------------------------------------------------------------------
    def run(self, minutes: float) -> Iterator[Event]:
        start = time.monotonic()
        base, control = self.settings.base, self.settings.control
        phases = 3 + (0 if base else 3) + (len(self.arms) if control else 0)
        phase = 0
        if not base:
            base = yield from self.from_scratch(start, minutes, phases)
            if not base:
                return
            phase = 3
        phase += 1
        yield Log("info", f"{phase}/{phases} the base model on the held-out tasks")
        if (yield from self.evaluate("before", [base])) is None:
            return
        phase += 1
        left = self.deadline - time.monotonic()
        yield Log("info", f"{phase}/{phases} self-play (Absolute Zero) for the remaining {max(left, 0) / 60:.1f} "
                  "minutes")
        run = yield from self.selfplay(base, left)
        if run is None:
            return
        selfplay_seconds, result = run
        phase += 1
        yield Log("info", f"{phase}/{phases} the self-play run's final and best checkpoints on the held-out tasks")
        final, best = result.get("checkpoint", ""), result.get("best_checkpoint", "")
        if (yield from self.evaluate("final", [final])) is None:
            return
        if best and best != final and (yield from self.evaluate("best", [best])) is None:
            return
        self.results.setdefault("best", self.results["final"])
        if control and not (yield from self.controls_arms(base, selfplay_seconds, phase, phases)):
            return
        yield from self.finish(start, base)

    def from_scratch(self, start: float, minutes: float, phases: int) -> Iterator[Event]:
        """Phases 1-3 without a base: seed corpus, tokenizer and dataset, pretraining; returns the checkpoint it
        hands on ("" when the demo ended)."""
        corpus_tasks = self.settings.corpus_tasks
        yield Log("info", f"1/{phases} seed corpus: {corpus_tasks} mini tasks with answers, and propose examples "
                  "(the held-out tasks' programs left out)")
        if not (yield from self.corpus(corpus_tasks)):
            return ""
        yield Log("info", f"2/{phases} tokenizer and dataset (a small character-level BPE: digits stay digits)")
        if not (yield from self.prepare()):
            return ""
        budget = minutes * 60.0 * self.settings.pretrain_share - (time.monotonic() - start)
        yield Log("info", f"3/{phases} pretraining the tiny preset for up to {max(budget, 0) / 60:.1f} minutes "
                  "(it stops early when validation loss stops improving)")
        return (yield from self.pretrain(budget, self.settings.pretrain_steps, self.train_overrides))

    def controls_arms(self, base: str, seconds: float, phase: int, phases: int) -> Iterator[Event]:
        """The controls from the same start for self-play's wall time, each measured; False when the demo ended."""
        for arm, what in self.arms:
            phase += 1
            solver_rl = arm.startswith("solver_rl_")
            what = what if solver_rl or self.dataset is not None else "fine-tuning on generated tasks"
            yield Log("info", f"{phase}/{phases} control: {what} from the same start for the same "
                      f"{seconds / 60:.1f} minutes")
            done = yield from (self.solver_only(base, seconds, arm) if solver_rl
                               else self.control(base, seconds, self.train_overrides))
            if not done or (yield from self.evaluate(arm, [done])) is None:
                return False
        return True

    def finish(self, start: float, base: str) -> Iterator[Event]:
        summary: dict[str, Any] = {name: {t: rates.get(f"solve_rate/{t}", float("nan")) for t in TASK_TYPES}
                                   for name, rates in self.results.items()}
        summary["intervals"] = {name: {t: rates.get(f"solve_rate/{t}/ci95") for t in TASK_TYPES}
                                for name, rates in self.results.items()}
        summary["heldout_in_training"] = {name: {t: rates.get(f"heldout_in_training/{t}") for t in TASK_TYPES}
                                          for name, rates in self.results.items()}
        summary.update({"minutes": (time.monotonic() - start) / 60.0, "base": base, "world": self.world,
                        "steps": dict(self.steps), "arms": {k: v for k, v in ARMS.items() if k in self.results},
                        "selfplay_run": str(self.out / "selfplay"), "heldout": dict(self.eval_options),
                        "tasks_from": self.selfplay_options["tasks_from"],
                        "curriculum": curriculum(self.out / "selfplay")})
        if self.dataset is not None:
            summary["pretrain_run"] = str(self.out / "pretrain")
        for name in ARMS:
            if name != "before" and name in self.results:
                yield Log("info", f"held-out solve rate, {ARMS[name]}: " + ", ".join(
                    f"{t} {summary['before'][t]:.2f} -> {summary[name][t]:.2f}" for t in TASK_TYPES))
        step = self.steps.get("selfplay", 0)
        yield Finished("completed", step=step, message=f"self-play demo finished (self-play step {step})",
                       result=summary)

    # -- phases ----------------------------------------------------------------------------------------
    def corpus(self, count: int) -> Iterator[Event]:
        world = get_world("mini", **DEMO_WORLD)
        protocol = HeldoutProtocol(world, (REPORTED_SEED,), SELECTION_SEED, int(self.eval_options["per_type"]),
                                   int(self.selfplay_options["heldout_per_type"]))
        exclude = protocol.reserved
        folder = self.out / "corpus"
        folder.mkdir()
        shards = 8  # several files: the dataset's validation split takes whole documents from all of them
        for i in range(shards):
            if self.controls.stop.is_set():
                yield Finished("stopped", message="stopped while writing the seed corpus")
                return False
            yield Progress("seed corpus", i, shards, "files")
            world.write_seed_corpus(folder / f"mini-{i}.txt", count // shards, self.seed * 100 + i, TASK_TYPES,
                                    proposals=True, exclude=exclude)
        return True

    def prepare(self) -> Iterator[Event]:
        from desktop_app.engine.data.prepare import prepare_dataset  # lazy: numpy

        spec = DataSpec(tokenizer="bpe", vocab_size=160, context_length=256, val_fraction=0.02, seed=self.seed)
        for event in prepare_dataset([self.out / "corpus"], self.out / "dataset", spec, self.controls):
            yield event
            if isinstance(event, Finished) and event.reason != "completed":
                return False
        self.dataset = self.out / "dataset"
        return True

    def _train(self, config: Any, name: str) -> Iterator[Event]:
        """One phase's run (stopped with the demo); returns its Finished, or None when the user stopped it."""
        from desktop_app.engine.train.loop import train  # lazy: torch

        inner = Controls()
        finished: Finished | None = None
        for event in _passing_controls(train(config, self.out / name, inner), inner, self.controls):
            if isinstance(event, Finished):
                finished = event
                self.steps[name] = event.step
            yield event
        if self.controls.stop.is_set() or finished is None or finished.reason == "failed":
            yield Finished("stopped" if self.controls.stop.is_set() else "failed", step=self.steps.get(name, 0),
                           message=f"the demo ended during its {name} phase")
            return None
        return finished

    def pretrain(self, budget_s: float, steps: int, overrides: dict[str, Any]) -> Iterator[Event]:
        from desktop_app.engine.train.request import config_from_preset  # lazy: numpy

        assert self.dataset is not None
        config, notes = config_from_preset(self.dataset, "tiny", seed=self.seed, steps=steps,
                                           **{**PRETRAIN, **overrides, "time_budget_s": phase_budget(budget_s,
                                                                                                    overrides)})
        for note in notes:
            yield Log("info", note)
        finished = yield from self._train(config, "pretrain")
        if finished is None:
            return ""
        best = finished.result.get("best_checkpoint") or finished.result.get("checkpoint", "")
        yield Log("info", f"pretraining handed on {Path(best).name} (best validation loss "
                  f"{finished.result.get('best_val_loss') or float('nan'):.4f})")
        return best

    def selfplay(self, base: str, budget_s: float) -> Iterator[Event]:
        spec = TrainSpec.from_dict({**self.selfplay_train,
                                    "time_budget_s": phase_budget(budget_s, self.selfplay_train)})
        config = RunConfig(base_model=base, dataset=str(self.dataset or ""), objective="selfplay",
                           method_options=dict(self.selfplay_options), train=spec.to_dict(), seed=self.seed)
        start = time.monotonic()
        finished = yield from self._train(config, "selfplay")
        if finished is None:
            return None
        return time.monotonic() - start, finished.result

    def solver_only(self, base: str, budget_s: float, arm: str) -> Iterator[Event]:
        """Solver-only RL (`arm`: solver_rl_SEED): self-play's run with no proposer, the solver practising the seed
        tasks (`tasks_from` SEED: the world's generated ones, or the identity alone), the same start, settings and
        wall time; returns its final checkpoint."""
        spec = TrainSpec.from_dict({**self.selfplay_train, "time_budget_s": phase_budget(budget_s, {})})
        options = {**self.selfplay_options, "proposer": False, "tasks_from": arm.removeprefix("solver_rl_")}
        config = RunConfig(base_model=base, dataset=str(self.dataset or ""), objective="selfplay",
                           method_options=options, train=spec.to_dict(), seed=self.seed)
        finished = yield from self._train(config, arm)
        return finished.result.get("checkpoint", "") if finished is not None else ""

    def control(self, base: str, budget_s: float, overrides: dict[str, Any]) -> Iterator[Event]:
        """The same wall time spent on plain training from the same start; returns its final checkpoint."""

        steps = self.selfplay_train["steps"]
        if self.dataset is not None:  # continued pretraining on the seed corpus, annealed over the time it gets
            pace = _steps_per_second(self.out / "pretrain")
            planned = max(10, int(pace * budget_s)) if pace else 100_000
            spec = TrainSpec.from_dict({**PRETRAIN, "lr": CONTROL_LR, "schedule": "cosine", "min_lr_ratio": 0.0,
                                        "warmup_steps": 0, "early_stopping_patience": 0, "steps": min(steps, planned),
                                        **overrides, "time_budget_s": phase_budget(budget_s, overrides)})
            config = RunConfig(base_model=base, dataset=str(self.dataset), objective="causal_lm",
                               train=spec.to_dict(), seed=self.seed)
        else:
            from desktop_app.engine.recipes.seed_chats import write_seed_chats  # lazy: torch

            data = write_seed_chats(self.out / "control-data.jsonl", base, self.selfplay_options, self.seed)
            spec = TrainSpec.from_dict({**self.selfplay_train, "lr": 1e-5, "batch_size": 16, "micro_batch_size": 8,
                                        "eval_every": 0, "time_budget_s": max(1.0, budget_s)})
            config = RunConfig(base_model=base, objective="sft", data=[str(data)], train=spec.to_dict(),
                               seed=self.seed)
        finished = yield from self._train(config, "control")
        return finished.result.get("checkpoint", "") if finished is not None else ""

    def evaluate(self, label: str, models: list[str]) -> Iterator[Event]:
        """The held-out figures of one model (kept in self.results[label] and its run folder's evaluations)."""
        from desktop_app.engine.evaluate.runner import evaluate_models  # lazy: torch
        from desktop_app.engine.evaluate.spec import EvalSpec  # lazy: start-up

        world = self.world or ("mini" if self.dataset is not None else self.selfplay_options.get("world", "auto"))
        spec = EvalSpec.from_dict({"world": world, "world_options": self.selfplay_options.get("world_options", {}),
                                   "task_types": list(self.selfplay_options.get("task_types", TASK_TYPES)),
                                   "prompt_style": self.selfplay_options.get("prompt_style", "auto"),
                                   "max_new_tokens": self.selfplay_options["max_new_tokens"], **self.eval_options})
        for event in evaluate_models(models, spec, self.controls):
            if isinstance(event, Finished):
                if event.reason != "completed":
                    yield Finished(event.reason, step=self.steps.get("selfplay", 0),
                                   message=f"the demo ended while evaluating the {label} model")
                    return None
                continue
            if isinstance(event, ModelEvaluated):
                self.results[label] = dict(event.metrics)
                self.world = str(event.metrics.get("world", world))
            yield event
        return self.results.get(label)


def _passing_controls(events: Iterator[Event], controls: Controls, outer: Controls) -> Iterator[Event]:
    """Pass a phase's events on, and the user's stop and pause to the phase's own controls."""
    for event in events:
        if outer.stop.is_set():
            controls.stop.set()
        if outer.pause.is_set():
            controls.pause.set()
        elif controls.pause.is_set():
            controls.pause.clear()
        yield event


def _steps_per_second(run_dir: Path) -> float:
    """The pace of a finished run's training steps (its last step record), for planning a schedule by time."""

    steps = [r for r in tail_records(run_dir) if r.get("type") == "step" and r.get("elapsed_s")]
    return float(steps[-1]["step"]) / float(steps[-1]["elapsed_s"]) if steps else 0.0


def curriculum(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per task type, what the proposer built over a self-play run (its metrics.jsonl): distinct programs and shapes
    in the buffer at the end, the solver's mean rate on the proposer's new tasks and the share of rounds where it
    sat at the frontier (neither 0 nor 1), and the new programs' mean size (characters) in the run's first and last
    quarter. Empty for a run without a proposer."""
    steps = [r for r in read_metrics(run_dir) if r.get("type") == "step"]
    out: dict[str, dict[str, float]] = {}
    for task_type in TASK_TYPES:
        rates = [float(r[f"new_task_solve_rate/{task_type}"]) for r in steps if f"new_task_solve_rate/{task_type}" in r]
        sizes = [float(r[f"program_size/{task_type}"]) for r in steps if f"program_size/{task_type}" in r]
        last = next((r for r in reversed(steps) if f"programs/{task_type}" in r), None)
        if last is None or not rates:
            continue
        quarter = max(1, len(sizes) // 4)
        out[task_type] = {"programs": float(last[f"programs/{task_type}"]),
                          "shapes": float(last[f"shapes/{task_type}"]),
                          "new_task_solve_rate": sum(rates) / len(rates),
                          "frontier_share": sum(0.0 < r < 1.0 for r in rates) / len(rates),
                          "program_size_first": sum(sizes[:quarter]) / quarter,
                          "program_size_last": sum(sizes[-quarter:]) / quarter}
    return out
