"""The settings a run starts from on this machine, which the window's fields follow until the person types their own:
the method's learning rate for the model's size (methods.py), the steps every method starts from, and the
micro-batch, then gradient checkpointing, that bring the memory estimate within what the machine has free
(memory_plan.fit_plan: the same estimate and the same fitting as Get a model's verdicts, so what it promised is what
the Train tab opens with).

Stdlib only at import: the window asks on every change of the method, the base or the data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from desktop_app.engine.methods import METHOD_BY_KEY, method_key
from desktop_app.engine.model.sizing import count_parameters
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train.memory_plan import FITS_SHARE, Machine, fit_plan, memory_budget, memory_plan


def method_defaults(objective: str, adapter_kind: str = "none", parameters: int = 0) -> dict[str, Any]:
    """The learning rate of a method for a model of `parameters` (0: unknown) and the steps every method starts
    from (TrainSpec's)."""
    method = METHOD_BY_KEY[method_key(objective, adapter_kind)]
    return {"lr": method.default_lr(adapter_kind, parameters), "steps": TrainSpec().steps}


def opening_settings(config: RunConfig, machine: Machine) -> dict[str, Any]:
    """`method_defaults` for the run's model, and the micro-batch (0: the whole batch) and gradient checkpointing
    that fit `machine` at the run's batch size, data and precision (the whole batch, without checkpointing, where the
    model or the machine's memory is not known yet, or where even the lightest of them does not fit: preflight then
    says what the run needs)."""
    train = config.train_spec()
    adapter = str((config.adapter or {}).get("kind", "none"))
    budget = memory_budget(train.device, machine)
    whole = dataclasses.replace(train, micro_batch_size=0, gradient_checkpointing=False, auto_micro_batch=False)
    plan = memory_plan(config, whole, budget[2] if budget else False)
    out = {**method_defaults(config.objective, adapter, count_parameters(plan.spec) if plan is not None else 0),
           "micro_batch_size": 0, "gradient_checkpointing": False}
    if budget is None or plan is None or not plan.micro_batch:
        return out  # nothing known to fit to (or rollouts, not estimated): the whole batch at once
    fitted = fit_plan(plan, budget[1])
    if fitted.total() > budget[1] * FITS_SHARE:
        return out  # nothing fits: the settings stay as they are and preflight says what the run needs
    out["micro_batch_size"] = 0 if fitted.micro_batch >= train.batch_size else fitted.micro_batch
    out["gradient_checkpointing"] = fitted.shape.gradient_checkpointing
    return out
