"""Start-up stays light (no torch before a job), the smoke-test flag works, settings persist."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(tmp_path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(QT_QPA_PLATFORM="offscreen", AZR_WORKSPACE=str(tmp_path / "ws"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    return env


def test_main_window_does_not_import_torch(tmp_path):
    code = textwrap.dedent("""
        import sys
        from PySide6.QtWidgets import QApplication
        app = QApplication([])
        from desktop_app.ui.main_window import MainWindow
        w = MainWindow(preload=False)
        w.show()
        app.processEvents()
        heavy = [m for m in ("torch", "transformers", "tokenizers", "safetensors") if m in sys.modules]
        print("HEAVY", heavy)
        w.close()
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "HEAVY []" in out.stdout, out.stdout


def test_smoke_test_flag(tmp_path):
    out = subprocess.run([sys.executable, "-m", "desktop_app", "--smoke-test"], cwd=ROOT, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "window shown in" in out.stdout
    assert "QThread: Destroyed" not in out.stderr


def test_settings_persist_tab_geometry_workspace(qtbot, workspace, settings):
    from desktop_app.ui.main_window import MainWindow

    win = MainWindow(workspace, settings=settings, preload=False)
    qtbot.addWidget(win)
    win.show()
    win.tabs.setCurrentWidget(win.generate_tab)
    win.close()
    assert settings.value("tab") == "generate"
    assert settings.value("workspace") == str(workspace.root)
    again = MainWindow(workspace, settings=settings, preload=False)
    qtbot.addWidget(again)
    assert again.tabs.currentWidget() is again.generate_tab
    geometry = settings.value("geometry")
    assert geometry is not None and not geometry.isEmpty()
    assert again.restoreGeometry(geometry)
    again.close()


def test_workspace_switch_and_env_override(window, tmp_path, monkeypatch):
    other = tmp_path / "other-ws"
    window.set_workspace(other)
    assert window.ctx.workspace.root == other
    assert (other / "datasets").is_dir() and (other / "runs").is_dir()
    assert str(other) in window.workspace_label.text()
    # AZR_WORKSPACE wins over the remembered folder (tests and portable installs)
    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "env-ws"))
    assert window._initial_workspace().root == tmp_path / "env-ws"


def test_status_bar_memory_and_menus(window):
    assert "memory:" in window.memory_label.text()
    titles = [a.text() for a in window.menuBar().actions()]
    assert titles == ["&File", "&Run", "&View", "&Help"]
    assert window.act_train.shortcut().toString() == "Ctrl+Return"
    assert not window.act_pause.isEnabled()  # nothing running


def test_preload_reports_device(qtbot, workspace, settings):
    from desktop_app.ui.main_window import MainWindow

    win = MainWindow(workspace, settings=settings, preload=True)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.preloaded, timeout=60000)
    assert "CPU" in win.device_label.text() or "CUDA" in win.device_label.text() or "MPS" in win.device_label.text()
    win.close()


def test_ctrl_c_in_the_terminal_closes_cleanly(tmp_path):
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "desktop_app", "--no-preload"], cwd=ROOT, env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen += line
            if "window shown in" in line:
                break
        assert "window shown in" in seen, seen[-2000:]
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "stopping gracefully" in err
    assert "QThread: Destroyed" not in err
