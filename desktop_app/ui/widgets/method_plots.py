"""Live plots that know the training methods' metric families and group them into shared panels.

The engine reports metrics by name; nothing here lists them per method. A name is placed by its shape:
`reward/<role>/<type>` curves share one "reward per role × task type" panel, `solve_rate/<type>` one
"solve rate" panel, `heldout_solve_rate/<type>` (evaluation) one "held-out solve rate" panel, DPO's
`rewards_chosen` / `rewards_rejected` one panel, and so on. Names with no family get their own panel,
exactly as in `LivePlots`. Evaluation metrics (val_*, eval_*, heldout_*) are drawn with dots.

Self-play's six reward lines (proposer and solver × three task types) share one panel: the colour tells the task type,
the line the role (the proposer's dashed and thicker, drawn over the solver's), so neither hides the other; the
panel's tooltip says what the roles, types and reward values mean. Its val_loss is 1 − the held-out solve rate (the
figure that picks the best checkpoint): kept for the CSV, not drawn as a "validation" loss beside the policy loss.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from desktop_app.ui import theme
from desktop_app.ui.widgets.live_plot import LivePlots, curve_style, pg
from desktop_app.ui.widgets.selfplay_help import TASK_TYPES, reward_panel_tip

_PROPOSALS = ("proposal_validity", "Proposals by verdict", "share of proposals")  # its legend names the verdicts
# Panels that take single names: name (or its val_/eval_ twin) -> (panel key, title, y-axis label).
_SINGLE = {
    "rewards_chosen": ("dpo_rewards", "DPO rewards: chosen vs rejected", "reward"),
    "rewards_rejected": ("dpo_rewards", "DPO rewards: chosen vs rejected", "reward"),
    "reward_margin": ("reward_margin", "Reward margin (chosen − rejected)", "reward"),
    "preference_accuracy": ("preference_accuracy", "Preference accuracy", "share right"),
    "reward": ("reward", "Mean reward", "reward"),
    "proposal_validity": _PROPOSALS,
    "proposals_trivial": _PROPOSALS,
    "proposals_heldout": _PROPOSALS,
    "proposals_duplicate": _PROPOSALS,
    "format_errors": ("format_errors", "Format errors", "share of answers"),
    "kl": ("kl", "KL to the reference", "nats"),
    "entropy": ("entropy", "Entropy", "nats per token"),
    "response_length": ("response_length", "Response length", "tokens"),
    "rollout_tokens_per_s": ("rollout_tokens_per_s", "Rollout speed", "tokens / s"),
    "checks_per_s": ("checks_per_s", "Answer checks", "checks / s"),
    "check_share": ("check_share", "Time spent checking", "share of the step"),
}
_SINGLE_LABELS = {"rewards_chosen": "chosen", "rewards_rejected": "rejected", "proposal_validity": "valid",
                  "proposals_trivial": "trivial (refused)", "proposals_heldout": "held-out program (not trained)",
                  "proposals_duplicate": "duplicate (no reward)"}
# Families: prefix -> (panel key, title, y-axis label); the rest of the name labels the curve.
_FAMILIES = (
    ("heldout_solve_rate", "heldout_solve_rate", "Held-out solve rate", "share solved"),
    ("solve_rate", "solve_rate", "Solve rate (training)", "share solved"),
    ("learnability", "learnability", "Learnability", "learnability"),
    ("buffer", "buffer", "Task buffer size", "tasks"),
    ("programs", "programs", "Distinct programs in the buffer", "programs"),
    ("shapes", "shapes", "Distinct program shapes in the buffer (equal up to constants)", "shapes"),
    ("new_task_solve_rate", "new_task_solve_rate",
     "Solver's rate on the proposer's new tasks (they teach when between 0 and 1)", "share solved"),
    ("program_size", "program_size", "Size of the proposer's new programs", "characters"),
    ("reward", "reward_by_role", "Reward per role × task type", "reward"),
)
_REWARD_PARTS = ("reward_parts", "Reward functions (unweighted)", "reward")
_EVAL_PREFIXES = ("val_", "eval_", "heldout_")

# Panels shown empty before a run of each method starts (where its curves will appear). A KL panel is left out:
# with the penalty off (the default) it would stay flat at 0; it appears once the run reports a KL above 0.
DEFAULT_PANELS = {
    "pretraining": ("loss", "lr", "grad_norm", "tokens_per_s"),
    "sft": ("loss", "lr", "grad_norm", "tokens_per_s"),
    "dpo": ("loss", "rewards_chosen", "reward_margin", "preference_accuracy", "lr", "grad_norm"),
    "grpo": ("loss", "reward", "reward/answer", "response_length", "rollout_tokens_per_s"),
    "selfplay": ("loss", "reward", "reward/solver/deduction", "solve_rate/deduction",
                 "heldout_solve_rate/deduction", "proposal_validity", "format_errors",
                 "response_length", "rollout_tokens_per_s"),  # the curriculum's panels come with its figures
}


def _strip_eval(name: str) -> str:
    for prefix in ("val_", "eval_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def group_of(name: str) -> tuple[str, str, str, str] | None:
    """(panel key, title, y-axis label, curve label) for a metric of a grouped family; None for any other name."""
    base = _strip_eval(name)
    if base in _SINGLE:  # legend labels (shown once a panel has two curves): train / val, chosen / rejected
        key, title, y_label = _SINGLE[base]
        what = _SINGLE_LABELS.get(base, "train")
        if name != base:
            prefix = name[: len(name) - len(base) - 1]
            what = prefix if what == "train" else f"{what} ({prefix})"
        return key, title, y_label, what
    for prefix, key, title, y_label in _FAMILIES:
        if base == prefix and prefix == "heldout_solve_rate":
            return key, title, y_label, "mean"
        if base.startswith(prefix + "/"):
            label = base[len(prefix) + 1:]
            if prefix == "reward" and "/" not in label:  # GRPO: one curve per reward function
                key, title, y_label = _REWARD_PARTS
            if name != base:  # val_/eval_ twin of a family member
                label = f"{label} ({name[: len(name) - len(base) - 1]})"
            return key, title, y_label, label
    return None


def panel_of(name: str) -> tuple[str, str, str] | None:
    """(panel key, panel title, curve label) for a metric of a grouped family; None for any other name."""
    group = group_of(name)
    return None if group is None else (group[0], group[1], group[3])


def is_eval_metric(name: str) -> bool:
    return name.startswith(_EVAL_PREFIXES)


def role_style(label: str, index: int) -> dict[str, Any]:
    """The pen of a "role/type" reward curve: the task type's colour (the same for both roles), the proposer dashed
    and thicker; `index` picks a colour for a type nobody planned for."""
    role, _, task_type = label.partition("/")
    types = list(TASK_TYPES)
    slot = types.index(task_type) if task_type in types else len(types) + index
    color = theme.PLOT_COLORS[slot % len(theme.PLOT_COLORS)]
    if role == "proposer":
        return dict(pen=pg().mkPen(color, width=3, style=Qt.PenStyle.DashLine))
    return dict(pen=pg().mkPen(color, width=2))


class MethodPlots(LivePlots):
    """LivePlots with the methods' metric families grouped (one curve per role × type, per type, ...)."""

    def __init__(self, parent: QWidget | None = None, columns: int = 3):
        super().__init__(parent, columns)
        self.default_names: tuple[str, ...] = DEFAULT_PANELS["pretraining"]

    def set_method(self, method: str) -> None:
        """Which panels to show empty before a run; re-lays the empty plots if nothing is plotted yet."""
        names = DEFAULT_PANELS.get(method, DEFAULT_PANELS["pretraining"])
        if names == self.default_names:
            return
        self.default_names = names
        if self.panels and not self.series:  # shown and empty: lay out this method's panels now
            self.clear()

    def _default_panels(self) -> None:
        for name in self.default_names:
            self._panel(name)

    def add_metrics(self, step: float, metrics: dict[str, float]) -> None:
        if "val_loss" in metrics and "heldout_solve_rate" in metrics:
            self.hidden.add("val_loss")  # self-play's 1 − held-out solve rate: not a loss to draw beside the policy's
        super().add_metrics(step, metrics)

    def _panel(self, name: str) -> Any:
        panel = super()._panel(name)
        if self.panel_meta(name)[0] == "reward_by_role" and not panel.toolTip():
            panel.setToolTip(reward_panel_tip())
        return panel

    def panel_meta(self, name: str) -> tuple[str, str, str]:
        group = group_of(name)
        return super().panel_meta(name) if group is None else group[:3]

    def curve_label(self, name: str) -> str:
        group = group_of(name)
        return super().curve_label(name) if group is None else group[3]

    def _ensure_curve(self, name: str) -> None:
        group = group_of(name)
        if group is None:
            super()._ensure_curve(name)
            return
        key, label = group[0], group[3]
        panel = self._panel(name)
        if key == "reward_by_role":
            style = role_style(label, len(self._members.get(key, [])))
        else:
            style = curve_style(self._next_color(key), dots=is_eval_metric(name))
        curve = self.curves[name] = self._new_curve(panel, key, label, **style)
        if label.startswith("proposer/"):
            curve.setZValue(1)  # over the solver's lines

    def panel_keys(self) -> list[str]:
        return list(self.panels)

    def curve_names(self, key: str) -> list[str]:
        """Legend labels of one panel (tests, screenshots)."""
        return [label for _curve, label in self._members.get(key, [])]
