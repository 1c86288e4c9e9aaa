"""`python -m desktop_app` opens the window; `python -m desktop_app <verb> ...` runs the headless CLI."""

from __future__ import annotations

import multiprocessing
import sys


def main(argv: list[str] | None = None) -> int:
    multiprocessing.freeze_support()  # required for frozen (PyInstaller) builds that spawn processes
    args = sys.argv[1:] if argv is None else argv
    from desktop_app.cli import is_cli_invocation

    if is_cli_invocation(args):
        from desktop_app.cli import main as cli_main

        return cli_main(args)
    from desktop_app.app import main as app_main

    return app_main(args)


if __name__ == "__main__":
    sys.exit(main())
