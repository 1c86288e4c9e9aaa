"""The Generate tab's "Serve this model" switch: the local API server as a child process.

Why a process and not a thread: the server decodes for many clients at once; in its own process it
has its own GIL and cores to itself, a crash cannot take the window down, and stopping it is a signal.
It is the CLI's `serve` verb (the same code scripts use), run with `--log-json`: its first line says
where it listens, then one JSON object per request start and end feeds the log and the client count.
It listens on 127.0.0.1 only, so no API key is needed; it shares the window's workspace, so runs
started through its training API appear in the Library. While it serves, the switch says so, and the panel shows
the URL, the OpenAI base URL and the model id clients must send (asked of the server itself, GET /v1/models); a
failed request's log line says why it failed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QProcess, Qt
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop_app.ui import theme
from desktop_app.ui.context import AppContext

DEFAULT_PORT = 8000
OFF_TEXT, ON_TEXT = "Serve this model", "Stop serving"


def served_model_ids(url: str):
    """Runs in the worker thread: the model ids the server at `url` serves (GET /v1/models)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as response:
        data = json.loads(response.read().decode("utf-8"))
    yield [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)]
_STOP_WAIT_MS = 12000  # the server finishes requests in flight (up to 10 s) before it exits


def serve_command(model: str, port: int, workspace: Path) -> tuple[str, list[str]]:
    """(program, arguments) that run `serve` from source or from the frozen app (which is its own CLI)."""
    args = ["serve", model, "--port", str(port), "--workspace", str(workspace), "--log-json"]
    if getattr(sys, "frozen", False):
        return sys.executable, args
    return sys.executable, ["-m", "desktop_app", *args]


