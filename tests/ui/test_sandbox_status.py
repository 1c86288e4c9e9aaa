"""Help → Sandbox status shows the executor's isolation layers, probed in the background."""

from __future__ import annotations

import sys

import pytest

from desktop_app.ui.widgets.sandbox_status import describe


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the full layer set is Linux's")
def test_sandbox_status_dialog_lists_the_active_layers(qtbot, window) -> None:
    window.act_sandbox.trigger()
    qtbot.waitUntil(lambda: getattr(window, "sandbox_dialog", None) is not None, timeout=20000)
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("sandbox-probe"), timeout=10000)
    text = window.sandbox_dialog.label.text()
    for layer in ("audit-hook", "memory-limit", "isolated-interpreter"):
        assert layer in text
    window.sandbox_dialog.close()


def test_missing_layers_and_errors_are_explained() -> None:
    text = describe({"layers": ["audit-hook"], "missing": {"network-namespace": "needs root"}, "error": ""})
    assert "✗</span> network-namespace: needs root" in text and "strict" in text
    assert "cannot run here" in describe({"layers": [], "missing": {}, "error": "needs POSIX"})
