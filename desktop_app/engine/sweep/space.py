"""What a sweep varies (stdlib only): the settings of a run config that may vary for its method, `--vary` specs parsed
and checked against them, each trial's settings put into its run config, and the ranges a method usually searches.

    lr=1e-5..1e-3:log      a range on a log scale (learning rates, KL weights)
    warmup_steps=0..50     a range (whole numbers for a whole-number setting)
    lora_rank=8,16,32      a choice among values (numbers, true/false, or a setting's own choices)

A setting is named as its spec names it: a TrainSpec field (lr, batch_size, warmup_steps, weight_decay, ...), a
method option (beta for DPO, kl_coef for GRPO and self-play, ...), a model field of a model trained from scratch
(dropout, n_layers, ...; model.NAME for any), the adapter's lora_rank, lora_alpha, lora_dropout, or seed. A dotted
path (train.lr, adapter.rank, method_options.kl_coef) names one as well. Optuna records each by its path.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import METHOD_OPTIONS
from desktop_app.engine.methods import method_of
from desktop_app.engine.spec_base import default_of
from desktop_app.engine.specs import AdapterSpec, ModelSpec, RunConfig, TrainSpec

# How a run is carried out or measured, not how it learns: a sweep that varied them would compare unlike trials.
NOT_SEARCHED = {
    "train": {"micro_batch_size", "eval_every", "eval_batches", "log_every", "save_every", "keep_last", "precision",
              "device", "threads", "compile", "kernels", "gradient_checkpointing", "early_stopping_patience",
              "nonfinite_policy", "max_nonfinite", "optimizer", "sample_tokens", "sample_temperature",
              "sample_top_k", "auto_micro_batch", "time_budget_s"},
    "model": {"vocab_size", "context_length", "family", "norm_eps"},
    "adapter": {"kind", "quant_type", "double_quant"},
    "method_options": {"val_fraction", "sample_count", "eval_prompts", "heldout_per_type", "heldout_seed",
                       "strict_sandbox", "world", "prompt_style", "tasks_from", "length_target", "format_pattern",
                       "reward_file"},
}
# The names a person types for these (every other setting goes by its field's name), and other names accepted.
NAMES = {"adapter.rank": "lora_rank", "adapter.alpha": "lora_alpha", "adapter.dropout": "lora_dropout",
         "model.dropout": "dropout"}
ALIASES = {**{name: path for path, name in NAMES.items()}, "kl_weight": "method_options.kl_coef"}
GRID_POINTS = 5  # a range becomes this many values in a grid sweep


@dataclass(frozen=True)
class Setting:
    """One setting a sweep may vary: its path in the run config, the name a person types, and its kind."""

    path: str  # "train.lr", "adapter.rank", "seed"
    name: str  # "lr", "lora_rank", "seed"
    kind: str  # float | int | choice
    choices: tuple[Any, ...] = ()  # a choice setting's values (true/false for a switch)
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class Dimension:
    """What varies along one setting: a range (low..high, on a log scale or not) or a choice among values."""

    setting: Setting
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()

    @property
    def path(self) -> str:
        return self.setting.path

    @property
    def name(self) -> str:
        return self.setting.name

    @property
    def is_range(self) -> bool:
        return not self.choices

    def text(self) -> str:
        """As --vary writes it."""
        if self.choices:
            return f"{self.name}=" + ",".join(_word(c) for c in self.choices)
        return f"{self.name}={_word(self.low)}..{_word(self.high)}" + (":log" if self.log else "")

    def grid(self) -> tuple[Any, ...]:
        """The values a grid sweep tries: the choices, or GRID_POINTS values spread over the range."""
        if self.choices:
            return self.choices
        points = []
        for i in range(GRID_POINTS):
            share = i / (GRID_POINTS - 1)
            if self.log:
                value = math.exp(math.log(self.low) + share * (math.log(self.high) - math.log(self.low)))
            else:
                value = self.low + share * (self.high - self.low)
            points.append(round(value) if self.setting.kind == "int" else float(f"{value:.6g}"))
        return tuple(dict.fromkeys(points))


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# --- the settings of a run ----------------------------------------------------------------------------------------

def settings_of(config: RunConfig) -> dict[str, Setting]:
    """Every setting that may vary in a sweep of `config`, by the name a person types."""
    sections: list[tuple[str, type]] = [("train", TrainSpec)]
    if config.model:
        sections.append(("model", ModelSpec))
    if config.adapter and config.adapter_spec().kind != "none":
        sections.append(("adapter", AdapterSpec))
    if config.objective in METHOD_OPTIONS:
        sections.append(("method_options", METHOD_OPTIONS[config.objective]))
    out: dict[str, Setting] = {"seed": Setting("seed", "seed", "int", minimum=0)}
    for section, cls in sections:
        for f in dataclasses.fields(cls):
            setting = _setting(section, f)
            if setting is not None:
                out[setting.name] = setting
    return out


def _setting(section: str, f: dataclasses.Field) -> Setting | None:
    if f.name in NOT_SEARCHED.get(section, ()) or f.metadata.get("hidden"):
        return None
    path = f"{section}.{f.name}"
    name = NAMES.get(path) or (f"model.{f.name}" if section == "model" else f.name)
    default, meta = default_of(f), f.metadata
    if isinstance(default, bool):
        return Setting(path, name, "choice", (True, False))
    if isinstance(default, (int, float)):
        return Setting(path, name, "int" if isinstance(default, int) else "float",
                       minimum=meta.get("minimum"), maximum=meta.get("maximum"))
    if isinstance(default, str) and meta.get("choices"):
        return Setting(path, name, "choice", tuple(meta["choices"]))
    return None


def resolve(name: str, config: RunConfig) -> Setting:
    """The setting `name` names in a sweep of `config`; UserError (one line) for one this run does not have."""
    settings = settings_of(config)
    by_path = {s.path: s for s in settings.values()}
    if name in settings:
        return settings[name]
    path = ALIASES.get(name, name if "." in name else "")
    if path in by_path:
        return by_path[path]
    raise UserError(f"--vary {name}: {_why_not(name, path, config, settings)}")


def _why_not(name: str, path: str, config: RunConfig, settings: dict[str, Setting]) -> str:
    method = method_of(config)
    section, _, field = (path or _path_anywhere(name)).rpartition(".")
    run = f"a {method.label} run"
    if section == "adapter":
        return f"{name} is not a setting of {run}: it trains no adapters (LoRA and QLoRA runs do)"
    if section == "model" and not config.model:
        return f"{name} is not a setting of {run}: its model is the base model's, not a spec trained from scratch"
    if section == "method_options":
        owners = [key for key, cls in METHOD_OPTIONS.items() if field in {f.name for f in dataclasses.fields(cls)}]
        if config.objective not in owners:
            return f"{name} is not a setting of {run} (it is an option of {', '.join(owners)})"
    if section and field in NOT_SEARCHED.get(section, ()):
        return f"{name} cannot vary: it changes how trials are run or measured, not how they learn"
    if section:
        return f"{name} cannot vary: only numbers, switches and settings with a few choices can"
    close = difflib.get_close_matches(name, list(settings), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown setting {name!r}{hint}; settings of {run} that may vary: {', '.join(sorted(settings))}"


def _path_anywhere(name: str) -> str:
    """The path of `name` in whichever spec has it ('' when none does)."""
    if name in ALIASES:
        return ALIASES[name]
    for section, cls in (("train", TrainSpec), ("model", ModelSpec), *(("method_options", c)
                                                                       for c in METHOD_OPTIONS.values())):
        if name in {f.name for f in dataclasses.fields(cls)}:
            return f"{section}.{name}"
    return ""


# --- --vary specs ---------------------------------------------------------------------------------------------------

def parse_vary(text: str, config: RunConfig) -> Dimension:
    """`NAME=LOW..HIGH[:log]` or `NAME=A,B,C` as a Dimension of `config`'s settings; UserError (one line) otherwise."""
    name, sep, values = (part.strip() for part in str(text).partition("="))
    if not sep or not name or not values:
        raise UserError(f"--vary {text!r}: write NAME=LOW..HIGH, NAME=LOW..HIGH:log or NAME=A,B,C")
    setting = resolve(name, config)
    setting = dataclasses.replace(setting, name=name) if name != setting.name else setting
    if ".." in values:
        return _range(setting, values, text)
    return _choices(setting, values, text)


