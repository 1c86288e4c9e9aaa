"""Standard benchmarks (lm-evaluation-harness tasks: MMLU, ARC, HellaSwag, GSM8K, ... and a folder of your own task
YAMLs) on the model the app already loaded, scored by the harness's own metrics and standard errors.

`run_benchmarks(loaded, spec, controls)` checks the names and the data first (benchmark_catalog, benchmark_data:
one sentence saying what to fetch), loads the tasks offline, hands code tasks to our sandbox (benchmark_code), and
runs `lm_eval.simple_evaluate` with the model wrapped as the harness's HFLM (benchmark_lm.AppLM) in a worker thread,
relaying Progress (requests done / total) and ending between two batches when the user stops. It returns flat
metrics for the eval record:
    bench/{task}/{metric}          float (a filter other than "none": {metric}[{filter}])
    bench/{task}/{metric}/stderr   float or None (the harness's "N/A")
    bench/{task}/items             int (items scored)
    bench/{task}/fewshot           int (worked examples before each item)
    benchmark_harness              "lm_eval 0.4.13"
Groups (mmlu, ...) get their aggregate under bench/{group}/... as the harness computes it.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
from collections.abc import Callable, Generator
from importlib import metadata
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.benchmark_catalog import HARNESS_MISSING, check_names, check_task_folder
from desktop_app.engine.evaluate.benchmark_code import take_over_code_tasks
from desktop_app.engine.evaluate.benchmark_data import check_benchmark_data, datasets_offline
from desktop_app.engine.evaluate.benchmark_files import has_relative_files, resolve_data_files
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.events import Controls, Event, Progress

SKIPPED_KEYS = ("alias", "name", "sample_len", "sample_count", "samples")
AUTO_SCORING_BATCH = {"cpu": 32, "other": 64}  # requests per log-likelihood pass; measured with SmolLM2-135M on a
# 2-core CPU (tests/bench/bench_benchmarks.py): 32 is as fast as 64, with half the activations' memory


class BenchmarksStoppedEarly(Exception):
    """The user stopped during the benchmarks: the model's other figures still count, these are left out."""


def harness_missing() -> str | None:
    """None when lm-evaluation-harness imports; else one sentence saying which extra to install."""
    try:
        import lm_eval.evaluator
        import lm_eval.models.huggingface  # noqa: F401
    except ImportError:
        return HARNESS_MISSING
    return None


def harness_version() -> str:
    """The harness as recorded with each result ("lm_eval 0.4.13"; "lm_eval" where its version is not recorded)."""
    try:
        return f"lm_eval {metadata.version('lm_eval')}"
    except metadata.PackageNotFoundError:
        return "lm_eval"


def local_task_entries(index: dict[str, Any]) -> None:
    """Read the local data files of the folder's tasks from each YAML's own folder (benchmark_files): their index
    entries are replaced, in place, by entries holding the config with the paths resolved."""
    from lm_eval.tasks._yaml_loader import load_yaml  # the loader the harness itself uses (includes, !function)

    for name, entry in list(index.items()):
        if entry.kind.name != "TASK" or entry.yaml_path is None or not has_relative_files(entry.cfg or {}):
            continue
        cfg = load_yaml(entry.yaml_path, resolve_func=True)
        cfg["dataset_kwargs"] = resolve_data_files(cfg.get("dataset_kwargs"), Path(entry.yaml_path).parent)
        index[name] = dataclasses.replace(entry, yaml_path=None, cfg=cfg)


def task_manager(names: list[str], include_dir: str = "") -> Any:
    """A harness TaskManager that knows the names, with the folder's local data files resolved: the folder's
    tasks alone when all the names are there (its YAMLs read afresh: a tenth of a second), else the harness's own
    tasks too (an index of thousands of YAML files, ~10 s: built once per folder and kept)."""
    from lm_eval.tasks import TaskManager

    folder = check_task_folder(include_dir)
    if folder is not None:
        own = TaskManager(include_path=str(folder), include_defaults=False)
        if all(n in own.task_index for n in names):
            local_task_entries(own.task_index)
            return own
    return _full_manager(str(folder) if folder else "")


@functools.lru_cache(maxsize=2)
def _full_manager(folder: str) -> Any:
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=folder or None)
    local_task_entries(manager.task_index)
    return manager


def load_benchmark_tasks(names: list[str], include_dir: str = "") -> tuple[Any, list[Any], dict[str, Any]]:
    """(the TaskManager, the named tasks/groups as the harness built them, its flat TaskDict {"tasks", "groups",
    "group_map"}) for names known to the harness or the folder; loads their data (run inside datasets_offline)."""
    manager = task_manager(names, include_dir)
    built: list[Any] = []
    for name in names:
        loaded = manager.load([name])
        top = loaded["groups"].get(name) or loaded["tasks"].get(name)
        built.extend([top] if top is not None else loaded["tasks"].values())  # a tag: its tasks
    return manager, built, manager.load(built)


