"""Evaluate models one after another: the generator the `eval` verb prints and the window's Evaluate view shows.

`evaluate_models(models, spec, controls)` loads each model the app opens (run, checkpoint, export, Hugging Face
folder), runs the evaluations the spec asks for (held-out tasks, questions, text) and yields Progress while it
works, then one ModelEvaluated per model (kept in the model's evaluations file, results.py), and a Finished at the
end. Every model of one call meets the same held-out tasks, so their figures form one table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, TypeVar

from desktop_app.engine import run_folder
from desktop_app.engine.devices import busy_cores, choose_precision, cpu_cores
from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.benchmarks import BenchmarksStoppedEarly, check_benchmarks, run_benchmarks
from desktop_app.engine.evaluate.heldout import HeldoutSettings, mean_rate, solve_heldout
from desktop_app.engine.evaluate.leakage import training_programs
from desktop_app.engine.evaluate.perplexity import score_text
from desktop_app.engine.evaluate.qa import QASettings, ask_questions, read_questions
from desktop_app.engine.evaluate.results import append_result, results_folder
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.events import Controls, Event, Finished, Log, ModelEvaluated, Progress
from desktop_app.engine.generate.prompts import context_length
from desktop_app.engine.generate.threads import torch_threads
from desktop_app.engine.model.loading import load_model
from desktop_app.engine.os_faults import DiskFault
from desktop_app.engine.selfplay.prompting import default_world, make_prompter
from desktop_app.engine.tasks.base import Task, TaskWorld, get_world
from desktop_app.engine.tasks.heldout_protocol import heldout_tasks

T = TypeVar("T")
PLAIN_ANSWER_TOKENS = 40
CHAT_ANSWER_TOKENS = 160


class _Stopped(Exception):
    pass


def _relay(work: Generator[Event, None, T], controls: Controls) -> Generator[Event, None, T]:
    """Pass a measurement's progress on; end it between batches when the user stops."""
    while True:
        if controls.stop.is_set():
            work.close()
            raise _Stopped
        try:
            event = next(work)
        except StopIteration as done:
            return done.value
        yield event


class HeldoutSets:
    """Worlds and their held-out sets, made once per call: every model meets the very same tasks."""

    def __init__(self, spec: EvalSpec):
        self.spec = spec
        self.worlds: dict[str, TaskWorld] = {}
        self.sets: dict[str, dict[str, list[Task]]] = {}

    def get(self, name: str) -> tuple[TaskWorld, dict[str, list[Task]]]:
        if name not in self.worlds:
            world = get_world(name, **dict(self.spec.world_options))
            count = int(self.spec.per_type) or int(world.heldout_size)
            self.worlds[name] = world
            self.sets[name] = {t: heldout_tasks(world, t, count, int(self.spec.heldout_seed))
                               for t in self.spec.task_types if t in world.types}
        return self.worlds[name], self.sets[name]

    def close(self) -> None:
        for world in self.worlds.values():
            world.close()


def _check_inputs(spec: EvalSpec) -> None:
    """Fail before loading any model: the question file reads, the text sources exist, the benchmarks are known
    and their data is here."""
    if spec.benchmarks:
        check_benchmarks(spec)
    if spec.qa:
        read_questions(spec.qa)
    for source in spec.text:
        if not Path(source).expanduser().exists():
            raise UserError(f"{source} does not exist (give text files, folders or a prepared dataset)")


def evaluate_models(models: list[str], spec: EvalSpec, controls: Controls | None = None, *,
                    save: bool = True) -> Iterator[Event]:
    """Each model evaluated by `spec`; ModelEvaluated per model, then Finished (result: {"models": [metrics...]})."""
    spec.check()
    if not models:
        raise UserError("name at least one model to evaluate (a run, checkpoint, export or Hugging Face folder)")
    _check_inputs(spec)
    controls = controls or Controls()
    sets = HeldoutSets(spec)
    evaluated: list[dict[str, Any]] = []
    try:
        for index, path in enumerate(models):
            yield Progress("models", index, len(models), "models", f"loading {Path(path).name}")
            event = yield from _relay(_evaluate_one(str(path), spec, sets, save), controls)
            evaluated.append({"model": event.model, **event.metrics})
            yield event
    except (_Stopped, BenchmarksStoppedEarly):
        yield Finished("stopped", message=f"stopped after {len(evaluated)} of {len(models)} models",
                       result={"models": evaluated})
        return
    finally:
        sets.close()
    yield Finished("completed", message=f"evaluated {len(models)} model{'s' if len(models) != 1 else ''}",
                   result={"models": evaluated})


