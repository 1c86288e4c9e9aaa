"""`--smoke-selfplay RUN`: the installers' smoke test of self-play in the window (offscreen, no dialogs).

In the Train tab it chooses Self-play on the python task world (programs run in the sandbox) with RUN as
the base model, waits for the tab's sandbox probe, opens Help > Sandbox status, presses Start, waits for
the first self-play step, stops, and prints one JSON line: the sandbox state of both probes, the steps
seen, how the run ended and every error the window reported. Exit status 0 only when the sandbox ran and
a self-play step completed without an error. installer/smoke.py runs it in the frozen app.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

# Small enough for a tiny model to finish a step in seconds on a CPU.
SMOKE_OPTIONS: dict[str, Any] = {"world": "python", "task_types": ["deduction"], "proposals_per_type": 1,
                                 "solver_tasks_per_type": 1, "solver_samples": 2, "max_new_tokens": 16,
                                 "heldout_per_type": 2, "seed_tasks_per_type": 4}


class SelfplaySmoke(QObject):
    """Drives the window step by step from a timer (the GUI thread never blocks); `done` carries the exit code."""

    done = Signal(int)

    def __init__(self, window: Any, base: str, timeout_s: float = 600.0):
        super().__init__(window)
        self.window, self.tab, self.base = window, window.train_tab, base
        self.deadline = time.monotonic() + timeout_s
        self.phase = "probe"
        self.result: dict[str, Any] = {"base": base, "options": SMOKE_OPTIONS}
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._poll)

    def start(self) -> None:
        self.window.ctx.dialogs_enabled = False  # errors are collected in ctx.errors and printed
        self.window.tabs.setCurrentWidget(self.tab)
        self.tab.setup.set_method("selfplay")  # starts the tab's sandbox probe
        panel = self.tab.setup.method_panel
        panel.base_picker.set_path(self.base)
        form = panel.options_form()
        form.set_spec(form.spec_cls.from_dict({**form.values(), **SMOKE_OPTIONS}))
        self.tab.setup.form.set_value("steps", 2)
        self.timer.start(100)

    def _poll(self) -> None:
        if time.monotonic() > self.deadline:
            self._finish(f"timed out in phase {self.phase}")
        elif self.phase == "probe":
            self._after_probe()
        elif self.phase == "dialog":
            self._after_dialog()
        elif self.phase == "run":
            if self.tab.steps_seen >= 1 and self.tab.running:
                self.tab.stop()
                self.phase = "stopping"
            elif not self.tab.running:
                self._finish()
        elif self.phase == "stopping" and not self.tab.running:
            self._finish()

    def _after_probe(self) -> None:
        state = self.tab.setup.method_panel.sandbox_state
        if state is None:
            return
        self.result["tab_sandbox"] = state
        if state.get("error"):
            self._finish("the Train tab's sandbox probe failed")
            return
        self.window.show_sandbox_status()  # Help > Sandbox status
        self.phase = "dialog"

    def _after_dialog(self) -> None:
        dialog = getattr(self.window, "sandbox_dialog", None)
        if dialog is None:
            return
        self.result["dialog_text"] = dialog.label.text()
        dialog.close()
        if "cannot run here" in self.result["dialog_text"]:
            self._finish("Help > Sandbox status says the sandbox cannot run")
            return
        self.result["started"] = bool(self.tab.start())
        self.result["run_dir"] = str(self.tab.run_dir or "")
        self.phase = "run"
        if not self.result["started"]:
            self._finish("the Train tab did not start self-play")

    def _finish(self, failure: str = "") -> None:
        self.timer.stop()
        last = self.tab.run_view.last_finished
        self.result.update(steps_seen=self.tab.steps_seen, finished=getattr(last, "reason", None),
                           message=getattr(last, "message", ""), errors=[m for m, _ in self.window.ctx.errors])
        if not failure and self.tab.steps_seen < 1:
            failure = "no self-play step completed"
        if not failure and (self.result["errors"] or self.result["finished"] == "failed"):
            failure = "the run reported an error"
        self.result["failure"] = failure
        print(json.dumps(self.result, default=str), flush=True)
        if self.tab.running:  # stopped by the timeout: end the run before the window goes
            self.tab.stop()
        self.done.emit(1 if failure else 0)


def run(window: Any, base: str, app: Any) -> int:
    """Run the smoke in `window`'s event loop; returns the exit status."""
    smoke = SelfplaySmoke(window, base)
    code = {"value": 1}

    def finished(value: int) -> None:
        code["value"] = value
        window.request_quit(ask=False)  # waits for the stopped run to save, then closes
        closed = QTimer(window)
        closed.timeout.connect(lambda: app.quit() if not window.isVisible() else None)
        closed.start(100)

    smoke.done.connect(finished)
    QTimer.singleShot(0, smoke.start)
    app.exec()
    sys.stdout.flush()
    return code["value"]
