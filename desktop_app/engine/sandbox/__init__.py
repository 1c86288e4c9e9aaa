"""The sandboxed executor for untrusted programs (model-written code in self-play, `sandbox` CLI).

`Executor` runs batches of programs in a warm fork server with layered isolation; `literal` is the only
way values cross the boundary; `screen` refuses introspection routes before anything runs; `launch`
starts the fork server (also from a frozen app).

The names below load on first use: every start of the app imports `launch` (to recognise the fork-server
mode first), and that must not pull in the executor and its imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from desktop_app.engine.sandbox.executor import CallResult, Executor, Job, Limits, RunResult, SandboxState

__all__ = ["CallResult", "Executor", "Job", "Limits", "RunResult", "SandboxState"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from desktop_app.engine.sandbox import executor

        return getattr(executor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