def _range(setting: Setting, values: str, text: str) -> Dimension:
    body, _, scale = values.partition(":")
    if scale not in ("", "log"):
        raise UserError(f"--vary {text}: after the range comes :log (a log scale) or nothing, not {scale!r}")
    if setting.kind == "choice":
        raise UserError(f"--vary {text}: {setting.name} takes values to choose from ("
                        f"{','.join(_word(c) for c in setting.choices)}), not a range")
    low_text, _, high_text = body.partition("..")
    low, high = (_number(setting, t.strip(), text) for t in (low_text, high_text))
    if not low < high:
        raise UserError(f"--vary {text}: the range {_word(low)}..{_word(high)} is empty: its low end must be below its "
                        "high end")
    if scale == "log" and low <= 0:
        raise UserError(f"--vary {text}: a log scale needs a range above 0, not from {_word(low)}")
    for end in (low, high):
        _within(setting, end, text)
    return Dimension(setting, float(low), float(high), scale == "log")


def _choices(setting: Setting, values: str, text: str) -> Dimension:
    items = [v.strip() for v in values.split(",")]
    if any(not v for v in items):
        raise UserError(f"--vary {text}: an empty value between commas")
    if setting.kind == "choice":
        parsed = [_choice(setting, v, text) for v in items]
    else:
        parsed = [_number(setting, v, text) for v in items]
        for value in parsed:
            _within(setting, value, text)
    unique = tuple(dict.fromkeys(parsed))
    if len(unique) < 2:
        raise UserError(f"--vary {text}: give at least two values to choose from, or a range LOW..HIGH")
    return Dimension(setting, choices=unique)


