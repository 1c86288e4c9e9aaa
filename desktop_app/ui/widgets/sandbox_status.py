"""A dialog that shows the sandboxed executor's isolation layers (active ones, and missing ones with why)."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from desktop_app.engine.errors import UserError
from desktop_app.engine.sandbox import Executor


def probe_sandbox() -> Iterator[dict]:
    """Runs in a worker thread: start the executor's fork server once and report its layers."""

    try:
        with Executor() as executor:
            state = executor.state()
        yield {"layers": state.layers, "missing": state.missing, "error": ""}
    except (UserError, RuntimeError, OSError) as exc:
        yield {"layers": [], "missing": {}, "error": str(exc)}


# What each isolation layer (the executor's slugs) does, in words.
LAYER_WORDS = {
    "separate-process": "programs run in a child process, never inside the app",
    "process-group": "each program has its own process group: a timeout ends it and whatever it started",
    "isolated-interpreter": "the interpreter starts isolated: no environment variables, no site-packages, none of "
                            "the app's code on the import path",
    "fresh-temp-folder": "each program runs in a new, empty folder that is removed afterwards",
    "audit-hook": "a Python audit hook refuses file access outside that folder, sockets, subprocesses, ctypes and "
                  "imports outside an allow-list",
    "wall-timeout": "a wall-clock limit per program and per batch",
    "output-cap": "what a program prints is cut at a size limit",
    "fork-per-program": "every program gets a freshly forked child: nothing carries over from one to the next",
    "network-namespace": "a network namespace of its own, with no network: nothing can be reached",
    "memory-limit": "a memory (address space) limit: running out stays inside the program",
    "cpu-limit": "a CPU-time limit",
    "file-size-limit": "files it writes are capped in size",
    "open-files-limit": "it may hold only a few files open",
    "unprivileged-user": "started as root, it drops to an unprivileged user first",
    "no-new-processes": "it cannot start new processes",
    "parent-death-kill": "it is killed if the app dies",
    "literal-values": "results come back only as literal values, read by a bounded parser: nothing a program prints "
                      "is ever evaluated",
    "static-screen": "sources that reach for private or dunder attributes are refused before they run",
}


def _words(name: str) -> str:
    words = LAYER_WORDS.get(name)
    return f" <span style='color:#6b7280'>— {words}</span>" if words else ""


def describe(state: dict) -> str:
    """Rich text of a sandbox state: green checks for active layers, red crosses with reasons for missing ones, each
    with what the layer does."""
    if state.get("error"):
        return f"<b>The sandbox cannot run here.</b><br>{state['error']}"
    rows = [f"<span style='color:#2e7d32'>✓</span> <b>{name}</b>{_words(name)}" for name in state["layers"]]
    rows += [f"<span style='color:#c62828'>✗</span> {name}: {why}{_words(name)}"
             for name, why in state["missing"].items()]
    verdict = ("All isolation layers are active." if not state["missing"] else
               "Some layers are missing; the strict setting refuses to run self-play here.")
    return ("<b>Sandboxed executor</b> (runs model-written programs in self-play)<br>" + verdict + "<br><br>"
            + "<br>".join(rows))


class SandboxStatusDialog(QDialog):
    def __init__(self, state: dict, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Sandbox status")
        layout = QVBoxLayout(self)
        self.label = QLabel(describe(state))
        self.label.setWordWrap(True)
        self.label.setMinimumWidth(520)
        layout.addWidget(self.label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
