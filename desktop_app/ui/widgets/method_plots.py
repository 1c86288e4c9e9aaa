"""Live plots that know the training methods' metric families and group them into shared panels.

The engine reports metrics by name; nothing here lists them per method. A name is placed by its shape:
`reward/<role>/<type>` curves share one "reward per role × task type" panel, `solve_rate/<type>` one
"solve rate" panel, `heldout_solve_rate/<type>` (evaluation) one "held-out solve rate" panel, DPO's
`rewards_chosen` / `rewards_rejected` one panel, and so on. Names with no family get their own panel,
exactly as in `LivePlots`. Evaluation metrics (val_*, eval_*, heldout_*) are drawn with dots.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QWidget

from desktop_app.ui import theme
from desktop_app.ui.widgets.live_plot import LivePlots, pg

# Panels that take single names: name (or its val_/eval_ twin) -> (panel key, title).
_SINGLE = {
    "rewards_chosen": ("dpo_rewards", "DPO rewards: chosen vs rejected"),
    "rewards_rejected": ("dpo_rewards", "DPO rewards: chosen vs rejected"),
    "reward_margin": ("reward_margin", "Reward margin (chosen − rejected)"),
    "preference_accuracy": ("preference_accuracy", "Preference accuracy"),
    "reward": ("reward", "Mean reward"),
    "proposal_validity": ("proposal_validity", "Proposal validity"),
    "format_errors": ("format_errors", "Format errors (share of answers)"),
    "kl": ("kl", "KL to the reference"),
    "entropy": ("entropy", "Entropy"),
    "response_length": ("response_length", "Response length (tokens)"),
    "rollout_tokens_per_s": ("rollout_tokens_per_s", "Rollout tokens / s"),
    "checks_per_s": ("checks_per_s", "Checks / s"),
    "check_share": ("check_share", "Share of the step spent checking"),
}
_SINGLE_LABELS = {"rewards_chosen": "chosen", "rewards_rejected": "rejected"}
# Families: prefix -> (panel key, title); the rest of the name labels the curve.
_FAMILIES = (
    ("heldout_solve_rate", "heldout_solve_rate", "Held-out solve rate per task type"),
    ("solve_rate", "solve_rate", "Solve rate per task type (training)"),
    ("learnability", "learnability", "Learnability per task type"),
    ("buffer", "buffer", "Task buffer size per type"),
    ("reward", "reward_by_role", "Reward per role × task type"),
)
_EVAL_PREFIXES = ("val_", "eval_", "heldout_")

# Panels shown empty before a run of each method starts (where its curves will appear).
DEFAULT_PANELS = {
    "pretraining": ("loss", "lr", "grad_norm", "tokens_per_s"),
    "sft": ("loss", "lr", "grad_norm", "tokens_per_s"),
    "dpo": ("loss", "rewards_chosen", "reward_margin", "preference_accuracy", "lr", "grad_norm"),
    "grpo": ("loss", "reward", "reward/answer", "response_length", "kl", "rollout_tokens_per_s"),
    "selfplay": ("loss", "reward", "reward/solver/deduction", "solve_rate/deduction",
                 "heldout_solve_rate/deduction", "proposal_validity", "format_errors", "kl",
                 "response_length", "rollout_tokens_per_s"),
}


def _strip_eval(name: str) -> str:
    for prefix in ("val_", "eval_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def panel_of(name: str) -> tuple[str, str, str] | None:
    """(panel key, panel title, curve label) for a metric of a grouped family; None for any other name."""
    base = _strip_eval(name)
    if base in _SINGLE:  # legend labels (shown once a panel has two curves): train / val, chosen / rejected
        key, title = _SINGLE[base]
        what = _SINGLE_LABELS.get(base, "train")
        if name != base:
            prefix = name[: len(name) - len(base) - 1]
            what = prefix if what == "train" else f"{what} ({prefix})"
        return key, title, what
    for prefix, key, title in _FAMILIES:
        if base == prefix and prefix == "heldout_solve_rate":
            return key, title, "mean"
        if base.startswith(prefix + "/"):
            label = base[len(prefix) + 1:]
            if prefix == "reward" and "/" not in label:  # GRPO: one curve per reward function
                key, title = "reward_parts", "Reward functions (unweighted)"
            if name != base:  # val_/eval_ twin of a family member
                label = f"{label} ({name[: len(name) - len(base) - 1]})"
            return key, title, label
    return None


def is_eval_metric(name: str) -> bool:
    return name.startswith(_EVAL_PREFIXES)


class MethodPlots(LivePlots):
    """LivePlots with the methods' metric families grouped (one curve per role × type, per type, ...)."""

    def __init__(self, parent: QWidget | None = None, columns: int = 3):
        super().__init__(parent, columns)
        self.default_names: tuple[str, ...] = DEFAULT_PANELS["pretraining"]
        self._panel_curve_count: dict[str, int] = {}
        self._panel_curves: dict[str, list[tuple[Any, str]]] = {}

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

    def clear(self) -> None:
        self._panel_curve_count.clear()
        self._panel_curves.clear()
        super().clear()

    def _panel(self, name: str) -> Any:
        group = panel_of(name)
        if group is None:
            return super()._panel(name)
        key, title, _label = group
        fresh = key not in self.panels
        panel = super()._panel(key)
        if fresh:
            panel.setTitle(title, color="#111827", size="10pt")
        return panel

    def _ensure_curve(self, name: str) -> None:
        group = panel_of(name)
        if group is None:
            super()._ensure_curve(name)
            return
        key, _title, label = group
        panel = self._panel(name)
        index = self._panel_curve_count.get(key, 0)
        self._panel_curve_count[key] = index + 1
        color = theme.PLOT_COLORS[index % len(theme.PLOT_COLORS)]
        pg_ = pg()
        style = dict(pen=pg_.mkPen(color, width=2), name=label, connect="finite")
        if is_eval_metric(name):
            style.update(symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None)
        curve = panel.plot([], [], **style)
        members = self._panel_curves.setdefault(key, [])
        members.append((curve, label))
        plot_item = panel.getPlotItem()
        if len(members) == 2 and plot_item.legend is None:  # a legend once a panel holds several curves
            # top left (rising curves leave it free), on a see-through white so the curves stay readable
            legend = plot_item.addLegend(offset=(8, 4), labelTextSize="7pt", brush=(255, 255, 255, 190),
                                         verSpacing=-6)
            for member, member_label in members:  # later curves join it by themselves (named plots)
                legend.addItem(member, member_label)
        if len(members) == 4 and plot_item.legend is not None:  # many curves (role × type): two columns
            plot_item.legend.setColumnCount(2)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        self.curves[name] = curve

    def panel_keys(self) -> list[str]:
        return list(self.panels)

    def curve_names(self, key: str) -> list[str]:
        """Legend labels of one panel (tests, screenshots)."""
        panel = self.panels.get(key)
        if panel is None:
            return []
        return [label for _curve, label in self._panel_curves.get(key, [])]
