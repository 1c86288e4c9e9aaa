"""The main window: five tabs and the wiring between them (tabs never import each other).

Closing the window while a run trains stops it gracefully (the engine saves a checkpoint) and remembers the run
in the settings; the next launch offers to resume it (once), whatever its method: pretraining, SFT, LoRA, DPO...

Kept import-light on purpose: Qt, pyqtgraph and stdlib-only engine modules. torch/transformers are
imported by the tasks that need them, and preloaded in the background once the window is up.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QDragEnterEvent, QDropEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from desktop_app import __version__
from desktop_app.engine.paths import resources_dir
from desktop_app.engine.workspace import Workspace, workspace_problem
from desktop_app.ui import gc_guard, wheel_guard
from desktop_app.ui.context import AppContext
from desktop_app.ui.exception_hooks import ExceptionRouter
from desktop_app.ui.tabs.data_tab import DataTab
from desktop_app.ui.tabs.generate_sources import checkpoint_folders
from desktop_app.ui.tabs.generate_tab import GenerateTab
from desktop_app.ui.tabs.library_tab import LibraryTab, resumable, run_outcome
from desktop_app.ui.tabs.model_tab import ModelTab
from desktop_app.ui.tabs.train_tab import TrainTab
from desktop_app.ui.welcome_banner import WelcomeBanner
from desktop_app.ui.widgets.drop_zone import paths_from_mime
from desktop_app.ui.widgets.elided_label import ElidedLabel
from desktop_app.ui.widgets.hub_access import hub_routes
from desktop_app.ui.window_size import PREFERRED_SIZE, fit_to_screen

log = logging.getLogger(__name__)

TAB_NAMES = ("model", "data", "train", "generate", "library")
UNFINISHED_RUN_KEY = "unfinished_run"  # settings key: the run a window close stopped mid-way


def app_settings() -> QSettings:
    return QSettings("AZR", "AZR Model Trainer")


def _preload_heavy_modules():
    """Runs in the worker thread after the window shows: warm the imports a first job needs."""
    import torch

    yield ("device", _device_name())
    yield ("gpus", torch.cuda.device_count() if torch.cuda.is_available() else 0)
    import transformers  # noqa: F401

    yield ("preloaded", "")


def _device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"CUDA · {torch.cuda.get_device_name(0)}"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "MPS (Apple GPU)"
    return f"CPU · {torch.get_num_threads()} threads"


class MainWindow(QMainWindow):
    def __init__(self, workspace: Workspace | None = None, *, settings: QSettings | None = None,
                 preload: bool = True, offer_resume: bool = True):
        super().__init__()
        gc_guard.install()  # cyclic GC only in this thread: Qt objects must never die in a worker
        self.settings = settings or app_settings()
        self.setWindowTitle("AZR Model Trainer")
        icon = _app_icon()
        if icon is not None:
            self.setWindowIcon(icon)
        self.setAcceptDrops(True)
        if workspace is None:
            workspace = self._initial_workspace()
        self.ctx = AppContext(workspace, self)
        self.exception_router = ExceptionRouter(self.ctx, self)  # a failing slot shows in the window too
        self.exception_router.install()
        self._close_requested = False
        self._ask_on_close = True
        self.preloaded = False

        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(False)
        self.model_tab = ModelTab(self.ctx)
        self.data_tab = DataTab(self.ctx)
        self.train_tab = TrainTab(self.ctx)
        self.generate_tab = GenerateTab(self.ctx)
        self.library_tab = LibraryTab(self.ctx)
        for tab, title in ((self.model_tab, "Model"), (self.data_tab, "Data"), (self.train_tab, "Train"),
                           (self.generate_tab, "Generate"), (self.library_tab, "Library")):
            self.tabs.addTab(tab, title)

        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(10, 8, 10, 6)
        self.banner = WelcomeBanner(self.settings, self.ctx.workspace.folder("runs"), self.quick_start)
        layout.addWidget(self.banner)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self._make_actions()
        self._make_status_bar()
        self._wire()
        self._restore()

        if preload:
            QTimer.singleShot(250, self._start_preload)
        if offer_resume and self.unfinished_run() is not None:
            QTimer.singleShot(0, self.offer_unfinished_run)  # once the window is up: the question needs a parent

    # --- construction ---
    def _initial_workspace(self) -> Workspace:
        if os.environ.get("AZR_WORKSPACE"):
            return Workspace.open()
        last = self.settings.value("workspace", "", str)
        if last and Path(last).is_dir():
            try:
                return Workspace.open(last)
            except OSError:
                log.warning("last workspace %s is not usable", last)
        return Workspace.open()

    def _action(self, text: str, slot: Callable[[], object], shortcut: str | QKeySequence.StandardKey | None = None,
                tip: str = "") -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        act.setStatusTip(tip or text)
        act.setToolTip(f"{tip or text}" + (f" ({act.shortcut().toString()})" if shortcut else ""))
        act.triggered.connect(lambda _checked=False: slot())
        return act

    def _make_actions(self) -> None:
        action = self._action
        self.act_workspace = action("Open workspace…", self.choose_workspace, "Ctrl+Shift+W",
                                    "Choose the folder that holds datasets, models and runs")
        self.act_add_files = action("Add training files…", self._add_training_files, QKeySequence.StandardKey.Open,
                                    "Add text files to the dataset (Data tab)")
        self.act_save_spec = action("Save model spec…", self._save_model_spec, QKeySequence.StandardKey.Save,
                                    "Save the Model tab's spec as JSON")
        self.act_quit = action("Quit", self.close, QKeySequence.StandardKey.Quit)
        self.act_train = action("Start training", self._start_training, "Ctrl+Return", "Start training")
        self.act_pause = action("Pause / resume", self.train_tab.toggle_pause, "Ctrl+P")
        self.act_stop = action("Stop", self._stop_current, "Ctrl+.", "Stop the running job (training saves first)")
        self.act_save_now = action("Save checkpoint now", self.train_tab.save_now, "Ctrl+Shift+S")
        self.act_generate = action("Generate", self._start_generation, "Ctrl+G", "Generate text")
        self.act_open_ws_folder = action("Open workspace folder", self.open_workspace_folder)
        self.act_logs = action("Open log folder", lambda: _open_folder(self.ctx.workspace.log_dir))
        self.act_about = action("About", self._about)
        self.act_sandbox = action("Sandbox status…", self.show_sandbox_status,
                                  tip="Which isolation layers protect this computer from model-written programs")
        self.act_docs = action("Documentation", self.open_docs, QKeySequence.StandardKey.HelpContents,
                               "How the app works: methods, data formats, the CLI, the local API")
        self.act_shortcuts = action("Keyboard shortcuts", self.show_shortcuts, tip="Every key the window answers to")
        # A tab's own keys work on that tab only: Ctrl+Enter typed in the Generate tab's prompt must not start a
        # training, Ctrl+S on the Train tab must not save the Model tab's spec. The menus still run them anywhere.
        self.scoped_actions = ((self.act_train, self.train_tab, "Train tab"),
                               (self.act_generate, self.generate_tab, "Generate tab"),
                               (self.act_save_spec, self.model_tab, "Model tab"),
                               (self.act_add_files, self.data_tab, "Data tab"))
        for act, tab, _where in self.scoped_actions:
            act.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            tab.addAction(act)
        self._make_menus()
        self._make_toolbar()

    def _make_menus(self) -> None:
        menu = self.menuBar()
        _add_actions(menu.addMenu("&File"), self.act_workspace, self.act_open_ws_folder, None, self.act_add_files,
                     self.act_save_spec, None, self.act_quit)
        _add_actions(menu.addMenu("&Run"), self.act_train, self.act_pause, self.act_save_now, self.act_stop, None,
                     self.act_generate)
        m = menu.addMenu("&View")
        for i, name in enumerate(("Model", "Data", "Train", "Generate", "Library")):
            m.addAction(self._action(name, lambda i=i: self.tabs.setCurrentIndex(i), f"Ctrl+{i + 1}"))
        self.view_actions = m.actions()
        _add_actions(menu.addMenu("&Help"), self.act_docs, self.act_shortcuts, None, self.act_sandbox, self.act_logs,
                     None, self.act_about)

    def _make_toolbar(self) -> None:
        tb = self.addToolBar("Main")
        tb.setObjectName("mainToolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        _add_actions(tb, self.act_workspace, self.act_add_files, None, self.act_train, self.act_pause,
                     self.act_save_now, self.act_stop, None, self.act_generate)

    def _make_status_bar(self) -> None:
        bar = self.statusBar()
        self.workspace_label = ElidedLabel()  # a long path must not widen the window
        self.workspace_label.setMaximumWidth(420)
        self.device_label = QLabel("device: detecting…")
        self.memory_label = QLabel()
        for w in (self.workspace_label, self.device_label, self.memory_label):
            w.setProperty("role", "muted")
            bar.addPermanentWidget(w)
        self._update_workspace_label()
        self._status_timer = QTimer(self)
        self._status_timer.setObjectName("azr-status-memory")
        self._status_timer.setInterval(2000)
        self._status_timer.timeout.connect(self._update_memory)
        self._status_timer.start()
        self._update_memory()

    def _wire(self) -> None:
        c = self.ctx
        c.status_message.connect(lambda text: self.statusBar().showMessage(text, 8000))
        c.workspace_changed.connect(lambda _ws: self._update_workspace_label())
        # Model -> Train: the spec (or base folder) to train.
        self.model_tab.spec_changed.connect(self.train_tab.set_model_spec)
        self.model_tab.base_model_changed.connect(self.train_tab.set_base_model)
        self.train_tab.set_model_spec(self.model_tab.current_spec())
        # Data -> Train: a prepared dataset becomes the training dataset.
        self.data_tab.dataset_ready.connect(self.train_tab.select_dataset)
        self.data_tab.dataset_ready.connect(lambda _p: c.workspace_items_changed.emit())
        # Train -> Generate / Library: new checkpoints appear in pickers.
        self.train_tab.run_changed.connect(lambda _p: c.workspace_items_changed.emit())
        self.train_tab.checkpoint_saved.connect(lambda _p: c.workspace_items_changed.emit())
        c.workspace_items_changed.connect(self.generate_tab.refresh_sources)
        c.workspace_items_changed.connect(self.library_tab.refresh)
        c.workspace_items_changed.connect(self.data_tab.refresh_datasets)
        c.workspace_items_changed.connect(self.train_tab.refresh_datasets)
        # Library -> others.
        self.library_tab.show_run_requested.connect(self._show_run)
        self.library_tab.generate_requested.connect(self._generate_from)
        self.library_tab.dataset_requested.connect(self._use_dataset)
        self.library_tab.resume_requested.connect(self.resume_run)
        self.library_tab.watch_requested.connect(self.watch_run)
        self.train_tab.next_step_requested.connect(self.next_step)
        self.train_tab.sweeps.open_run_requested.connect(lambda run: self.next_step("library", run))
        self.train_tab.sweeps.model_settings_chosen.connect(self.model_tab.form.set_values)  # the best trial's
        hub_routes(c).next_step.connect(self.next_step)  # Get a model: "Chat with it", "Fine-tune it"
        self.tabs.currentChanged.connect(lambda _i: self._focus_tab())
        guard = wheel_guard.install()  # the wheel scrolls forms; it changes only a field the person focused
        if guard is not None:
            self.tabs.currentChanged.connect(guard.sweep_soon)
        c.runner.task_started.connect(lambda _k: self._update_actions())
        c.runner.task_started.connect(lambda _k: gc_guard.hold(True))
        c.runner.task_finished.connect(self._on_task_finished)
        self._update_actions()

    def _restore(self) -> None:
        geometry = self.settings.value("geometry")
        restored = isinstance(geometry, QByteArray) and not geometry.isEmpty() and self.restoreGeometry(geometry)
        if not restored:
            self.resize(*PREFERRED_SIZE)
        fit_to_screen(self, center=not restored)  # a 768-pixel screen must still show the status bar
        tab = self.settings.value("tab", "model", str)
        if tab in TAB_NAMES:
            self.tabs.setCurrentIndex(TAB_NAMES.index(tab))

    def save_settings(self) -> None:
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("tab", TAB_NAMES[self.tabs.currentIndex()])
        self.settings.setValue("workspace", str(self.ctx.workspace.root))
        self.settings.sync()

    # --- status ---
    def _update_workspace_label(self) -> None:
        self.workspace_label.setText(f"workspace: {self.ctx.workspace.root}")

    def _update_memory(self) -> None:
        try:
            import psutil

            rss = psutil.Process().memory_info().rss
            vm = psutil.virtual_memory()
            self.memory_label.setText(f"memory: {rss / 2**30:.2f} GiB used by the app · "
                                      f"{vm.available / 2**30:.1f} GiB free")
        except Exception:
            self.memory_label.setText("")

    def _start_preload(self) -> None:
        if self._close_requested:
            return
        task = self.ctx.runner.start("preload", _preload_heavy_modules)
        task.produced.connect(self._on_preload_item)

    def _on_preload_item(self, item: object) -> None:
        kind, value = item  # type: ignore[misc]
        if kind == "device":
            self.device_label.setText(f"device: {value}")
        elif kind == "gpus":
            self.train_tab.set_gpu_count(int(value))
        elif kind == "preloaded":
            self.preloaded = True

    def _update_actions(self) -> None:
        training = self.ctx.runner.is_running("train")
        self.act_stop.setEnabled(bool(self._busy_kinds()))  # something to stop: a run, a generation, an export...
        self.act_pause.setEnabled(training)
        self.act_save_now.setEnabled(training)
        self.act_workspace.setEnabled(not training)

    def _on_task_finished(self, kind: str) -> None:
        gc_guard.hold(bool(self.ctx.runner.running_kinds()))
        self._update_actions()
        if self._close_requested and not self._busy_kinds():
            QTimer.singleShot(0, self.close)

    def _busy_kinds(self) -> list[str]:
        return [k for k in self.ctx.runner.running_kinds() if k != "preload"]

    # --- actions ---
    def _focus_tab(self) -> None:
        """Keyboard focus into the tab shown, so its own shortcuts work at once (not only after a click in it)."""
        page = self.tabs.currentWidget()
        # Not a combo box: an arrow key pressed next would change the preset or the method.
        target = {self.data_tab: self.data_tab.drop_zone.add_files, self.generate_tab: self.generate_tab.prompt,
                  self.library_tab: self.library_tab.tree}.get(page, page)
        if target is page:
            page.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        target.setFocus(Qt.FocusReason.OtherFocusReason)

    def _add_training_files(self) -> None:
        self.tabs.setCurrentWidget(self.data_tab)
        self.data_tab.drop_zone.add_files.click()

    def _save_model_spec(self) -> None:
        self.tabs.setCurrentWidget(self.model_tab)
        self.model_tab.save_btn.click()

    def next_step(self, action: str, run: str) -> None:
        """What to do with a run that ended: chat with it, export it (merged, for adapters), fine-tune it, see it in
        the Library."""
        if not run:
            return
        if action == "chat":
            self.generate_tab.refresh_sources()
            self.generate_tab.select_source(run)
            self.tabs.setCurrentWidget(self.generate_tab)
        elif action in ("export", "merge", "library"):
            self.library_tab.refresh()
            self.library_tab.select(run)
            if action != "library":
                self.library_tab.merge_check.setChecked(True)
            self.tabs.setCurrentWidget(self.library_tab)
        elif action == "finetune":
            self.train_tab.use_as_base(run)
            self.tabs.setCurrentWidget(self.train_tab)

    def open_docs(self) -> None:
        from desktop_app.ui.help import open_docs  # lazy: start-up

        self.docs_dialog = open_docs(self.ctx, self)  # shown in the window where no browser opens it

    def show_shortcuts(self) -> None:
        from desktop_app.ui.help import ShortcutsDialog  # lazy: start-up

        where = {act: place for act, _tab, place in self.scoped_actions}
        actions = [(a, where.get(a, "")) for a in (
            self.act_train, self.act_pause, self.act_save_now, self.act_stop, self.act_generate, self.act_add_files,
            self.act_save_spec, self.act_workspace, *self.view_actions, self.act_docs, self.act_quit)]
        self.shortcuts_dialog = ShortcutsDialog(actions, self)
        self.shortcuts_dialog.show()

    def _start_training(self) -> None:
        self.tabs.setCurrentWidget(self.train_tab)
        self.train_tab.start()

    def quick_start(self, _checked: bool = False) -> None:
        """First-launch path: pretraining the tiny preset on the sample corpus, short evals; curves within a minute
        (whatever method the Train tab showed: the button says what it does)."""
        self.model_tab.set_base_model("")
        self.model_tab.preset_box.setCurrentText("tiny")
        self.train_tab.use_quickstart_settings()
        self._start_training()
        if self.train_tab.running:
            self.banner.setVisible(False)  # a run exists now: the welcome has done its job

    def _stop_current(self) -> None:
        current = self.tabs.currentWidget()
        if current is self.generate_tab and self.ctx.runner.is_running("generate"):
            self.generate_tab.stop()
        elif current is self.data_tab and self.ctx.runner.is_running("prepare"):
            self.data_tab.cancel()
        elif current is self.library_tab and self.library_tab.exporting():
            self.library_tab.cancel_export()
        else:
            self.train_tab.stop()

    def _start_generation(self) -> None:
        self.tabs.setCurrentWidget(self.generate_tab)
        self.generate_tab.generate()

    def _show_run(self, path: str) -> None:
        self.train_tab.show_run_history(path)
        self.tabs.setCurrentWidget(self.train_tab)

    def _generate_from(self, path: str) -> None:
        self.generate_tab.select_source(path)
        self.tabs.setCurrentWidget(self.generate_tab)

    def resume_run(self, path: str | Path) -> bool:
        """Continue a run from its newest good checkpoint on the Train tab (Library → Resume, the launch offer)."""
        self.tabs.setCurrentWidget(self.train_tab)
        return self.train_tab.resume_run(path)

    def watch_run(self, path: str | Path) -> None:
        """Follow a run launched outside the window (torchrun, the CLI) live on the Train tab (Library → Watch live)."""
        self.tabs.setCurrentWidget(self.train_tab)
        self.train_tab.watch_run(path)

    def unfinished_run(self) -> Path | None:
        """The run that closing the window stopped, if it can still be resumed: its folder with its run.json and a
        committed checkpoint, and it did not complete meanwhile (the last step can finish while it stops)."""
        value = self.settings.value(UNFINISHED_RUN_KEY, "", str)
        run = Path(value) if value else None
        if run is None or not resumable(run):
            return None
        return None if run_outcome(run) == "completed" else run

    def offer_unfinished_run(self) -> bool:
        """Ask (once) whether to resume the run the last window close stopped; True when it resumes."""
        run = self.unfinished_run()
        self.settings.remove(UNFINISHED_RUN_KEY)  # asked once: "No" is not asked again at every launch
        self.settings.sync()
        if run is None or self.train_tab.running:
            return False
        digits = checkpoint_folders(run)[-1].name.split("-")[-1]  # step-00000120
        step = int(digits) if digits.isdigit() else digits
        if not self.ctx.confirm("Resume the unfinished run?",
                                f"The run {run.name} was stopped when the window closed; its newest checkpoint is "
                                f"at step {step}.\n\nResume it now?", self):
            return False
        return self.resume_run(run)

    def _use_dataset(self, path: str) -> None:
        self.train_tab.select_dataset(path)
        self.data_tab.show_stats(path)
        self.tabs.setCurrentWidget(self.data_tab)

    def choose_workspace(self) -> None:
        if self._busy_kinds():
            self.ctx.report_error("Stop the running job before switching workspaces.", title="Busy")
            return
        folder = QFileDialog.getExistingDirectory(self, "Choose a workspace folder", str(self.ctx.workspace.root))
        if folder:
            self.set_workspace(folder)

    def set_workspace(self, folder: str | Path) -> None:
        problem = workspace_problem(folder)  # read-only media, no permission: said before anything switches
        if problem is None:
            try:
                ws = Workspace.open(folder)
            except OSError as exc:
                problem = f"Cannot use {folder} as a workspace: {exc.strerror or exc}"
        if problem is not None:
            self.ctx.report_error(problem, title="Workspace not usable")
            return
        self.ctx.set_workspace(ws)
        self.settings.setValue("workspace", str(ws.root))

    def open_workspace_folder(self) -> None:
        _open_folder(self.ctx.workspace.root)

    def show_sandbox_status(self) -> None:
        from desktop_app.ui.widgets.sandbox_status import SandboxStatusDialog, probe_sandbox  # lazy: start-up

        task = self.ctx.runner.start("sandbox-probe", probe_sandbox)

        def show(state: dict) -> None:
            self.sandbox_dialog = SandboxStatusDialog(state, self)
            self.sandbox_dialog.show()

        task.produced.connect(show)

    def _about(self) -> None:
        QMessageBox.about(self, "About AZR Model Trainer",
                          f"<b>AZR Model Trainer {__version__}</b><br>Design, train, fine-tune and chat with small "
                          "language models on your own machine.<br>Workspace: " + str(self.ctx.workspace.root))

    # --- drops anywhere on the window ---
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if paths_from_mime(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:
        if paths_from_mime(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = paths_from_mime(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.tabs.setCurrentWidget(self.data_tab)
            self.data_tab.add_paths(paths)

    # --- shutdown ---
    def request_quit(self, *, ask: bool) -> None:
        """Ctrl+C in the terminal: stop gracefully (training saves), then close, without asking."""
        self._ask_on_close = ask
        self.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        busy = self._busy_kinds()
        if busy and not self._close_requested:
            if self._ask_on_close and "train" in busy and not self.ctx.confirm(
                    "Training is running",
                    "Training is still running. Stop it, save a checkpoint and quit?", self):
                event.ignore()
                return
            self._close_requested = True
            if "train" in busy and self.train_tab.run_dir is not None:
                # The next launch offers to resume it (once its checkpoint is there: unfinished_run checks).
                self.settings.setValue(UNFINISHED_RUN_KEY, str(self.train_tab.run_dir))
                self.settings.sync()
            self.statusBar().showMessage("Stopping: finishing the current step and saving a checkpoint…")
            for kind in busy:
                task = self.ctx.runner.task(kind)
                if task is not None:
                    task.stop()
            event.ignore()  # closes for real once the tasks report finished (UI stays responsive meanwhile)
            return
        if busy and self._close_requested:
            event.ignore()  # still saving; _on_task_finished closes us
            return
        self._close_requested = True
        self.save_settings()
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Stop timers and background threads; safe to call twice."""
        self.exception_router.uninstall()
        self._status_timer.stop()
        for tab in (self.model_tab, self.data_tab, self.train_tab, self.generate_tab, self.library_tab):
            stop = getattr(tab, "stop_timers", None)
            if stop is not None:
                stop()
        self.ctx.runner.shutdown()


def _add_actions(target: QMenu | QToolBar, *actions: QAction | None) -> None:
    """Add `actions` to a menu or toolbar in order, a separator for each None."""
    for act in actions:
        target.addSeparator() if act is None else target.addAction(act)


def _open_folder(path: Path) -> None:
    QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))


def _app_icon() -> QIcon | None:
    icons = resources_dir() / "icons"
    if not icons.is_dir():
        return None
    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        p = icons / f"azr-trainer-{size}.png"
        if p.exists():
            icon.addFile(str(p))
    return None if icon.isNull() else icon


def running_app() -> QApplication | None:
    return QApplication.instance()  # type: ignore[return-value]
