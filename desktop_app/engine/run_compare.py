"""Runs compared side by side: each metric's curve per run, its final and best figures, and how the runs' configs
differ (with a short label per run naming what differs, e.g. "lr=3e-4", which the plots use as their legend).

Reads metrics.jsonl through run_folder.py and run.json through specs.RunConfig; writes nothing. Stdlib only: the
window, the CLI (`runs compare`) and tests use it without torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.run_folder import RUN_FILE, is_run_folder, read_json, read_metrics
from desktop_app.engine.runs import nested_runs
from desktop_app.engine.spec_base import SpecError
from desktop_app.engine.specs import AdapterSpec, DistributedSpec, ModelSpec, RunConfig, TrainSpec

# Fields of a step record that describe the record, not the training: never a curve.
BOOKKEEPING = frozenset({"type", "step", "total_steps", "elapsed_s", "eta_s", "progress", "tokens", "epoch"})
# Which way is better, by a part of the metric's name; the first match wins, no match: neither (lr, grad_norm...).
BETTER_BY_NAME: tuple[tuple[str, str], ...] = (
    ("rewards_rejected", "min"), ("loss", "min"), ("ppl", "min"), ("perplexity", "min"), ("bpb", "min"),
    ("bits_per_byte", "min"), ("error", "min"), ("trivial", "min"), ("duplicate", "min"),
    ("reward", "max"), ("accuracy", "max"), ("acc", "max"), ("solve_rate", "max"), ("pass@", "max"),
    ("validity", "max"), ("margin", "max"), ("per_s", "max"), ("mfu", "max"),
)
FIRST_METRICS = ("loss", "val_loss")  # shown first; the rest in the order the runs reported them
LABEL_KEYS = 3  # differing settings named in a run's label; more are counted ("+2 more")
NOISY_KEYS = frozenset({"base_model_sha256", "format_version"})  # follow from other keys: never a label
# Settings a label names first when several differ (what people vary to compare runs); the rest in run.json's order.
LABEL_FIRST = ("objective", "base_model", "train.lr", "train.batch_size", "adapter.kind", "adapter.rank",
               "model.d_model", "model.n_layers", "train.steps", "seed", "dataset")


def better_of(name: str) -> str:
    """"min" when lower is better (losses, perplexity, errors), "max" when higher is (rewards, accuracy, solve rates,
    speed), "" when neither (learning rate, gradient norm...)."""
    lowered = name.lower()
    return next((way for part, way in BETTER_BY_NAME if part in lowered), "")


@dataclass
class Curve:
    """One run's values of one metric, in step order (finite values only: a NaN step is a gap)."""

    steps: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def final(self) -> tuple[int, float] | None:
        return (self.steps[-1], self.values[-1]) if self.steps else None

    def best(self, better: str) -> tuple[int, float] | None:
        if not self.steps or not better:
            return None
        pick = min if better == "min" else max
        i = pick(range(len(self.values)), key=lambda j: self.values[j])
        return self.steps[i], self.values[i]


@dataclass
class MetricComparison:
    """One metric across the runs: `curves[i]` is run i's (empty when that run did not report it)."""

    name: str
    better: str
    curves: list[Curve]

    def to_dict(self) -> dict[str, Any]:
        runs = []
        for curve in self.curves:
            final, best = curve.final(), curve.best(self.better)
            runs.append({"final": final[1] if final else None, "final_step": final[0] if final else None,
                         "best": best[1] if best else None, "best_step": best[0] if best else None,
                         "steps": curve.steps, "values": curve.values})
        return {"name": self.name, "better": self.better, "runs": runs}

    def leader(self, figure: str) -> int | None:
        """The run whose "final" or "best" figure is the best one (lowest loss, highest reward); None when the
        metric has no better way, fewer than two runs reported it, or several share the best figure."""
        points = [(c.final() if figure == "final" else c.best(self.better)) for c in self.curves]
        values = {i: p[1] for i, p in enumerate(points) if p is not None}
        if not self.better or len(values) < 2:
            return None
        top = (min if self.better == "min" else max)(values.values())
        leaders = [i for i, v in values.items() if v == top]
        return leaders[0] if len(leaders) == 1 else None


@dataclass
class ComparedRun:
    path: str
    name: str
    label: str  # what differs, e.g. "lr=3e-4, steps=200"; the run's name when nothing does

    @property
    def legend(self) -> str:
        """The legend of its curves: what differs, and which run it is."""
        return self.name if self.label == self.name else f"{self.label} ({self.name})"


@dataclass
class RunComparison:
    runs: list[ComparedRun]
    metrics: list[MetricComparison]
    differences: dict[str, list[Any]]  # flattened run.json key -> each run's value (None: not set)
    settings: dict[str, list[Any]] = field(default_factory=dict)  # every key, the same ones included

    def metric(self, name: str) -> MetricComparison:
        return next(m for m in self.metrics if m.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [{"path": r.path, "name": r.name, "label": r.label, "legend": r.legend} for r in self.runs],
                "differences": [{"key": k, "values": v} for k, v in self.differences.items()],
                "metrics": [m.to_dict() for m in self.metrics]}


