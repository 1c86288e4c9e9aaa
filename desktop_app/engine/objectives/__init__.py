"""Training methods that plug into the one loop (see base.py for the seam)."""

from __future__ import annotations

from typing import Any


def make_objective(name: str) -> Any:
    """The objective named in a run config (imported lazily: objectives pull in torch)."""
    if name == "causal_lm":
        from desktop_app.engine.objectives.causal_lm import CausalLMObjective

        return CausalLMObjective()
    from desktop_app.engine.errors import UserError

    raise UserError(f"unknown training objective {name!r}; available: causal_lm")
