"""`python -m desktop_app` opens the window; `python -m desktop_app <verb> ...` runs the headless CLI.

A frozen app also starts itself as the sandbox's fork server (engine/sandbox/launch.py): that private mode
is recognised first, before multiprocessing, Qt, torch or any argument parsing is imported.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from desktop_app.engine.sandbox.launch import is_fork_server_invocation

    if is_fork_server_invocation(args):
        from desktop_app.engine.sandbox.launch import run_fork_server

        return run_fork_server()
    import multiprocessing

    multiprocessing.freeze_support()  # required for frozen (PyInstaller) builds that spawn processes
    from desktop_app.cli import is_cli_invocation

    if is_cli_invocation(args):
        from desktop_app.cli import main as cli_main

        return cli_main(args)
    from desktop_app.app import main as app_main

    return app_main(args)


if __name__ == "__main__":
    sys.exit(main())
