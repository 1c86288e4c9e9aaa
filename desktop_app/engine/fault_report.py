"""An exception as what a person reads (torch-free, Qt-free): a UserError as its one line, an OS fault they can fix
(a full disk, a read-only folder: os_faults.fixable) as the os_faults sentence naming the work, anything else as an
unexpected error with its traceback for the log.

`said_as_faults(doing)` wraps a long job (a generator function): a fixable fault it meets leaves it as a DiskFault
(a UserError) naming the job, so every front end shows the same sentence without knowing what raised it.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from desktop_app.engine.errors import UserError
from desktop_app.engine.os_faults import fault_error, fixable

G = TypeVar("G", bound=Callable[..., Generator[Any, Any, Any]])

UNNAMED_WORK = "This"  # "This failed: the disk is full (...)": the dialog's title names the work


def error_parts(exc: BaseException, doing: str = UNNAMED_WORK) -> tuple[str, str]:
    """(message, details) to show for `exc`: details (a traceback) only for an unexpected error, the kind that is
    a bug; a UserError or a fixable OS fault has none, as there is nothing in it for the person to read."""
    if isinstance(exc, UserError):
        return str(exc), ""
    if fixable(exc):
        return str(fault_error(exc, doing=doing)), ""
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def said_as_faults(doing: str) -> Callable[[G], G]:
    """Decorate a generator function so that a fixable OS fault raised while it runs is re-raised as a DiskFault
    "<doing> failed: <what> (<path>; <free>): <what to do>"; its own cleanup (finally blocks) has already run."""

    def wrap(fn: G) -> G:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            try:
                return (yield from fn(*args, **kwargs))
            except UserError:
                raise
            except Exception as exc:
                if not fixable(exc):
                    raise
                raise fault_error(exc, doing=doing) from exc

        return run  # type: ignore[return-value]

    return wrap
