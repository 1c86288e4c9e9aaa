"""Entry script of the frozen app: the same main() as `python -m desktop_app`."""

import sys

if __name__ == "__main__":
    from desktop_app.engine.sandbox.launch import is_fork_server_invocation, run_fork_server

    # First of all: the app started as the sandbox's fork server (its own isolated interpreter, see launch.py)
    # must not import multiprocessing, Qt or torch, nor parse arguments.
    if is_fork_server_invocation(sys.argv[1:]):
        sys.exit(run_fork_server())
    import multiprocessing

    # Before anything else: a frozen child process started by multiprocessing must not open a window.
    multiprocessing.freeze_support()
    from desktop_app.__main__ import main

    sys.exit(main())
