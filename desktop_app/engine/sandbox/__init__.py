"""The sandboxed executor for untrusted programs (model-written code in self-play, `sandbox` CLI).

`Executor` runs batches of programs in a warm fork server with layered isolation; `literal` is the only
way values cross the boundary; `screen` refuses introspection routes before anything runs.
"""

from desktop_app.engine.sandbox.executor import CallResult, Executor, Job, Limits, RunResult, SandboxState

__all__ = ["CallResult", "Executor", "Job", "Limits", "RunResult", "SandboxState"]
