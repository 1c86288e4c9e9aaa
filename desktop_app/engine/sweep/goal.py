"""What a sweep optimises (stdlib only): a figure the method reports at each evaluation, and which way is better.

Every method reports val_loss (the default; GRPO's is minus its mean reward, self-play's one minus its held-out solve
rate, so lower is better everywhere). Besides it: perplexity and bits per byte (pretraining, SFT), DPO's preference
accuracy and reward margin, GRPO's greedy mean reward, self-play's held-out solve rate (mean, and per task type).

A trial's value is the best its run reported, in the goal's direction (the run keeps that checkpoint as its best by
validation loss); each evaluation's figure goes to the pruner as it comes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import TASK_TYPES
from desktop_app.engine.methods import method_of
from desktop_app.engine.specs import RunConfig

MINIMIZE, MAXIMIZE = "minimize", "maximize"
_LM = {"val_loss": MINIMIZE, "val_ppl": MINIMIZE}
METRICS: dict[str, dict[str, str]] = {
    "pretraining": {**_LM, "val_bpb": MINIMIZE},
    "sft": dict(_LM), "lora": dict(_LM), "qlora": dict(_LM),
    "dpo": {"val_loss": MINIMIZE, "val_preference_accuracy": MAXIMIZE, "val_reward_margin": MAXIMIZE},
    "grpo": {"val_loss": MINIMIZE, "eval_reward": MAXIMIZE},
    "selfplay": {"val_loss": MINIMIZE, "heldout_solve_rate": MAXIMIZE,
                 **{f"heldout_solve_rate/{t}": MAXIMIZE for t in TASK_TYPES}},
}


@dataclass(frozen=True)
class Goal:
    metric: str
    direction: str  # minimize | maximize

    def better(self, a: float, b: float) -> bool:
        return a < b if self.direction == MINIMIZE else a > b

    def reported(self, value: Any) -> float | None:
        """An evaluation's figure as the pruner gets it: a number (the worst one for NaN: a diverged run), or None
        when the record lacks it."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if math.isnan(value):
            return math.inf if self.direction == MINIMIZE else -math.inf
        return float(value)

    def best(self, records: list[dict[str, Any]]) -> float | None:
        """The best finite figure of a run's evaluation records (metrics.jsonl), None when it has none."""
        best = None
        for record in records:
            if record.get("type") != "eval":
                continue
            value = self.reported(record.get(self.metric))
            if value is not None and math.isfinite(value) and (best is None or self.better(value, best)):
                best = value
        return best


def goal_of(config: RunConfig, metric: str = "val_loss", direction: str = "auto") -> Goal:
    """The goal of a sweep of `config`; UserError (one line) for a metric its method never reports, a direction that
    would find the worst trial, or a run that never evaluates."""
    method = method_of(config)
    known = METRICS.get(method.key, {"val_loss": MINIMIZE})
    if metric not in known:
        raise UserError(f"--metric {metric}: a {method.label} run never reports it; it reports "
                        f"{', '.join(known)}")
    better = known[metric]
    if direction not in ("auto", better):
        raise UserError(f"--direction {direction}: {metric} is better {'lower' if better == MINIMIZE else 'higher'}, "
                        f"so {direction} would look for the worst trial (leave the direction out)")
    if not config.train_spec().eval_every:
        raise UserError(f"the run config never evaluates (train.eval_every is 0), so no trial would report {metric}: "
                        "set eval_every (e.g. a tenth of the steps)")
    return Goal(metric, better)