def compare_runs(paths: list[str | Path], metric: str | None = None) -> RunComparison:
    """The runs at `paths` compared (two or more run folders, each with metrics); `metric`: only that one."""
    folders = [Path(p) for p in paths]
    if len(folders) < 2:
        raise UserError("give two runs or more to compare (run folders, e.g. WORKSPACE/runs/NAME)")
    twice = next((f for i, f in enumerate(folders) if f.resolve() in {g.resolve() for g in folders[:i]}), None)
    if twice is not None:
        raise UserError(f"{twice} is given twice: give different runs to compare")
    curves = [_curves_of(f) for f in folders]
    names = _metric_names(curves)
    if metric is not None:
        if metric not in names:
            raise UserError(f"no run reported the metric {metric!r}; the runs have: {', '.join(names)}")
        names = [metric]
    metrics = [MetricComparison(n, better_of(n), [c.get(n, Curve()) for c in curves]) for n in names]
    configs = [config_of(f) for f in folders]
    differences = config_differences(configs)
    shown = _display_names(folders)
    runs = [ComparedRun(str(f), n, lab) for f, n, lab in zip(folders, shown, run_labels(differences, shown),
                                                              strict=True)]
    settings = {k: [c.get(k) for c in configs] for k in dict.fromkeys(k for c in configs for k in c)}
    return RunComparison(runs, metrics, differences, settings)


def _check_run(folder: Path) -> None:
    if not folder.exists():
        raise UserError(f"{folder} does not exist: give a run folder (e.g. WORKSPACE/runs/NAME)")
    if not folder.is_dir():
        raise UserError(f"{folder} is a file, not a run: give a run folder (e.g. WORKSPACE/runs/NAME)")
    inner = nested_runs(folder)
    if inner:
        raise UserError(f"{folder} holds several runs: give one of them ({', '.join(r.name for r in inner)})")
    if not is_run_folder(folder):
        raise UserError(f"{folder} is not a training run (it has no {RUN_FILE} or checkpoints): give a run folder "
                        "(e.g. WORKSPACE/runs/NAME)")


def _curves_of(folder: Path) -> dict[str, Curve]:
    """Each metric's curve from the run's step and evaluation records."""
    _check_run(folder)
    curves: dict[str, Curve] = {}
    for record in read_metrics(folder):
        step = record.get("step")
        if record.get("type") not in ("step", "eval") or not isinstance(step, int):
            continue
        for name, value in record.items():
            if name in BOOKKEEPING or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            curve = curves.setdefault(name, Curve())
            if math.isfinite(value):
                curve.steps.append(step)
                curve.values.append(float(value))
    if not any(c.steps for c in curves.values()):
        raise UserError(f"{folder} has no training metrics yet (its metrics.jsonl has no logged step): compare it "
                        "once it has trained a few steps")
    return curves


def _metric_names(curves: list[dict[str, Curve]]) -> list[str]:
    seen: dict[str, None] = {}
    for run in curves:
        seen.update(dict.fromkeys(n for n, c in run.items() if c.steps))
    first = [n for n in FIRST_METRICS if n in seen]
    return first + [n for n in seen if n not in first]


def config_of(folder: str | Path) -> dict[str, Any]:
    """A run's run.json flattened ("train.lr": 0.003), each nested spec with its defaults filled in (a run that left
    lr unset and one that set it to the default agree); a run.json this version cannot read is taken as written."""
    raw = read_json(Path(folder) / RUN_FILE)
    if not isinstance(raw, dict):
        return {}
    try:
        config = RunConfig.from_dict(raw).to_dict()
        for key, spec in (("train", TrainSpec), ("adapter", AdapterSpec), ("distributed", DistributedSpec)):
            config[key] = spec.from_dict(config[key]).to_dict()
        if config["model"]:
            config["model"] = ModelSpec.from_dict(config["model"]).to_dict()
    except (SpecError, TypeError, ValueError):
        config = raw
    return flatten(config)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested JSON objects as dotted keys; lists and other values stay whole."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_differences(configs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The keys whose values are not the same in every config, each with every run's value (None: not set)."""
    keys: dict[str, None] = {}
    for config in configs:
        keys.update(dict.fromkeys(config))
    out: dict[str, list[Any]] = {}
    for key in keys:
        values = [c.get(key) for c in configs]
        if any(_same_value(v) != _same_value(values[0]) for v in values[1:]):
            out[key] = values
    return out


def _same_value(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def run_labels(differences: dict[str, list[Any]], names: list[str]) -> list[str]:
    """Per run, what differs in words ("lr=3e-4, steps=200"); its name when nothing does."""
    keys = sorted((k for k in differences if k not in NOISY_KEYS),
                  key=lambda k: LABEL_FIRST.index(k) if k in LABEL_FIRST else len(LABEL_FIRST))
    short = _short_keys(keys)
    labels = []
    for i, name in enumerate(names):
        parts = [f"{short[k]}={value_text(differences[k][i])}" for k in keys[:LABEL_KEYS]]
        if len(keys) > LABEL_KEYS:
            parts.append(f"+{len(keys) - LABEL_KEYS} more")
        labels.append(", ".join(parts) or name)
    return labels


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each key by its last part ("train.lr" -> "lr") unless two keys share that part."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last, strict=True)}


def value_text(value: Any) -> str:
    """A setting's value in a few characters: 3e-4 for 0.0003, a path by its name, "—" when not set."""
    if value is None or value == "" or value == [] or value == {}:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, str):
        return Path(value).name if ("/" in value or "\\" in value) else value
    return json.dumps(value, ensure_ascii=False)


def number_text(value: float) -> str:
    """A figure in four significant digits (whole from 10,000 up); small and huge ones as 3e-4 / 1.2e6."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    if abs(value) < 1e-3 or abs(value) >= 1e6:
        mantissa, exponent = f"{value:.3e}".split("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:.4g}"  # 34140 tokens/s, not 3.414e+04


def _display_names(folders: list[Path]) -> list[str]:
    """Each run's folder name; with its parent's name where two runs share a name (two pipelines' "01-sft")."""
    names = [f.name for f in folders]
    return [f"{f.parent.name}/{f.name}" if names.count(f.name) > 1 else f.name for f in folders]
