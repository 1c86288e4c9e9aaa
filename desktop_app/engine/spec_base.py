"""What every spec dataclass shares (stdlib only): fields with help text and display hints, a strict JSON round
trip, validation that reports every problem at once, and atomic JSON files.

A field is declared with `spec_field(default, help, **hints)`. The hints are read by the window's forms and the
CLI's help, so a setting is described in exactly one place:
    label     words a person reads ("Learning rate"); default: the field name made readable
    unit      shown after the value ("steps", "tokens", "s")
    minimum / maximum / choices   allowed values (the form's limits; `validate()` checks them too)
    zero      what 0 means for an int/float ("auto", "off", "the model's context"): shown instead of 0
    advanced  True: listed under Advanced in the window (defaults suit most runs)
    widget    "files" (a list of file paths), "file" (one file path), "folder" (one folder path), "benchmarks" (task
              names of lm-evaluation-harness, picked from its catalog), "checklist" (a list from `choices`),
              "weights" (a dict of named numbers from `keys`), "numbers" (a dict of named whole numbers from `keys`,
              unset ones left out), "lines" (a list of strings, one per line), "records" (a list of JSON objects,
              loaded from a JSON Lines file), "modules" (layer names, picked from the base model's linear layers),
              "json" (free-form JSON)
    hidden    True: not shown in forms (set elsewhere, e.g. GRPO's prompt files are the run's data files)
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

from desktop_app.engine.errors import UserError
from desktop_app.engine.fileio import atomic_write_text

SpecT = TypeVar("SpecT")


class SpecError(UserError, ValueError):
    """A spec that cannot be used; `problems` lists every reason."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def spec_field(default: Any, help: str, **hints: Any) -> Any:
    """A dataclass field with help text (tooltip / CLI help) and display hints (see the module doc)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: json.loads(json.dumps(default)), metadata={"help": help, **hints})
    return field(default=default, metadata={"help": help, **hints})


def field_of(spec_cls: type, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(spec_cls):
        if f.name == name:
            return f
    raise KeyError(f"{spec_cls.__name__} has no field {name!r}")


def help_text(spec_cls: type, name: str) -> str:
    """The help text of one field of a spec class."""
    return str(field_of(spec_cls, name).metadata.get("help", ""))


def field_label(spec_cls: type, name: str) -> str:
    """The words a person reads for a field: its `label` hint, else its name made readable."""
    label = field_of(spec_cls, name).metadata.get("label")
    return str(label) if label else name.replace("_", " ").capitalize()


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def spec_to_dict(spec: Any) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def spec_from_dict(spec_cls: type[SpecT], data: dict[str, Any]) -> SpecT:
    """Build a spec from a dict, refusing unknown keys by name (typos must not pass silently)."""
    if not isinstance(data, dict):
        raise SpecError([f"{spec_cls.__name__} must be a JSON object, got {type(data).__name__}"])
    names = {f.name: f for f in dataclasses.fields(spec_cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise SpecError([f"unknown {spec_cls.__name__} field(s): {', '.join(unknown)}"])
    problems: list[str] = []
    kwargs = {key: _coerce(key, value, default_of(names[key]), problems) for key, value in data.items()}
    if problems:
        raise SpecError(problems)
    return spec_cls(**kwargs)


def _coerce(key: str, value: Any, default: Any, problems: list[str]) -> Any:
    # JSON has one number type; accept 3.0 for an int field and 3 for a float field, nothing looser.
    if isinstance(default, bool):
        if not isinstance(value, bool):
            problems.append(f"{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, int) and default is not None:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{key} must be a whole number, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problems.append(f"{key} must be a number, got {value!r}")
            return value
        return float(value)
    return value


def save_json(data: dict[str, Any], path: str | Path) -> None:
    """Write JSON atomically (temp sibling, fsync, rename) so a crash never leaves half a file."""

    atomic_write_text(Path(path), json.dumps(data, indent=2, sort_keys=False) + "\n")


def load_json(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError([f"{path} does not exist"]) from None
    except json.JSONDecodeError as exc:
        raise SpecError([f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{path} must hold a JSON object"])
    return data


class SpecMixin:
    def to_dict(self) -> dict[str, Any]:
        return spec_to_dict(self)

    @classmethod
    def from_dict(cls: type[SpecT], data: dict[str, Any]) -> SpecT:
        return spec_from_dict(cls, data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls: type[SpecT], text: str) -> SpecT:
        return spec_from_dict(cls, json.loads(text))

    def validate(self) -> list[str]:  # pragma: no cover - overridden
        return []

    def check(self: SpecT) -> SpecT:
        """Raise SpecError with every problem, else return self (for chaining)."""
        problems = self.validate()  # type: ignore[attr-defined]
        if problems:
            raise SpecError(problems)
        return self

    def replace(self: SpecT, **changes: Any) -> SpecT:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def check_positive(problems: list[str], name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        problems.append(f"{name} must be a whole number of at least 1, got {value!r}")


def check_count(problems: list[str], name: str, value: Any) -> None:
    """A whole number of 0 or more."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        problems.append(f"{name} must be a whole number of 0 or more, got {value!r}")


def check_range(problems: list[str], name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (low <= value <= high):
        problems.append(f"{name} must be between {low:g} and {high:g}, got {value!r}")


def check_choice(problems: list[str], name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        problems.append(f"{name} must be one of {', '.join(choices)}, got {value!r}")


def check_bool(problems: list[str], name: str, value: Any) -> None:
    if not isinstance(value, bool):
        problems.append(f"{name} must be true or false, got {value!r}")


def check_files(problems: list[str], name: str, value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{name} must be a list of file paths")
