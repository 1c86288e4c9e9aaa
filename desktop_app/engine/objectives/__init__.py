"""Training methods that plug into the one loop (see base.py for the seam)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from desktop_app.engine.errors import UserError

if TYPE_CHECKING:
    from desktop_app.engine.objectives.base import Objective

# objective name -> (module, class); imported lazily (objectives pull in torch).
REGISTRY: dict[str, tuple[str, str]] = {
    "causal_lm": ("desktop_app.engine.objectives.causal_lm", "CausalLMObjective"),
    "sft": ("desktop_app.engine.objectives.sft", "SFTObjective"),
    "dpo": ("desktop_app.engine.objectives.dpo", "DPOObjective"),
    "grpo": ("desktop_app.engine.objectives.grpo", "GRPOObjective"),
    "selfplay": ("desktop_app.engine.objectives.selfplay", "SelfPlayObjective"),
}


def make_objective(name: str) -> Objective:
    """The objective named in a run config."""
    import importlib

    if name not in REGISTRY:

        raise UserError(f"unknown training objective {name!r}; available: {', '.join(REGISTRY)}")
    module, cls = REGISTRY[name]
    return getattr(importlib.import_module(module), cls)()
