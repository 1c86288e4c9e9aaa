"""Generate tab: "Serve this model" starts the local API server, shows its URL, request log and clients,
and stops it again (toggle off, or the window shutting down); no process is left behind."""

from __future__ import annotations

import httpx
from PySide6.QtCore import Qt


def _serve(window, populated_workspace, qtbot):
    window.ctx.workspace_items_changed.emit()
    run = populated_workspace.folder("runs") / "tiny-run"
    gen = window.generate_tab
    gen.select_source(str(run))
    panel = gen.serve_panel
    panel.port.setValue(0)  # any free port: tests never collide with a real server
    qtbot.mouseClick(panel.toggle, Qt.MouseButton.LeftButton)
    assert panel.toggle.isChecked() and panel.running
    qtbot.waitUntil(lambda: panel.url.startswith("http://127.0.0.1:") or not panel.running, timeout=90000)
    assert panel.url, panel.log.toPlainText()
    return panel, run


def test_toggle_serves_logs_and_stops(window, populated_workspace, qtbot):
    panel, run = _serve(window, populated_workspace, qtbot)
    assert panel.url in panel.url_label.text() and "/v1" in panel.url_label.text()
    model_id = httpx.get(panel.url + "/v1/models", timeout=30).json()["data"][0]["id"]
    assert model_id == run.name
    # it shows that it is on, and the model id clients must send
    assert panel.toggle.text() == "Stop serving" and "serving" in panel.state_label.text()
    qtbot.waitUntil(lambda: panel.model_id == model_id, timeout=10000)
    assert f"<b>{model_id}</b>" in panel.url_label.text()
    wrong = httpx.post(panel.url + "/v1/completions", json={"model": "gpt-4o", "prompt": "hi"}, timeout=30)
    assert wrong.status_code == 404
    qtbot.waitUntil(lambda: "→ 404" in panel.log.toPlainText(), timeout=10000)
    assert "'gpt-4o' does not exist" in panel.log.toPlainText()  # the log says why, not only "404"
    r = httpx.post(panel.url + "/v1/completions", json={"model": model_id, "prompt": "the cat", "max_tokens": 4,
                                                        "temperature": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    assert httpx.get(panel.url + "/api/runs", timeout=30).json()["runs"][0]["id"] == "tiny-run"  # same workspace
    qtbot.waitUntil(lambda: "/v1/completions → 200" in panel.log.toPlainText(), timeout=10000)
    assert panel.requests >= 3 and "served" in panel.clients_label.text()
    proc = panel.process
    panel.toggle.click()  # off
    qtbot.waitUntil(lambda: not panel.running, timeout=30000)
    assert panel.process is None and proc is not None
    assert not panel.toggle.isChecked() and panel.url_label.text() == "Not serving"
    assert panel.toggle.text() == "Serve this model" and panel.state_label.text() == ""
    assert "server stopped" in panel.log.toPlainText()
    assert not window.ctx.errors, window.ctx.errors


def test_window_shutdown_stops_the_server(window, populated_workspace, qtbot):
    panel, _ = _serve(window, populated_workspace, qtbot)
    url = panel.url
    window.generate_tab.stop_timers()  # what the window does when it closes
    assert not panel.running
    try:
        httpx.get(url + "/health", timeout=2)
        raise AssertionError("the server still answers after the window shut down")
    except httpx.TransportError:
        pass


def test_no_model_to_serve(window, qtbot):
    panel = window.generate_tab.serve_panel
    window.generate_tab.source_box.clear()
    panel.toggle.click()
    assert not panel.toggle.isChecked() and not panel.running
    assert "No model to serve" in window.ctx.errors[-1][0]