def _number(value: Any) -> float | None:
    """A figure as a float; None for the harness's "N/A" (a standard error it could not compute)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def task_metrics(name: str, figures: dict[str, Any]) -> dict[str, Any]:
    """One task's (or group's) harness figures as bench/{name}/... keys (see the module's docstring)."""
    out: dict[str, Any] = {}
    for key, value in figures.items():
        metric, _, kind = key.partition(",")
        if key in SKIPPED_KEYS or not kind:
            continue
        label = metric if kind == "none" else f"{metric}[{kind}]"
        if metric.endswith("_stderr"):
            label = (metric[:-len("_stderr")] if kind == "none" else f"{metric[:-len('_stderr')]}[{kind}]")
            out[f"bench/{name}/{label}/stderr"] = _number(value)
        elif (number := _number(value)) is not None:
            out[f"bench/{name}/{label}"] = number
    return out


def benchmark_metrics(results: dict[str, Any]) -> dict[str, Any]:
    """The harness's results dict (simple_evaluate's) as the flat metrics of our eval record."""
    out: dict[str, Any] = {}
    samples = results.get("n-samples") or {}
    shots = results.get("n-shot") or {}
    for name, figures in (results.get("results") or {}).items():
        out.update(task_metrics(name, figures))
        items = (samples.get(name) or {}).get("effective", figures.get("sample_len"))
        if isinstance(items, int | float):
            out[f"bench/{name}/items"] = int(items)
        if isinstance(shots.get(name), int | float):
            out[f"bench/{name}/fewshot"] = int(shots[name])
    out["benchmark_harness"] = harness_version()
    return out


def scoring_batch(requested: int, device: str) -> int:
    """Requests per log-likelihood pass: as asked (the eval's batch), else AUTO_SCORING_BATCH for the device."""
    return requested or AUTO_SCORING_BATCH["cpu" if device == "cpu" else "other"]


def _evaluate(loaded: Any, spec: EvalSpec, tasks: list[Any], manager: Any, tracker: Any,
              generation_batch: int) -> dict[str, Any]:
    """simple_evaluate on the loaded model (runs in the worker thread)."""
    import lm_eval

    from desktop_app.engine.evaluate.benchmark_lm import AppLM  # lazy: torch

    lm = AppLM(loaded.model, loaded.tokenizer, batch=scoring_batch(int(spec.batch), loaded.device.type),
               generation_batch=generation_batch or scoring_batch(int(spec.batch), loaded.device.type),
               tracker=tracker)
    fewshot = None if int(spec.benchmark_fewshot) < 0 else int(spec.benchmark_fewshot)
    results = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, num_fewshot=fewshot,
                                      limit=int(spec.benchmark_limit) or None, log_samples=False)
    return results or {}


def in_thread(work: Callable[[Callable[[Progress], None], threading.Event], Any],
              controls: Controls) -> Generator[Event, None, Any]:
    """Run work(report, stop) in a worker thread, yielding what it reports; its result, or its exception.
    `stop` is set when the user stops (seen by the worker after its current batch) or this generator is closed."""
    events: queue.Queue[Progress] = queue.Queue()
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work(events.put, stop)
        except BaseException as exc:  # handed to the generator's thread, raised there
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="benchmarks", daemon=True)
    worker.start()
    try:
        while worker.is_alive() or not events.empty():
            if controls.stop.is_set():
                stop.set()
            try:
                yield events.get(timeout=0.1)
            except queue.Empty:
                continue
    finally:
        stop.set()  # a closed generator: the worker ends after its batch
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")


def check_benchmarks(spec: EvalSpec) -> list[str]:
    """The spec's benchmark names, checked before any model loads: UserError (one sentence) when the harness is
    missing, a name is unknown or a task's data is not here (what to fetch, and how)."""

    if (missing := harness_missing()) is not None:
        raise UserError(missing)
    names = check_names(list(spec.benchmarks), spec.benchmark_dir)
    check_benchmark_data(names, spec.benchmark_dir)
    return names


def run_benchmarks(loaded: Any, spec: EvalSpec, controls: Controls | None = None, *,
                   generation_batch: int = 0) -> Generator[Event, None, dict]:
    """The spec's benchmarks on the loaded model: Progress while it works; returns the flat bench/... metrics.
    `generation_batch`: prompts decoded together (the runner's batch_size; 0: as many as a scoring pass).
    UserError (one sentence) for a missing harness, an unknown name or missing data; BenchmarksStoppedEarly when
    the user stops."""
    names = check_benchmarks(spec)
    from desktop_app.engine.evaluate.benchmark_lm import BenchmarksStopped, Tracker  # lazy: torch

    controls = controls or Controls()
    yield Progress("benchmarks", 0, 0, "requests", f"loading {', '.join(names)}")
    with datasets_offline():
        manager, tasks, task_dict = load_benchmark_tasks(names, spec.benchmark_dir)
        take_over_code_tasks(task_dict)
        try:
            results = yield from in_thread(lambda report, stop: _evaluate(
                loaded, spec, tasks, manager, Tracker(stop, report), generation_batch), controls)
        except BenchmarksStopped:
            raise BenchmarksStoppedEarly from None
    return benchmark_metrics(results)