class ServePanel(QGroupBox):
    """Start/stop switch, port, URL, number of requests in flight and the request log."""

    def __init__(self, ctx: AppContext, model_path: Callable[[], str | None], parent: QWidget | None = None):
        super().__init__("Local API server", parent)
        self.ctx = ctx
        self.model_path = model_path
        self.process: QProcess | None = None
        self.url = ""
        self.model_id = ""
        self.clients = 0
        self.requests = 0
        self._stderr_tail: list[str] = []
        self._stopping = False

        self.toggle = QPushButton(OFF_TEXT)
        self.toggle.setObjectName("serveToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip("Serve the chosen model over an OpenAI-compatible API on this computer "
                               "(127.0.0.1), for any OpenAI client; the training API runs beside it")
        self.port = QSpinBox()
        self.port.setObjectName("servePort")
        self.port.setRange(0, 65535)
        self.port.setValue(DEFAULT_PORT)
        self.port.setSpecialValueText("any free port")
        self.state_label = QLabel("")
        self.state_label.setObjectName("serveState")
        self.url_label = QLabel("Not serving")
        self.url_label.setObjectName("serveUrl")
        self.url_label.setWordWrap(True)  # a long URL wraps: unwrapped it once widened the window to 1516 px
        self.url_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                               | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.url_label.setOpenExternalLinks(True)
        self.clients_label = QLabel("")
        self.clients_label.setObjectName("serveClients")
        self.clients_label.setProperty("role", "muted")
        self.log = QPlainTextEdit()
        self.log.setObjectName("serveLog")
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(500)  # a long-running server must not grow the window's memory
        self.log.setMaximumHeight(110)
        self.log.setPlaceholderText("Requests appear here")
        row = QHBoxLayout()
        row.addWidget(self.toggle)
        row.addWidget(QLabel("Port"))
        row.addWidget(self.port)
        row.addWidget(self.state_label)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.url_label)
        layout.addWidget(self.clients_label)
        layout.addWidget(self.log)
        self.toggle.toggled.connect(self._toggled)

    # --- state ---
    @property
    def running(self) -> bool:
        return self.process is not None and self.process.state() != QProcess.ProcessState.NotRunning

    def _toggled(self, on: bool) -> None:
        if on and not self.running:
            if not self.start():
                self._set_checked(False)
        elif not on and self.running:
            self.stop(wait=False)

    def _set_checked(self, on: bool) -> None:
        self.toggle.blockSignals(True)
        self.toggle.setChecked(on)
        self.toggle.blockSignals(False)

    def start(self) -> bool:
        model = self.model_path()
        if not model:
            self.ctx.report_error("No model to serve: train one first, or choose a folder with Browse.",
                                  title="Serve this model")
            return False
        program, args = serve_command(model, self.port.value(), self.ctx.workspace.root)
        proc = QProcess(self)
        proc.setProcessChannelMode(QProcess.ProcessChannelMode.SeparateChannels)
        proc.readyReadStandardOutput.connect(self._read_stdout)
        proc.readyReadStandardError.connect(self._read_stderr)
        proc.finished.connect(self._finished)
        proc.errorOccurred.connect(self._process_error)
        self.process, self.url, self.clients, self._stderr_tail, self._stopping = proc, "", 0, [], False
        self.model_id = ""
        self._show_state("starting")
        self.url_label.setText(f"Starting: loading {Path(model).name}…")
        self.clients_label.setText("")
        self.log.appendPlainText(f"starting the server for {model}")
        self._set_checked(True)
        self.port.setEnabled(False)
        proc.start(program, args)
        return True

    def stop(self, wait: bool = True) -> None:
        """Ask the server to finish (SIGTERM: it completes requests in flight); with `wait`, block until it
        has (killing it if it does not), so nothing outlives the window."""
        proc = self.process
        if proc is None or proc.state() == QProcess.ProcessState.NotRunning:
            return
        self._stopping = True
        self.url_label.setText("Stopping…")
        proc.terminate()
        if wait and not proc.waitForFinished(_STOP_WAIT_MS):
            proc.kill()
            proc.waitForFinished(5000)

    # --- the child's output ---
    def _read_stdout(self) -> None:
        proc = self.process
        if proc is None:
            return
        while proc.canReadLine():
            self._line(bytes(proc.readLine().data()).decode("utf-8", "replace").rstrip("\n"))

    def _line(self, line: str) -> None:
        if line.startswith("serving on "):
            self.url = line.split(" ", 2)[2].strip()
            self._show_state("on")
            self._show_url()
            self.clients_label.setText("0 clients")
            self.log.appendPlainText(f"serving on {self.url}")
            task = self.ctx.runner.start("serve-info", lambda url=self.url: served_model_ids(url))
            task.produced.connect(self._got_model_ids)
            return
        try:
            record = json.loads(line)
        except ValueError:
            if line.strip():
                self.log.appendPlainText(line)
            return
        if not isinstance(record, dict):
            return
        self.clients = int(record.get("clients", self.clients))
        if record.get("event") == "end":
            self.requests += 1
            why = f": {record['error']}" if record.get("error") else ""
            self.log.appendPlainText(f"{record.get('method')} {record.get('path')} → {record.get('status')} "
                                     f"({record.get('ms', 0):.0f} ms){why}")
        self.clients_label.setText(f"{self.clients} client{'s' if self.clients != 1 else ''} · "
                                   f"{self.requests} request{'s' if self.requests != 1 else ''} served")

    def _got_model_ids(self, ids: list[str]) -> None:
        if ids and self.url:
            self.model_id = ids[0]
            self._show_url()
            self.log.appendPlainText(f"model id clients send: {self.model_id}")

    def _show_url(self) -> None:
        model = (f"<br>Model id (send it as <code>\"model\"</code>): <b>{self.model_id}</b>" if self.model_id else "")
        self.url_label.setText(f"<a href='{self.url}/docs'>{self.url}</a> (API docs)<br>OpenAI base URL: "
                               f"<code>{self.url}/v1</code>{model}")

    def _show_state(self, state: str) -> None:
        """The switch and its light say whether the server is on."""
        self.toggle.setText(ON_TEXT if state in ("on", "starting") else OFF_TEXT)
        text, color = {"on": ("● serving", theme.OK), "starting": ("● starting…", theme.WARN),
                       "off": ("", theme.MUTED)}[state]
        self.state_label.setText(text)
        self.state_label.setStyleSheet(f"color: {color}; font-weight: 600;")

    def _read_stderr(self) -> None:
        proc = self.process
        if proc is None:
            return
        text = bytes(proc.readAllStandardError().data()).decode("utf-8", "replace")
        for line in text.splitlines():
            if line.strip():
                self._stderr_tail = [*self._stderr_tail[-19:], line]
                self.log.appendPlainText(line)

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._read_stdout()
        self._read_stderr()
        if self.process is not None:
            self.process.deleteLater()
            self.process = None
        crashed = not self._stopping and (code != 0 or status != QProcess.ExitStatus.NormalExit)
        self.url, self.clients, self.model_id = "", 0, ""
        self._show_state("off")
        self.url_label.setText("Not serving" if not crashed else "The server stopped with an error")
        self.clients_label.setText("")
        self.log.appendPlainText("server stopped" if not crashed else f"server exited with status {code}")
        self._set_checked(False)
        self.port.setEnabled(True)
        if crashed:
            errors = [line for line in self._stderr_tail if line.startswith("error:")]
            message = errors[-1][len("error:"):].strip() if errors else (self._stderr_tail[-1] if self._stderr_tail
                                                                         else f"exit status {code}")
            self.ctx.report_error(f"The local API server stopped: {message}", title="Serve this model")

    def _process_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._set_checked(False)
            self._show_state("off")
            self.port.setEnabled(True)
            self.url_label.setText("Not serving")
            self.ctx.report_error("The server could not be started (the Python interpreter was not found).",
                                  title="Serve this model")
