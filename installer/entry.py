"""Entry script of the frozen app: the same main() as `python -m desktop_app`."""

import multiprocessing
import sys

if __name__ == "__main__":
    # Before anything else: a frozen child process started by multiprocessing must not open a window.
    multiprocessing.freeze_support()
    from desktop_app.__main__ import main

    sys.exit(main())
