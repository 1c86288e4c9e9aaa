# PyInstaller runtime hook of AZR Model Trainer, listed in the spec: custom runtime hooks run before the ones
# PyInstaller adds for the collected packages (setuptools' distutils shim, PySide6's Qt set-up,
# multiprocessing...). So the app started as the sandbox's fork server (engine/sandbox/launch.py) turns
# into it here, from a clean interpreter: none of those packages is imported or configured first, and
# nothing of Qt is loaded into the process that forks every untrusted program. installer/entry.py checks
# again, for a build without this hook.


def _azr_fork_server_first():
    import sys

    from desktop_app.engine.sandbox import launch

    if launch.is_fork_server_invocation(sys.argv[1:]):
        sys.exit(launch.run_fork_server())


_azr_fork_server_first()
del _azr_fork_server_first
