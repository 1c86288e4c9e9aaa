"""Train tab: method, hyperparameters, start/pause/stop/save-now/resume, and the run display beside them.

Methods: pretraining on a prepared dataset (model from the Model tab), and the fine-tuning / reinforcement
methods on a base model (SFT, LoRA, QLoRA, DPO, GRPO, self-play), whose fields live in `MethodPanel`.
Every method builds one RunRequest; the engine plans and starts the run (engine/train/request.py) in the background
runner (train_jobs.py).
A Pipeline (`PipelineEditor`) chains stages of those methods and runs the engine's `run_pipeline` instead.
What a job yields, a run shown again (engine/runs.py `replay_run`) and a run launched outside the window and
watched (`watch_run`) all reach the one `RunView`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QPushButton, QSplitter, QVBoxLayout, QWidget

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import (
    CheckpointSaved,
    Controls,
    DatasetReady,
    Event,
    Finished,
    RunFolder,
    StageStarted,
    StepMetrics,
)
from desktop_app.engine.methods import PIPELINE
from desktop_app.engine.model.hub_cache import model_name
from desktop_app.engine.pipeline_folder import PIPELINE_FILE, is_pipeline_dir, read_state, stage_dir
from desktop_app.engine.recipes.selfplay_demo import DemoSettings, demo_plan
from desktop_app.engine.runs import pipeline_root, replay_run
from desktop_app.engine.session import PipelineRun, ProcessFailed, ResumeRun, Session, open_session
from desktop_app.engine.specs import ModelSpec, RunConfig, SpecError
from desktop_app.engine.train.request import RunRequest
from desktop_app.ui import train_jobs
from desktop_app.ui.background import Task
from desktop_app.ui.context import AppContext
from desktop_app.ui.tabs.multi_process import MultiProcessRuns
from desktop_app.ui.tabs.run_watch import RunWatch
from desktop_app.ui.tabs.train_commands import TrainCommands
from desktop_app.ui.tabs.train_dialogs import CliDialog
from desktop_app.ui.tabs.train_sweep import TrainSweeps
from desktop_app.ui.train_state import DEMO, PIPELINE_JOB, RUN, JobStart, TrainState, start_hint
from desktop_app.ui.widgets.record_preview import RecordPreview
from desktop_app.ui.widgets.run_view import PLOT_FAMILY, RunView
from desktop_app.ui.widgets.train_setup import SAMPLE_DATASET, TrainSetup

STARTING = "starting… (loading the engine)"


class TrainTab(TrainCommands, QWidget):
    run_changed = Signal(str)  # run folder of the current/shown run
    checkpoint_saved = Signal(str)
    dataset_prepared = Signal(str)
    selfplay_demo_requested = Signal()  # the main window connects the CPU demo (see start_selfplay_demo)
    next_step_requested = Signal(str, str)  # (chat | export | merge | finetune, run folder) once a run has ended

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.state = TrainState()  # what runs, what is shown, what can be resumed: the tab renders it
        self.task: Task | None = None  # the training job
        self.replay_task: Task | None = None  # a finished run's history being read back
        self.cli_dialog: CliDialog | None = None
        self.setup = TrainSetup(ctx)
        self.pipeline = self.setup.pipeline_editor  # the Pipeline method's stages, in the setup column
        self.record_preview = RecordPreview(self.ctx.runner)
        self.run_view = RunView(self.record_preview)
        self.watcher = RunWatch(ctx, self.run_view, self.state)  # runs followed from outside the window
        self.multi = MultiProcessRuns(self, self)  # runs on several processes (torchrun) and their failures
        self.sweeps = TrainSweeps(self)  # Search settings…: a sweep of the form's run, in its own window
        body = QSplitter(Qt.Orientation.Horizontal)
        body.addWidget(self._build_left())
        body.addWidget(self.run_view)
        body.setStretchFactor(0, 0)
        body.setStretchFactor(1, 1)
        body.setSizes([380, 880])
        body.setChildrenCollapsible(False)
        root = QVBoxLayout(self)
        root.addWidget(self.setup.top_bar)
        root.addWidget(self.multi.bar)
        root.addWidget(body, 1)
        self._connect()
        self._on_method_changed()

    def _build_left(self) -> QWidget:
        """What to train (the method line goes on top of the tab), and the controls under it."""
        self.start_btn = QPushButton("Start training")
        self.start_btn.setProperty("primary", True)
        self.start_btn.setObjectName("startButton")
        self.pause_btn = QPushButton("Pause")
        self.stop_btn = QPushButton("Stop")
        self.save_btn = QPushButton("Save now")
        self.resume_btn = QPushButton("Resume a run…")
        self.cli_btn = QPushButton("Show CLI command")
        self.watch_btn = QPushButton("Watch a run…")
        self.watch_btn.setObjectName("watchButton")
        self.watch_btn.setToolTip("Follow a run launched outside the window (CLI, torchrun): its curves update live "
                                  "from its metrics.jsonl; nothing is written to it")
        for b in (self.pause_btn, self.stop_btn, self.save_btn):
            b.setEnabled(False)
        left_box = QWidget()
        ll = QVBoxLayout(left_box)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.setup, 1)
        row1 = QHBoxLayout()
        row1.addWidget(self.start_btn, 2)
        row1.addWidget(self.pause_btn, 1)
        row1.addWidget(self.stop_btn, 1)
        row2 = QGridLayout()  # two by two: the column stays narrow on a small screen
        for i, b in enumerate((self.save_btn, self.cli_btn, self.resume_btn, self.watch_btn)):
            row2.addWidget(b, i // 2, i % 2)
        row2.addWidget(self.sweeps.button, 2, 0, 1, 2)
        ll.addLayout(row1)
        ll.addLayout(row2)
        return left_box

    def _connect(self) -> None:
        self.start_btn.clicked.connect(lambda _=False: self.start())
        self.pause_btn.clicked.connect(lambda _=False: self.toggle_pause())
        self.stop_btn.clicked.connect(lambda _=False: self.stop())
        self.save_btn.clicked.connect(lambda _=False: self.save_now())
        self.resume_btn.clicked.connect(self._resume_dialog)
        self.cli_btn.clicked.connect(lambda _=False: self.show_cli_command())
        self.watch_btn.clicked.connect(self._watch_dialog)
        self.run_view.stop_watch_btn.clicked.connect(lambda _=False: self.stop_watching())
        self.run_view.stop_run_btn.clicked.connect(lambda _=False: self.watcher.stop_run())
        self.run_view.step_shown.connect(self._on_step_shown)
        self.run_view.error.connect(lambda exc: self.ctx.report_exception(exc, title="Export failed"))
        self.run_view.next_step.connect(self.next_step_requested)
        self.setup.method_changed.connect(self._on_method_changed)
        self.setup.changed.connect(self._update_preview_source)
        self.setup.warning.connect(lambda message: self.run_view.log("warning", message))
        self.setup.method_panel.demo_requested.connect(self.start_selfplay_demo)

    # --- the state, read-only for the window and the tests ---
    @property
    def run_dir(self) -> Path | None:
        return self.state.run_dir

    @property
    def config(self) -> RunConfig | None:
        return self.state.config

    @property
    def steps_seen(self) -> int:
        return self.state.steps_seen

    @property
    def pipeline_dir(self) -> Path | None:
        return self.state.pipeline_dir

    @property
    def pipeline_running(self) -> bool:
        return self.state.pipeline_running

    @property
    def stage_index(self) -> int:
        return self.state.stage_index

    @property
    def watched_dir(self) -> Path | None:
        return self.state.watched_dir

    def _on_method_changed(self) -> None:
        """The display fits the method chosen: its plot panels, the record preview or the task browser."""
        m = self.setup.current_method()
        view = self.run_view
        view.view_tabs.setTabVisible(view.preview_index, m.data in ("sft", "dpo"))
        view.view_tabs.setTabVisible(view.browser_index, m.key == "selfplay")
        if not self.running:
            pipeline = m is PIPELINE
            stages = self.pipeline.stages
            key = stages[0].method if pipeline and stages else "sft" if pipeline else m.key
            if not self.watching and view.plots.series and PLOT_FAMILY.get(key) != PLOT_FAMILY.get(view.method):
                view.clear()  # another method's curves (a run shown before) would read as this one's
                view.next_bar.setVisible(False)
                view.set_progress("ready", 0)
            view.set_method(key)
            view.status_label.setText(start_hint(m))
        self._update_preview_source()

    def _update_preview_source(self) -> None:
        panel = self.setup.method_panel
        if self.setup.current_method().data in ("sft", "dpo"):
            self.record_preview.set_source(panel.base_model(), panel.data_files(), panel.loss_on())

    # --- hooks for the main window (drops, Library) ---
    def accepts_data_drops(self) -> bool:
        """True when the chosen method reads data files (the window can route drops here instead of the Data tab)."""
        return bool(self.setup.current_method().data) and not self.running

    def add_data_files(self, paths: list[str]) -> int:
        """Add dropped/chosen files or folders to the method's data list; returns how many were added."""
        return self.setup.method_panel.data_list.add_paths(list(paths))

    def use_as_base(self, path: str, method: str = "sft") -> None:
        """Fine-tune `path` (a run, checkpoint, export or HF folder): pick a fine-tuning method if none is chosen."""
        if self.running:
            self.ctx.info("Stop the running training before choosing another base model.")
            return
        if not self.setup.current_method().finetune or self.setup.current_method() is PIPELINE:
            self.setup.set_method(method)
        self.setup.method_panel.base_picker.set_path(str(path))

    def set_model_spec(self, spec: ModelSpec | None) -> None:
        """The Model tab's spec: what pretraining trains."""
        self.setup.set_model_spec(spec)

    def set_base_model(self, path: str) -> None:
        """The Model tab's base: pretraining continues it."""
        self.setup.set_base_model(path)

    def select_dataset(self, path: str) -> None:
        self.setup.select_dataset(path)

    def refresh_datasets(self) -> None:
        self.setup.refresh_datasets()

    def set_gpu_count(self, count: int) -> None:
        self.setup.set_gpu_count(count)

    def use_quickstart_settings(self) -> None:
        """The first launch's short run: pretraining on the sample corpus."""
        self.setup.set_method("pretraining")
        self.setup.select_dataset(SAMPLE_DATASET)
        self.setup.use_quickstart_settings()

    # --- starting ---
    @property
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def start(self) -> bool:
        setup = self.setup
        if self.running:
            self.ctx.info("Training is already running.")
            return False
        if setup.current_method() is PIPELINE:
            return self._start_pipeline()
        problems = setup.form.validate()
        if problems:
            self.ctx.report_error("The hyperparameters have problems:\n" + "\n".join(problems),
                                  title="Check the settings")
            return False
        if setup.current_method().finetune:
            return self._start_method()
        if setup.model_spec is None and not setup.base_model:
            self.ctx.report_error("The model spec on the Model tab has problems; fix them first.",
                                  title="Check the model")
            return False
        try:
            sample = setup.sample_corpus()
        except UserError as exc:
            self.ctx.report_error(str(exc), title="No dataset")
            return False
        request = setup.run_request(sample.dataset_dir if sample else setup.dataset_box.currentData())
        request.sample = sample
        name = setup.model_spec.family if setup.model_spec and not setup.base_model else model_name(setup.base_model)
        return self._launch_new(request, name, "This run cannot start", activity="preparing the sample corpus")

    def _start_method(self) -> bool:
        """Fine-tuning / RL methods: check the fields, let the engine plan the run, start it."""
        m = self.setup.current_method()
        problems = self.setup.method_panel.problems()
        if problems:
            self.ctx.report_error(f"{m.label} cannot start yet:\n" + "\n".join(f"• {p}" for p in problems),
                                  title="Check the method settings")
            return False
        base = self.setup.method_panel.base_model()
        if not self._launch_new(self.setup.run_request(), f"{m.key}-{model_name(base)}",
                                f"The engine refuses this {m.label} run", title="Check the method settings"):
            return False
        self.setup.method_panel.base_picker.remember(base)
        return True

    def resume_run(self, run_dir: str | Path) -> bool:
        if self.running:
            self.ctx.info("Training is already running.")
            return False

        root = pipeline_root(run_dir)  # a pipeline, or one of its stages: the pipeline goes on from there
        if root is not None:
            return self._resume_pipeline(root)
        run_dir = Path(run_dir)
        try:
            config = RunConfig.load(run_dir / "run.json")
        except Exception as exc:
            self.ctx.report_exception(exc, title="Cannot resume this run")
            return False
        try:
            self.setup.apply_config(config)
        except Exception as exc:  # a config of a method this window does not know: resume it as it is
            self.run_view.log("warning", f"the form cannot show this run's settings: {exc}")
        return self._launch_resume(config, run_dir)

    def _launch_new(self, request: RunRequest, name: str, refusal: str, *, title: str = "Check the settings",
                    activity: str = "") -> bool:
        """A new run as the engine's session opens it (planned, fitted, checked and preflighted once), unless it
        cannot start or cannot work here (the reasons go to the person; nothing is created). Its warnings, shown
        beside the settings, go to the run's log too."""
        run_dir = self.ctx.workspace.new_run_dir(name)
        try:
            session = open_session(request, run_dir, machine=self.setup.machine(), records=self.setup.record_count())
        except SpecError as exc:
            self.ctx.report_error(f"{refusal}:\n" + "\n".join(f"• {p}" for p in exc.problems), title=title)
            return False
        except UserError as exc:
            self.ctx.report_error(f"{refusal}:\n• {exc}", title=title)
            return False
        errors = [f"• {message}" for message in session.errors()]
        if errors:
            self.ctx.report_error("This run cannot work on this machine:\n" + "\n".join(errors),
                                  title="Check the settings")
            return False
        started = self._start_session(session, JobStart(RUN, run_dir, f"starting run {run_dir.name}", STARTING,
                                                        f"Run folder: {run_dir}", session.prepared.config, activity))
        for note in session.notes:
            self.run_view.log("info", f"model: {note}")
        for finding in session.findings:
            self.run_view.log("warning", f"before the start: {finding.message}")
        return started

    def _start_session(self, session: Session, start: JobStart) -> bool:
        """Run an opened session in the background runner: on several processes with what the tab adds for them,
        else in this window's engine."""
        controls = Controls()
        job = self.multi.job(session) or (lambda: train_jobs.session_job(session, controls), controls)
        return self._run_job(*job, start)

    def _launch_resume(self, config: RunConfig, run_dir: Path) -> bool:
        try:
            session = open_session(ResumeRun(run_dir))
        except UserError as exc:
            self.ctx.report_exception(exc, title="Cannot resume this run")
            return False
        if session.processes < 2:  # in this window: data files changed since the start are the person's choice
            accept = self._accept_changed_data(config, run_dir)
            if accept is None:
                return False
            session = open_session(ResumeRun(run_dir, accept_change=accept))
        return self._start_session(session, JobStart(RUN, run_dir, f"resuming run {run_dir.name}", STARTING,
                                                     f"Run folder: {run_dir}", config))

    def _accept_changed_data(self, config: RunConfig, run_dir: Path) -> bool | None:
        """False when no data file changed since the run started; True when some did and the person continues on
        the new data; None when they keep the run as it is (nothing starts)."""
        from desktop_app.engine.train.data_files import touched_files  # lazy: start-up

        touched = touched_files(run_dir, config)
        if not touched:
            return False
        names = ", ".join(Path(t).name for t in touched)
        return True if self.ctx.confirm(
            "The data changed", f"{names} changed since this run started.\n\nContinue the run on the new data? Its "
            "examples then differ from those it has trained on so far. (No: nothing starts; put the files back as "
            "they were to resume exactly.)", self) else None

    def start_selfplay_demo(self, minutes: float = 15.0, train_overrides: dict[str, Any] | None = None) -> bool:
        """The self-play CPU demo (seed corpus -> pretrain -> self-play) in a new folder of the workspace's runs
        (`train_overrides`: TrainSpec fields its runs take, see train_jobs.demo_job). Of the form, only "First tasks
        from" applies: the demo's own settings are the rest."""
        if self.running:
            return False
        tasks_from = str(self.setup.method_panel.options_dict().get("tasks_from", ""))
        self.selfplay_demo_requested.emit()
        out = self.ctx.workspace.folder("runs") / time.strftime("selfplay-demo-%Y%m%d-%H%M%S")
        self.setup.show_plan(demo_plan(minutes, DemoSettings(tasks_from=tasks_from)))
        controls = Controls()
        return self._run_job(lambda: train_jobs.demo_job(out, controls, minutes, train_overrides, tasks_from), controls,
                             JobStart(DEMO, out, f"self-play CPU demo in {out}", "self-play demo: writing the seed "
                                      "corpus…", f"Demo folder: {out}", activity="self-play demo"))

    def _run_job(self, factory: Callable[[], Iterable[Event]], controls: Controls, start: JobStart) -> bool:
        """Start a training job (a run, a pipeline, the demo) in the background runner, the tab following it."""
        if self.sweeps.refuses_training():
            return False
        self.stop_watching()  # the display now belongs to this job
        self._silence_replay()
        self.state.begin(start.job, start.run_dir, start.config, start.stages)
        self.run_view.begin(training=True, progress=start.progress, status=start.status, activity=start.activity,
                            pipeline_stages=start.stages)
        self.run_view.note(start.log_line)
        self.run_view.blocked_banner.follow(controls)  # a save the disk refuses waits for the banner's answer
        self.task = self.ctx.runner.start("train", factory, controls)
        self.task.produced.connect(self._on_event)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_task_finished)
        self._set_running(True)
        return True

    # --- pipelines ---
    def _start_pipeline(self) -> bool:
        editor = self.pipeline
        problems = editor.problems()
        if problems:
            self.ctx.report_error("The pipeline cannot start yet:\n" + "\n".join(f"• {p}" for p in problems),
                                  title="Check the pipeline")
            return False
        out = self.ctx.workspace.new_run_dir("pipeline-" + "-".join(s.name for s in editor.stages)[:48])
        editor.set_states([("waiting", "")] * len(editor.stages))
        return self._launch_pipeline(editor.pipeline(), out, resume=False)

    def _resume_pipeline(self, root: Path) -> bool:
        if not self._show_pipeline(root):
            return False
        if all(state == "done" for state in self.pipeline.stage_states()):
            self.ctx.info(f"Every stage of {root.name} is done: nothing to resume.")
            return False
        return self._launch_pipeline(None, root, resume=True)

    def _show_pipeline(self, root: Path) -> bool:
        """The pipeline folder's stages in the editor, with their states (from its pipeline_state.json)."""

        self.setup.set_method(PIPELINE.key)
        try:
            self.pipeline.set_pipeline(root / PIPELINE_FILE)
        except SpecError as exc:
            self.ctx.report_error(f"Cannot read the pipeline in {root}:\n" + "\n".join(f"• {p}" for p in exc.problems),
                                  title="Pipeline")
            return False
        self.pipeline.set_engine_states(read_state(root), ended=True)
        self.state.open_pipeline(root)
        return True

    def _launch_pipeline(self, source: dict[str, Any] | None, out: Path, *, resume: bool) -> bool:
        n = len(self.pipeline.stages)
        try:
            session = open_session(ResumeRun(out) if resume or source is None else PipelineRun(source), out)
        except UserError as exc:
            self.ctx.report_exception(exc, title="Cannot start the pipeline")
            return False
        return self._start_session(session, JobStart(PIPELINE_JOB, out,
                                      f"{'resuming' if resume else 'starting'} pipeline {out.name} ({n} stages)",
                                      "starting the pipeline… (loading the engine)", f"Pipeline folder: {out}",
                                      stages=n))

    def _on_stage_started(self, event: StageStarted) -> None:
        editor = self.pipeline
        editor.set_states(self.state.stage_states(editor.states, len(editor.stages)))
        editor.select_stage(event.index)
        self.run_view.status_label.setText(f"Pipeline folder: {self.pipeline_dir} · stage folder: {event.run_dir}")

    def _on_step_shown(self, item: StepMetrics) -> None:
        if self.state.pipeline_running:
            self.pipeline.set_stage_state(self.state.stage_index, "running",
                                                       self.state.stage_progress(item.step, item.total_steps))

    # --- controls ---
    def toggle_pause(self) -> None:
        if not self.running:
            return
        paused = self.task.controls.pause.is_set()
        self.task.pause(not paused)
        self.run_view.paused = not paused
        self.pause_btn.setText("Pause" if paused else "Resume")
        text = self.run_view.progress.format().replace(" · paused", "")
        self.run_view.set_progress(text + ("" if paused else " · paused"))
        self.run_view.log("info", "resumed" if paused else "paused (between steps)")

    def stop(self) -> None:
        if self.running:
            self.task.stop()
            self.stop_btn.setEnabled(False)
            self.run_view.set_progress("stopping: finishing the step and saving…")
        elif self.sweeps.running:  # the window's Stop: the search, as its own Stop does
            self.sweeps.dialog.stop()

    def save_now(self) -> None:
        if self.running:
            self.task.save_now()
            self.run_view.log("info", "a checkpoint will be saved at the next step")

    def _set_running(self, on: bool) -> None:
        for control in (self.pause_btn, self.stop_btn, self.save_btn):
            control.setEnabled(on)
        for control in (self.start_btn, self.resume_btn, self.watch_btn, self.sweeps.button):
            control.setEnabled(not on)
        self.setup.set_editable(not on)
        if not on:
            self.pause_btn.setText("Pause")

    # --- what the job yields ---
    def _on_event(self, event: Event) -> None:
        """The display renders every event; the tab keeps what it needs of the run and tells the window."""
        self.state.record(event)
        if isinstance(event, RunFolder):
            self.run_changed.emit(event.path)
        elif isinstance(event, StageStarted):
            self._on_stage_started(event)
        elif isinstance(event, ProcessFailed):
            self.multi.show_failed(event, self.run_dir)
        self.run_view.show(event)
        if isinstance(event, CheckpointSaved):
            self.checkpoint_saved.emit(event.path)
        elif isinstance(event, DatasetReady):
            self.run_view.log("info", f"sample corpus prepared: {event.path}")
            self.dataset_prepared.emit(event.path)
            self.setup.select_dataset(event.path)
            self.setup.dataset_box.setEnabled(False)
        elif isinstance(event, Finished) and event.reason == "failed":
            self.ctx.report_error(event.message or "Training failed.", title="Training failed")

    def _on_failed(self, message: str, details: str) -> None:
        self.run_view.log("error", message)
        self.run_view.set_progress("failed")
        self.ctx.report_error(message, details, title="Training failed")

    def _on_task_finished(self) -> None:
        self._set_running(False)
        self.run_view.end()
        last = self.run_view.last_finished
        if last is not None and last.reason in ("completed", "stopped", "early_stopped"):
            self.run_view.offer_next_steps()  # the job is over: what to do with the model it made
        if self.state.pipeline_running and self.pipeline_dir is not None:

            # the engine's record of where each stage ended
            self.pipeline.set_engine_states(read_state(self.pipeline_dir), ended=True)
        if self.state.job == DEMO:
            self.setup.show_plan(None)
        self.state.end()
        if self.run_dir is not None:
            self.run_changed.emit(str(self.run_dir))
        self.multi.ended()

    # --- runs shown again, runs watched ---
    def show_run_history(self, run_dir: str) -> None:
        """Show a finished run again (Library → 'show in plots'). A pipeline folder: its stages and their states,
        and the curves of its latest stage."""
        if self.running:
            self.ctx.info("Stop the running training before showing another run.")
            return
        self.stop_watching()

        if is_pipeline_dir(run_dir):
            if not self._show_pipeline(Path(run_dir)):
                return
            stages = [i for i, state in enumerate(self.pipeline.stage_states()) if state != "waiting"]
            if not stages:
                self.run_view.clear()
                self.run_view.status_label.setText(f"Pipeline {run_dir}: no stage has run yet")
                return
            stage = self.pipeline.stages[stages[-1]]
            self.pipeline.select_stage(stages[-1])
            run_dir = str(stage_dir(Path(run_dir), stages[-1], stage))
        else:
            # The form shows the run's method and settings: its panels (the task buffer of a self-play run) fit it.
            with contextlib.suppress(SpecError, OSError, KeyError, ValueError):
                self.setup.apply_config(RunConfig.load(Path(run_dir) / "run.json"))
        self.state.show(Path(run_dir))
        self.run_view.begin(training=False, status=f"Showing the history of {run_dir}")
        self.replay_task = self.ctx.runner.start("history", lambda: replay_run(run_dir))
        self.replay_task.produced.connect(self.run_view.show)
        self.replay_task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Cannot read the run's "
                                                                                     "metrics"))

    def _silence_replay(self) -> None:
        """A replay still reading must not draw over what the display shows next."""
        if self.replay_task is not None and self.replay_task.running:
            self.replay_task.silence()

    @property
    def watching(self) -> bool:
        return self.watcher.active

    def watch_run(self, run_dir: str | Path) -> bool:
        """Follow a run another process trains (CLI, torchrun): its metrics.jsonl feeds the display as it grows,
        until it finishes or Stop watching. Read-only: nothing is written to the run."""
        if self.running:
            self.ctx.info("Stop the running training before watching another run.")
            return False
        return self.watcher.start(Path(run_dir), self._silence_replay)

    def stop_watching(self) -> None:
        """Stop following the watched run (its process goes on; only the window stops reading)."""
        self.watcher.stop()

    def stop_timers(self) -> None:
        self.run_view.stop_timers()
