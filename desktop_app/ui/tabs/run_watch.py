"""Watching a run another process trains (CLI, torchrun) in the Train tab's run display: its metrics.jsonl feeds
the plots as it grows, until it finishes or Stop watching. Read-only: nothing is written to the run."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from desktop_app.engine.events import Controls
from desktop_app.engine.methods import method_of
from desktop_app.engine.runs import watch_run
from desktop_app.engine.specs import RunConfig, SpecError
from desktop_app.ui.background import Task
from desktop_app.ui.context import AppContext
from desktop_app.ui.train_state import TrainState, folder_to_watch
from desktop_app.ui.widgets.run_view import RunView


class RunWatch:
    """The watch of one run folder at a time, shown in `run_view`; the folder is kept in the tab's `state`."""

    def __init__(self, ctx: AppContext, run_view: RunView, state: TrainState):
        self.ctx, self.run_view, self.state = ctx, run_view, state
        self.task: Task | None = None

    @property
    def active(self) -> bool:
        return self.task is not None and self.task.running

    def start(self, run_dir: Path, silence_replay: Callable[[], None]) -> bool:
        """Follow `run_dir` (a pipeline: its current stage); False, with the reason shown, when it cannot be."""
        if not run_dir.is_dir():
            self.ctx.report_error(f"{run_dir} is not a folder.", title="Cannot watch this run")
            return False

        try:
            run_dir, note = folder_to_watch(run_dir)
        except ValueError as exc:
            self.ctx.report_error(str(exc), title="Cannot watch this run")
            return False
        if note:
            self.run_view.log("info", note)
        self.stop()
        silence_replay()
        # run.json may not be written yet, or be another version's: the curves still come, in the default panels
        with contextlib.suppress(SpecError, OSError):
            self.run_view.set_method(method_of(RunConfig.load(run_dir / "run.json")).key)
        self.state.watch(run_dir)
        self.run_view.begin(training=False, progress=f"watching {run_dir.name}: waiting for its metrics…",
                            status=f"Watching the run folder {run_dir}")
        controls = Controls()
        # polled at about the plots' own redraw pace
        self.task = self.ctx.runner.start("watch", lambda: watch_run(run_dir, controls.stop, poll_s=0.25), controls)
        self.task.produced.connect(self.run_view.show)
        self.task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Cannot watch this run"))
        self.task.finished.connect(self._finished)
        from desktop_app.engine.session import launched_torchrun  # lazy: numpy

        self.run_view.show_watching(run_dir, stoppable=launched_torchrun(run_dir) is not None)
        self.run_view.log("info", f"watching {run_dir} (launched outside the window)")
        return True

    def stop(self) -> None:
        """Stop following the watched run (its process goes on; only the window stops reading)."""
        task, self.task = self.task, None
        if task is not None and task.running:
            task.silence()  # nothing it still yields reaches the display that now shows something else
            task.cancel()
            watched = self.state.watched_dir
            self.run_view.log("info", f"stopped watching {watched.name if watched else 'the run'}")
            self.run_view.set_progress(self.run_view.progress.format().replace("watching", "watched", 1))
        self.run_view.hide_watching()

    def stop_run(self) -> bool:
        """Stop the watched run's processes (the window launched them: RUN/launch.json), after asking; the watch
        goes on until they have saved and ended. True when they were asked to stop."""
        from desktop_app.engine.session import stop_launched  # lazy: numpy

        run_dir = self.state.watched_dir
        if run_dir is None or not self.active:
            return False
        if not self.ctx.confirm("Stop the run?", f"Stop training {run_dir.name}? Its processes finish the step they "
                                "are on, save a checkpoint and end; Library → Resume continues it later.",
                                self.run_view):
            return False
        self.run_view.stop_run_btn.setEnabled(False)  # once: the processes are saving
        if not stop_launched(run_dir):
            self.run_view.log("warning", f"the processes of {run_dir.name} have already ended")
            return False
        self.run_view.log("info", f"asked the processes of {run_dir.name} to stop: they save a checkpoint first")
        self.run_view.set_progress(f"watching {run_dir.name}: stopping (saving a checkpoint)…")
        return True

    def _finished(self) -> None:
        self.run_view.end()
        self.run_view.hide_watching()
        self.task = None

