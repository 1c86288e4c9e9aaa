"""Composition root of the desktop app: QApplication, theme, main window, shutdown hooks.

`python -m desktop_app` (or `azr-trainer`) lands here. Imports stay light so the window shows fast:
torch and transformers load in the background once the window is up.

Flags: --workspace DIR, --smoke-test (open the window offscreen, print the time to window, close,
exit 0: the installers' smoke test), --smoke-selfplay RUN (offscreen: start self-play on the python world
from RUN in the Train tab, print the result as JSON, exit; see ui/smoke.py), --reset-settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

_T0 = time.perf_counter()


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="azr-trainer", description="AZR Model Trainer desktop app")
    parser.add_argument("--workspace", default="", help="workspace folder (default: last used, or the "
                        "platform user data folder; AZR_WORKSPACE overrides)")
    parser.add_argument("--smoke-test", action="store_true", help="open the window offscreen, print the time "
                        "to window, close and exit 0")
    parser.add_argument("--smoke-selfplay", metavar="RUN", default="", help="offscreen: start self-play on the "
                        "python world from RUN in the Train tab, print the result as JSON and exit (smoke test)")
    parser.add_argument("--reset-settings", action="store_true", help="forget window geometry and last tab")
    parser.add_argument("--no-preload", action="store_true", help="do not preload torch in the background")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        logging.getLogger(__name__).warning("ignoring unknown arguments: %s", " ".join(unknown))
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.smoke_test or args.smoke_selfplay:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from desktop_app.ui.theme import apply_theme  # lazy: PySide6

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("AZR Model Trainer")
    app.setOrganizationName("AZR")
    app.setApplicationDisplayName("AZR Model Trainer")
    apply_theme(app)

    from desktop_app.ui.main_window import MainWindow, app_settings  # lazy: PySide6

    settings = app_settings()
    if args.reset_settings:
        settings.clear()
    # The smoke test must not stop at the "resume the unfinished run?" question a normal launch may ask.
    smoke = args.smoke_test or bool(args.smoke_selfplay)
    workspace = _checked_workspace(args.workspace, settings.value("workspace", "", str), ask=not smoke)
    if workspace is None:
        return 2
    window = MainWindow(workspace, settings=settings, preload=not (args.no_preload or smoke), offer_resume=not smoke)
    if not smoke:
        _install_sigint(app, window)  # before anything announces the window, so Ctrl+C is always graceful
    window.show()
    icon = window.windowIcon()
    if not icon.isNull():
        app.setWindowIcon(icon)
    logging.getLogger("desktop_app").info("window shown in %.3f s", time.perf_counter() - _T0)

    if args.smoke_selfplay:
        from desktop_app.ui.smoke import run as run_selfplay_smoke  # lazy: PySide6

        return run_selfplay_smoke(window, args.smoke_selfplay, app)
    if args.smoke_test:
        def _report() -> None:
            shown = time.perf_counter() - _T0
            print(f"window shown in {shown:.3f} s (tabs: {window.tabs.count()}, workspace: "
                  f"{window.ctx.workspace.root})", flush=True)
            window.close()
            app.quit()

        QTimer.singleShot(0, _report)
        code = app.exec()
        return 0 if code == 0 and not window.isVisible() else 1

    return int(app.exec())


def _checked_workspace(explicit: str, last: str, *, ask: bool):
    """The workspace to open; a read-only or forbidden one is said at once, and (unless `ask` is off: smoke tests)
    a dialog offers another folder. None (the problem printed in one line) when the person quits."""
    from desktop_app.ui.workspace_check import dialog_ask, startup_workspace  # lazy: PySide6

    problems: list[str] = []
    asker = dialog_ask() if ask else None

    def noted(problem: str, root):
        problems.append(problem)
        return asker(problem, root) if asker is not None else None

    workspace = startup_workspace(explicit, last, noted)
    if workspace is None:
        print(f"error: {problems[-1] if problems else 'no usable workspace folder was chosen'}", file=sys.stderr)
    return workspace


def _install_sigint(app, window) -> None:
    """Ctrl+C in the launching terminal: first press stops gracefully (saves) and exits; second forces."""
    from PySide6.QtCore import QTimer

    presses = {"n": 0}

    def handler(_signum, _frame) -> None:
        presses["n"] += 1
        if presses["n"] == 1:
            print("\nCtrl+C: stopping gracefully (saving a checkpoint if training); press again to force quit",
                  file=sys.stderr, flush=True)
            QTimer.singleShot(0, lambda: window.request_quit(ask=False))
        else:
            os._exit(130)

    signal.signal(signal.SIGINT, handler)
    # Python runs signal handlers only when it gets control; a cheap timer gives it control.
    ticker = QTimer(app)
    ticker.setObjectName("azr-sigint-ticker")
    ticker.timeout.connect(lambda: None)
    ticker.start(200)


if __name__ == "__main__":
    sys.exit(main())