def eval_threads(requested: int) -> tuple[int | None, str]:
    """Torch threads for an evaluation on the CPU, and why: as asked, else the cores other programs leave idle
    right now (a torch thread on a busy core waits on it, and decoding slows down several times), else all cores
    (None: torch's own default)."""

    if requested:
        return requested, f"{requested} CPU thread(s) as asked"
    cores = cpu_cores()
    busy = busy_cores()
    if busy is None:  # no counters to read (not Linux): the load average, busy cores a minute late
        busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    free = max(1, min(cores, cores - round(busy)))
    if free < cores:
        return free, f"{free} CPU thread(s): other programs keep {busy:.1f} of {cores} cores busy"
    return None, f"{cores} CPU threads"


AUTO_BATCH = {"cpu": 100, "other": 256}  # prompts; measured on a 2-core CPU with SmolLM2-135M's 300 python-world
# tasks: batches of 100 took 108-123 s, of 64 136 s (more batches, each ending on its few long replies), of 150
# 130 s (longer prompts pad the whole batch, and the prefill slows down)


def batch_size(requested: int, prompts: int, device: str) -> int:
    """Prompts per batch: as asked, else about AUTO_BATCH's size for the device, evened out over the batches
    (300 prompts on a CPU: three of 100, and 210 three of 70 rather than 100, 100, 10)."""
    if requested:
        return requested
    most = AUTO_BATCH["cpu" if device == "cpu" else "other"]
    batches = max(1, -(-prompts // most))
    return max(1, -(-prompts // batches))


BF16_MIN_PARAMETERS = 20_000_000  # smaller models decode no faster in bf16 (casts and Python dominate)


def eval_precision(requested: str, model: Any) -> str:
    """fp32 or bf16 for this model: as asked, else bf16 where the hardware runs it fast and the model is big."""
    import torch


    if requested != "auto":
        return requested
    big = sum(p.numel() for p in model.parameters()) >= BF16_MIN_PARAMETERS
    fast = choose_precision(next(model.parameters()).device, "auto").autocast_dtype == torch.bfloat16
    return "bf16" if big and fast else "fp32"


def _evaluate_one(path: str, spec: EvalSpec, sets: HeldoutSets, save: bool) -> Generator[Event, None, ModelEvaluated]:
    start = time.perf_counter()
    loaded = load_model(path, device=spec.device)
    precision = eval_precision(spec.precision, loaded.model)
    if precision == "bf16":
        import torch

        loaded.model.to(torch.bfloat16)
    threads, why = eval_threads(int(spec.threads)) if loaded.device.type == "cpu" else (None, "")
    why = ", ".join(x for x in (precision, why) if x)
    with torch_threads(threads):
        metrics = yield from _measure(loaded, spec, sets, why)
        return (yield from _record(path, loaded, spec, metrics, start, save))


def _heldout_in_training(loaded: Any, heldout: dict[str, list[Task]], metrics: dict[str, Any]) -> list[Event]:
    """How many of the held-out programs the model's own training records hold (a run or checkpoint: 0 when the
    held-out protocol held), into `metrics` as heldout_in_training/TYPE; the finding as a log line."""
    if loaded.kind not in ("run", "checkpoint"):
        return []
    found = training_programs(loaded.path)
    if found is None:
        return []
    counts = {t: found.count(tasks) for t, tasks in heldout.items()}
    metrics.update({f"heldout_in_training/{t}": n for t, n in counts.items()})
    notes = [Log("warning", f"records left unread: {'; '.join(found.skipped)}")] if found.skipped else []
    if any(counts.values()):
        return [*notes, Log("warning", "the run trained on held-out programs (" + ", ".join(
            f"{t} {n} of {len(heldout[t])}" for t, n in counts.items()) + "): its figures on them are not clean")]
    return [*notes, Log("info", f"none of the held-out programs is in the run's training records "
                        f"({', '.join(sorted(found.sources)) or 'none found'})")]


def _measure(loaded: Any, spec: EvalSpec, sets: HeldoutSets, threads: str) -> Generator[Event, None, dict[str, Any]]:
    """The figures the spec asks for (held-out tasks, questions, text) of one loaded model."""

    model, tokenizer = loaded.model, loaded.tokenizer
    prompter = make_prompter(tokenizer, spec.prompt_style, model)
    max_len = context_length(model) or 512
    yield Log("info", f"evaluating {loaded.name} ({loaded.kind}, {prompter.style} prompts) on {loaded.device}"
              + (f", {threads}" if threads else ""))
    metrics: dict[str, Any] = {}
    if spec.world != "none":
        name = default_world(tokenizer) if spec.world == "auto" else spec.world
        world, heldout = sets.get(name)
        max_new = int(spec.max_new_tokens) or (CHAT_ANSWER_TOKENS if prompter.chat else PLAIN_ANSWER_TOKENS)
        size = batch_size(int(spec.batch), sum(len(t) for t in heldout.values()), loaded.device.type)
        settings = HeldoutSettings(max_len=max_len, max_new_tokens=max_new, samples=int(spec.samples),
                                   temperature=float(spec.temperature), seed=int(spec.seed), batch=size)
        results = yield from solve_heldout(model, prompter, world, heldout, settings)
        metrics["world"] = name
        for result in results.values():
            metrics.update(result.metrics())
        metrics["solve_rate"] = mean_rate(results)
        yield from _heldout_in_training(loaded, heldout, metrics)
    if spec.qa:
        settings = QASettings(max_len=max_len, max_new_tokens=int(spec.max_new_tokens) or CHAT_ANSWER_TOKENS,
                              batch=min(int(spec.batch) or 16, 16), how=spec.qa_match)
        metrics.update((yield from ask_questions(model, prompter, spec.qa, settings)))
    if spec.text:
        metrics.update((yield from score_text(model, tokenizer, list(spec.text), max_bytes=int(spec.max_text_bytes),
                                              context=max_len)))
    if spec.benchmarks:  # the harness's own prompts (no chat template), as published figures are measured
        metrics.update((yield from run_benchmarks(loaded, spec, generation_batch=batch_size(
            int(spec.batch), 10 ** 6, loaded.device.type))))
    metrics["prompt_style"] = prompter.style
    return metrics


def _record(path: str, loaded: Any, spec: EvalSpec, metrics: dict[str, Any], start: float,
            save: bool) -> Generator[Event, None, ModelEvaluated]:
    """One model's ModelEvaluated (`start`: when its loading began), kept in its evaluations file when `save`."""
    step = run_folder.step_of(loaded.path) if loaded.kind in ("run", "checkpoint") else None
    seconds = time.perf_counter() - start
    folder = results_folder(loaded.path, loaded.kind)
    saved = ""
    if folder is not None and save:
        try:
            saved = str(append_result(folder, {"model": path, "name": loaded.name, "kind": loaded.kind,
                                               "checkpoint": str(loaded.path), "step": step, "seconds": seconds,
                                               "spec": spec.to_dict(), "metrics": metrics}))
        except DiskFault as exc:  # a full disk or a read-only folder: the one sentence names the file
            yield Log("warning", f"the results of {loaded.name} were not saved: {exc}")
        except OSError as exc:
            yield Log("warning", f"the results of {loaded.name} could not be saved in {folder}: {exc}")
    return ModelEvaluated(model=path, name=loaded.name, kind=loaded.kind, step=step, metrics=metrics,
                          seconds=seconds, saved=saved)