def _number(setting: Setting, word: str, text: str) -> int | float:
    try:
        value = float(word)
    except ValueError:
        raise UserError(f"--vary {text}: {word!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"--vary {text}: {word!r} is not a finite number")
    if setting.kind == "int":
        if not value.is_integer():
            raise UserError(f"--vary {text}: {setting.name} is a whole number, not {word}")
        return int(value)
    return value


def _choice(setting: Setting, word: str, text: str) -> Any:
    if setting.choices == (True, False):
        if word.lower() in ("true", "yes", "on", "1"):
            return True
        if word.lower() in ("false", "no", "off", "0"):
            return False
        raise UserError(f"--vary {text}: {setting.name} is true or false, not {word!r}")
    if word not in setting.choices:
        raise UserError(f"--vary {text}: {setting.name} is one of {', '.join(setting.choices)}, not {word!r}")
    return word


def _within(setting: Setting, value: float, text: str) -> None:
    low, high = setting.minimum, setting.maximum
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"at least {_word(low)}" if high is None else f"between {_word(low)} and {_word(high)}"
        raise UserError(f"--vary {text}: {setting.name} must be {bounds}, not {_word(value)}")


def parse_space(specs: list[str], config: RunConfig) -> list[Dimension]:
    """Every --vary spec as a Dimension; one setting varied twice is refused."""
    dims = [parse_vary(s, config) for s in specs]
    seen: dict[str, str] = {}
    for dim in dims:
        if dim.path in seen:
            raise UserError(f"--vary {dim.name} and --vary {seen[dim.path]} vary one setting ({dim.path}): give it "
                            "once")
        seen[dim.path] = dim.name
    if not dims:
        raise UserError("nothing varies: give at least one --vary NAME=LOW..HIGH or NAME=A,B,C")
    return dims


# --- trials -----------------------------------------------------------------------------------------------------

def apply(config: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A run config (JSON) with a trial's settings ({path: value}) put in."""
    out = copy.deepcopy(config)
    for path, value in params.items():
        section, _, field = path.rpartition(".")
        if not section:
            out[field] = value
        else:
            out[section] = {**(out.get(section) or {}), field: value}
    return out


def suggested(config: RunConfig) -> list[str]:
    """The --vary specs a method usually searches, around its own default learning rate."""
    method = method_of(config)
    adapter = config.adapter_spec().kind if config.adapter else "none"
    lr = method.default_lr(adapter)
    out = [f"lr={lr / 10:g}..{lr * 10:g}:log", f"warmup_steps=0..{max(1, config.train_spec().steps // 5)}",
           "weight_decay=0..0.2"]
    if adapter != "none":
        out += ["lora_rank=4,8,16,32", "lora_alpha=8..64"]
    if config.model:
        out.append("dropout=0..0.2")
    if config.objective == "dpo":
        out.append("beta=0.05..0.5:log")
    if config.objective in ("grpo", "selfplay"):
        out.append("kl_coef=0..0.1")
    return out
