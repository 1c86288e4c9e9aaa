"""A dialog that shows the sandboxed executor's isolation layers (active ones, and missing ones with why)."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget


def probe_sandbox() -> Iterator[dict]:
    """Runs in a worker thread: start the executor's fork server once and report its layers."""
    from desktop_app.engine.errors import UserError
    from desktop_app.engine.sandbox import Executor

    try:
        with Executor() as executor:
            state = executor.state()
        yield {"layers": state.layers, "missing": state.missing, "error": ""}
    except (UserError, RuntimeError, OSError) as exc:
        yield {"layers": [], "missing": {}, "error": str(exc)}


def describe(state: dict) -> str:
    """Rich text of a sandbox state: green checks for active layers, red crosses with reasons for missing ones."""
    if state.get("error"):
        return f"<b>The sandbox cannot run here.</b><br>{state['error']}"
    rows = [f"<span style='color:#2e7d32'>✓</span> {name}" for name in state["layers"]]
    rows += [f"<span style='color:#c62828'>✗</span> {name}: {why}" for name, why in state["missing"].items()]
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
        layout.addWidget(self.label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
