"""The Evaluate view's Benchmarks section at work: reads the harness's task list and where each ticked benchmark's
data stands, and fetches the missing data, all in the background runner, into the picker (benchmark_picker.py).

The engine decides everything: whether the harness is installed (benchmarks.harness_missing), which tasks exist
(benchmark_catalog), where their data stands and how it is fetched (benchmark_data, through the app's network
switch, with the same progress as model downloads). Nothing here imports the harness: the first read of the task
list runs in the worker thread, and only when the person searches, ticks or names a folder."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

from PySide6.QtCore import QObject

from desktop_app.engine.evaluate.benchmark_catalog import popular_benchmarks, task_names
from desktop_app.engine.evaluate.benchmark_data import BenchmarkDataFetched, data_state, fetch_benchmark_data
from desktop_app.engine.evaluate.benchmarks import harness_missing
from desktop_app.engine.events import Controls, Finished, Log, Progress
from desktop_app.engine.hub.download import DownloadCancelled, DownloadProgress
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.benchmark_picker import BenchmarkPicker
from desktop_app.ui.widgets.hub_words import size_words

CATALOG_KIND = "benchmark-catalog"
STATES_KIND = "benchmark-states"
FETCH_KIND = "benchmark-fetch"


def harness_sentence() -> str:
    """Why benchmarks cannot run here, in one sentence ("" when the harness is installed, or looks installed: the
    engine's check imports it, seconds of work that the first read of the task list does in the background)."""

    try:
        found = importlib.util.find_spec("lm_eval") is not None
    except (ImportError, ValueError):  # a module entry of None: it cannot be imported either
        found = False
    return "" if found else harness_missing() or ""


def popular() -> Any:
    return popular_benchmarks()


def catalog_job(include_dir: str) -> Iterator[dict[str, Any]]:
    """Runs in the worker thread: every task and group name the harness and the folder know."""

    missing = harness_missing()  # installed, but does it import?
    yield {"missing": missing} if missing else {"names": task_names(include_dir)}


def states_job(names: list[str], include_dir: str) -> Iterator[dict[str, Any]]:
    """Runs in the worker thread: where the data of `names` stands (ready, missing, local)."""

    yield {"states": data_state(names, include_dir)}


def fetch_job(names: list[str], include_dir: str, controls: Controls) -> Iterator[Any]:
    """Runs in the worker thread: the engine's fetch of the named benchmarks' data."""

    yield from fetch_benchmark_data(names, include_dir, controls)


class BenchmarkSection(QObject):
    """Keeps a BenchmarkPicker told: the harness's absence, the task list, data states, and a fetch's progress."""

    def __init__(self, ctx: AppContext, picker: BenchmarkPicker, folder: Any, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.picker = picker
        self.folder = folder  # the benchmark folder's editor (value(): its path, "" for none)
        self.loaded_dir: str | None = None  # the folder whose task list the picker shows (None: none read yet)
        self.fetch_task: Any = None
        self.catalog_task: Any = None
        try:
            self.missing = harness_sentence()
            picker.set_popular(popular())
        except ImportError as exc:  # the engine's benchmark modules themselves cannot load
            self.missing = f"Standard benchmarks are not available here: {exc}."
        picker.set_unavailable(self.missing)
        picker.catalog_wanted.connect(self.load_catalog)
        picker.fetch_requested.connect(self.fetch)
        picker.cancel_requested.connect(self.cancel)
        folder.changed.connect(self._folder_changed)

    def include_dir(self) -> str:
        return str(self.folder.value() or "")

    def load_catalog(self) -> None:
        """Read the task list (once per folder) and then the ticked and popular benchmarks' data states."""
        if self.missing or self.loaded_dir == self.include_dir():
            return
        include_dir = self.include_dir()
        self.loaded_dir = include_dir
        self.catalog_task = self.ctx.runner.start(CATALOG_KIND, lambda: catalog_job(include_dir))
        self.catalog_task.produced.connect(self._on_catalog)
        self.catalog_task.failed.connect(lambda m, _d: self.picker.show_fetch_note(m, "error"))
        self.catalog_task.finished.connect(self.refresh_states)

    def form_changed(self) -> None:
        """The form changed (a benchmark ticked, a saved spec shown): read what the ticked ones need."""
        if self.missing or not self.picker.value():
            return
        if self.loaded_dir != self.include_dir():
            self.load_catalog()
        else:
            self.refresh_states()

    def _folder_changed(self) -> None:
        """Another folder of tasks: its names and data states are read again (when they were read at all)."""
        if self.loaded_dir is not None:
            self.loaded_dir = None
            self.picker.states.clear()
            self.load_catalog()

    def _on_catalog(self, item: object) -> None:
        if isinstance(item, dict) and item.get("missing"):
            self.missing = str(item["missing"])
            self.picker.set_unavailable(self.missing)
        elif isinstance(item, dict) and "names" in item:
            self.picker.set_catalog(list(item["names"]))

    def refresh_states(self) -> None:
        """Where the ticked benchmarks' data stands (and the popular ones', once the task list is read)."""
        names = self.picker.value() + (list(self.picker.described) if self.picker.names else [])
        names = [n for n in dict.fromkeys(names) if n not in self.picker.states]
        if self.missing or not names or self.fetching() or self.ctx.runner.is_running(CATALOG_KIND):
            return  # (the task list's reading asks again when it ends)
        include_dir = self.include_dir()
        task = self.ctx.runner.start(STATES_KIND, lambda: states_job(names, include_dir))
        task.produced.connect(lambda item: self.picker.set_states(dict(item.get("states", {}))))
        # a name the catalog cannot place says so in its row, not in a dialog: the evaluation names it again
        task.failed.connect(lambda m, _d: self.picker.show_fetch_note(m, "error"))

    # --- fetching ---
    def fetching(self) -> bool:
        return self.fetch_task is not None and self.fetch_task.running

    def fetch(self, names: list[str]) -> bool:
        """Fetch the data of `names` (the ticked benchmarks whose data is missing) in the background."""
        if not names or self.fetching():
            return False
        controls = Controls()
        include_dir = self.include_dir()
        self.picker.show_fetching(True)
        self.picker.show_fetch_note(f"fetching the data of {', '.join(names)}…")
        self.fetch_task = self.ctx.runner.start(FETCH_KIND, lambda: fetch_job(names, include_dir, controls), controls)
        self.fetch_task.produced.connect(self._on_fetch_item)
        self.fetch_task.failed.connect(self._on_fetch_failed)
        self.fetch_task.finished.connect(lambda n=tuple(names): self._on_fetch_finished(list(n)))
        return True

    def cancel(self) -> None:
        if self.fetching():
            self.fetch_task.stop()
            self.picker.show_fetch_note("cancelling…")

    def _on_fetch_item(self, item: object) -> None:
        if isinstance(item, DownloadProgress):
            self.picker.show_progress(item.done, item.total, item.speed, item.eta_s)
        elif isinstance(item, Progress):  # each dataset prepared once it is here
            self.picker.show_progress(item.done, item.total)
            self.picker.show_fetch_note(f"{item.stage}: {item.message}")
        elif isinstance(item, BenchmarkDataFetched):
            fetched = f" ({size_words(item.fetched)} fetched)" if item.fetched else ""
            self.picker.show_progress(1, 1)
            self.picker.show_fetch_note(f"the data of {', '.join(item.names)} is here{fetched}; evaluations run "
                                        "offline", "ok")
        elif isinstance(item, DownloadCancelled):
            have = f": {size_words(item.done)} of {size_words(item.total)} fetched" if item.total else ""
            self.picker.show_fetch_note(f"cancelled{have}; Fetch data continues from there")
        elif isinstance(item, Finished):
            self.picker.show_fetch_note(item.message or item.reason, "ok" if item.reason == "completed" else "muted")
        elif isinstance(item, Log):
            self.ctx.info(item.message)

    def _on_fetch_failed(self, message: str, details: str) -> None:
        self.picker.show_fetch_note(message, "error")
        self.ctx.report_error(message, details, title="Fetching benchmark data failed")

    def _on_fetch_finished(self, names: list[str]) -> None:
        self.picker.show_fetching(False)
        for name in names:  # read again: fetched, or still missing after a cancel or an error
            self.picker.states.pop(name, None)
        self.refresh_states()
