"""Open in TensorBoard: serve a run folder with TensorBoard (a child process on a free port of this machine only) and
open it in the browser once it answers. One TensorBoard per run folder, reused while it runs; all of them end with
the window. The command and the checks are the engine's (engine/train/tracking.py)."""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QProcess, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices

from desktop_app.engine.train.tracking import free_port, listening, tensorboard_command

START_TIMEOUT_S = 60.0  # TensorBoard reads the event files before it answers


class TensorBoardLauncher(QObject):
    """Starts `tensorboard --logdir RUN` on a free port and opens http://127.0.0.1:PORT when it is ready."""

    error = Signal(str)  # TensorBoard did not start: what happened, in words
    opened = Signal(str)  # the address opened in the browser

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.servers: dict[str, tuple[QProcess, int]] = {}  # run folder -> (process, port)
        self.waiting: tuple[str, float] | None = None  # (run folder, deadline) until its TensorBoard answers
        self.timer = QTimer(self)
        self.timer.setInterval(250)
        self.timer.timeout.connect(self._poll)

    def open(self, run_dir: str) -> None:
        """Show `run_dir` in TensorBoard: start it (or reuse the one serving it), then open the browser."""
        server = self.servers.get(run_dir)
        if server is None or server[0].state() == QProcess.ProcessState.NotRunning:
            port = free_port()
            process = QProcess(self)
            process.setProcessChannelMode(QProcess.ProcessChannelMode.MergedChannels)
            command = tensorboard_command(run_dir, port)
            process.start(command[0], command[1:])
            self.servers[run_dir] = (process, port)
        self.waiting = (run_dir, time.monotonic() + START_TIMEOUT_S)
        self.timer.start()

    def _poll(self) -> None:
        if self.waiting is None:
            self.timer.stop()
            return
        run_dir, deadline = self.waiting
        process, port = self.servers[run_dir]
        if listening(port):
            self.waiting = None
            self.timer.stop()
            url = f"http://127.0.0.1:{port}/"
            QDesktopServices.openUrl(QUrl(url))
            self.opened.emit(url)
        elif process.state() == QProcess.ProcessState.NotRunning or time.monotonic() > deadline:
            self.waiting = None
            self.timer.stop()
            said = bytes(process.readAll().data()).decode("utf-8", "replace").strip().splitlines()[-3:]
            self.stop(run_dir)
            self.error.emit("TensorBoard did not start" + (": " + " ".join(said) if said else "")
                            + ". Try `tensorboard --logdir RUN` in a terminal to see why.")

    def stop(self, run_dir: str) -> None:
        process, _port = self.servers.pop(run_dir, (None, 0))
        if process is not None and process.state() != QProcess.ProcessState.NotRunning:
            process.terminate()
            if not process.waitForFinished(3000):
                process.kill()
                process.waitForFinished(3000)

    def stop_all(self) -> None:
        """End every TensorBoard this window started (the window closes)."""
        self.timer.stop()
        self.waiting = None
        for run_dir in list(self.servers):
            self.stop(run_dir)
