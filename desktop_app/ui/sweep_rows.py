"""What the window's settings search offers (no Qt): a row per setting that may vary in a sweep of the Train tab's run
(engine/sweep/space.py), in words, with the range the method usually searches ticked and filled in; the metrics the
method reports, with which way is better (engine/sweep/goal.py); and a trial's settings sorted by where the window
shows them (the Train tab's hyperparameters, its adapter and option fields, the Model tab's spec).

The seed is left out: no field of the window holds it, so a best seed could not be put back into the form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import METHOD_OPTIONS
from desktop_app.engine.methods import method_of
from desktop_app.engine.spec_base import field_label, field_of, help_text
from desktop_app.engine.specs import AdapterSpec, ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.sweep.goal import MAXIMIZE, METRICS, MINIMIZE
from desktop_app.engine.sweep.space import Dimension, Setting, parse_vary, settings_of, suggested

# Where the window shows each section of a run config (the words of "Use the best settings")
PLACES = {"train": "Train tab", "adapter": "Train tab (adapter)", "method_options": "Train tab (options)",
          "model": "Model tab"}
SECTION_ORDER = ("train", "adapter", "method_options", "model")
METRIC_WORDS = {"val_loss": "Validation loss", "val_ppl": "Validation perplexity",
                "val_bpb": "Validation bits per byte", "val_preference_accuracy": "Preference accuracy (validation)",
                "val_reward_margin": "Reward margin (validation)", "eval_reward": "Mean reward (evaluation prompts)",
                "heldout_solve_rate": "Held-out solve rate"}
BETTER_WORDS = {MINIMIZE: "lower is better", MAXIMIZE: "higher is better"}


@dataclass
class SettingRow:
    """One setting the search may vary: the engine's setting, its words, the value the run has now, and the range
    (or values) offered: the method's usual one, ticked, or one around the value it has now."""

    setting: Setting
    label: str
    help: str
    now: Any
    low: str = ""
    high: str = ""
    log: bool = False
    choices: str = ""  # a choice setting's values, "a, b, c"
    ticked: bool = False

    @property
    def section(self) -> str:
        return self.setting.path.rpartition(".")[0]

    @property
    def is_choice(self) -> bool:
        return self.setting.kind == "choice"

    def vary_text(self, low: str, high: str, log: bool, choices: str) -> str:
        """As --vary writes it, from what the row's fields hold."""
        if self.is_choice:
            return f"{self.setting.name}=" + ",".join(c.strip() for c in choices.split(","))
        return f"{self.setting.name}={low.strip()}..{high.strip()}" + (":log" if log else "")

    def dimension(self, text: str, config: RunConfig) -> tuple[Dimension | None, str]:
        """The engine's reading of `text` for this row, or the problem in words ("Learning rate: the range ... is
        empty ...")."""
        try:
            return parse_vary(text, config), ""
        except UserError as exc:
            message = str(exc)
            if message.startswith("--vary ") and ": " in message:
                message = message.split(": ", 1)[1]
            return None, f"{self.label}: {message}"


def section_class(section: str, objective: str) -> type | None:
    return {"train": TrainSpec, "model": ModelSpec, "adapter": AdapterSpec}.get(section) or (
        METHOD_OPTIONS.get(objective) if section == "method_options" else None)


def word(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def setting_rows(config: RunConfig) -> list[SettingRow]:
    """Every setting a search of `config` may vary that a field of the window holds: the method's usual ones first
    (ticked, with their usual ranges), then the others by section (unticked, around the value the run has now)."""
    usual = {dim.path: dim for dim in (parse_vary(text, config) for text in suggested(config))}
    rows = []
    for setting in settings_of(config).values():
        section, _, name = setting.path.rpartition(".")
        cls = section_class(section, config.objective)
        if cls is None:
            continue  # the seed: no field of the window holds it
        now = _now(config, section, name)
        unit = field_of(cls, name).metadata.get("unit", "")
        label = field_label(cls, name)
        label += f" ({unit})" if unit and unit not in label.lower() else ""
        row = SettingRow(setting, label, help_text(cls, name), now)
        _fill(row, usual.get(setting.path))
        rows.append(row)
    order = {path: i for i, path in enumerate(usual)}
    return sorted(rows, key=lambda r: (r.setting.path not in order, order.get(r.setting.path, 0),
                                       SECTION_ORDER.index(r.section)))


def _now(config: RunConfig, section: str, name: str) -> Any:
    values = {"train": config.train_spec().to_dict(), "model": config.model,
              "adapter": config.adapter_spec().to_dict() if config.adapter else {},
              "method_options": config.method_options}.get(section) or {}
    if name in values:
        return values[name]
    cls = section_class(section, config.objective)
    return getattr(cls(), name) if cls is not None else None


def _fill(row: SettingRow, usual: Dimension | None) -> None:
    """The usual range (ticked), or one around the value the run has now: half to twice it, within its limits."""
    setting = row.setting
    if usual is not None:
        row.ticked, row.log = True, usual.log
        if usual.choices:
            row.choices = ", ".join(word(c) for c in usual.choices)
        else:
            row.low, row.high = _number(setting, usual.low), _number(setting, usual.high)
        return
    if row.is_choice:
        row.choices = ", ".join(word(c) for c in setting.choices)
        return
    now = row.now if isinstance(row.now, (int, float)) and not isinstance(row.now, bool) else 0
    low, high = (now / 2, now * 2) if now > 0 else (0, 1)
    if setting.minimum is not None:
        low = max(low, setting.minimum)
    if setting.maximum is not None:
        high = min(high, setting.maximum)
    row.low, row.high = _number(setting, low), _number(setting, high)


def _number(setting: Setting, value: float) -> str:
    if setting.kind == "int":
        return str(round(value))
    return f"{value:.6g}"


def metric_choices(config: RunConfig) -> list[tuple[str, str, str]]:
    """(metric, its words, which way is better) for each figure the run's method reports, val_loss first."""
    known = METRICS.get(method_of(config).key, {"val_loss": MINIMIZE})
    out = []
    for metric, direction in known.items():
        words = METRIC_WORDS.get(metric)
        if words is None and metric.startswith("heldout_solve_rate/"):
            words = f"Held-out solve rate: {metric.split('/', 1)[1]} tasks"
        out.append((metric, words or metric, direction))
    return out


def by_section(params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A trial's settings ({path: value}) by the section that holds them: {"train": {"lr": ...}, ...}."""
    out: dict[str, dict[str, Any]] = {}
    for path, value in params.items():
        section, _, name = path.rpartition(".")
        out.setdefault(section or "run", {})[name] = value
    return out


def settings_words(params: dict[str, Any], labels: dict[str, str]) -> str:
    """A trial's settings as a person reads them: "Learning rate 0.0043, Warm-up (steps) 12"."""
    return ", ".join(f"{labels.get(path, path)} {word(value)}" for path, value in params.items())

