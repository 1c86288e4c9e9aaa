"""Which model each evaluated model is compared with, and by how much it differs (torch-free).

"Did my fine-tune get worse at everything else?" is answered against its base model: a fine-tune run, one of
its checkpoints, its export or its adapter names the base it started from (run.json's base_model, PEFT's
adapter_config.json base_model_name_or_path). When that base is in the same table, each figure's difference is
against it; otherwise against the table's first model (the reference a person puts first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.run_folder import read_json

ADAPTER_CONFIG = "adapter_config.json"
NOT_COMPARED = ("step", "seconds", "items", "fewshot", "questions")  # counts and settings, not figures


def base_of(model_path: str | Path) -> str | None:
    """The base model a fine-tune run, checkpoint, export or adapter folder started from (as recorded: a path
    or a Hub id); None when none is recorded (a model trained from scratch, someone else's folder, a GGUF)."""
    p = Path(model_path).expanduser()
    if not p.is_dir():
        return None
    run_dir = p.parent.parent if p.parent.name == run_folder.CHECKPOINTS_DIR else p
    for record in (p / "run.json", run_dir / "run.json"):
        run = read_json(record)
        if isinstance(run, dict) and isinstance(run.get("base_model"), str) and run["base_model"]:
            return run["base_model"]
    adapter = read_json(p / ADAPTER_CONFIG)
    base = adapter.get("base_model_name_or_path") if isinstance(adapter, dict) else None
    return base if isinstance(base, str) and base else None


def _same(a: str, b: str) -> bool:
    """Two model names for the same model: equal as given, or the same folder on disk."""
    if a == b:
        return True
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve() and Path(a).expanduser().exists()
    except OSError:
        return False


def comparable(key: str, value: Any) -> bool:
    """A figure whose difference means something: a number, not a count, setting or standard error."""
    if isinstance(value, bool) or not isinstance(value, int | float) or key.endswith("/stderr"):
        return False
    return key.rsplit("/", 1)[-1] not in NOT_COMPARED and not key.startswith(("tasks/", "heldout_in_training/"))


def differences(rows: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, float]]]:
    """For each row's "model" (rows: {"model": path, "name"?: label, figure: value, ...}, the eval table's rows):
    (the model it is compared with: its own base when that base is a row too, else the first row's model;
    {figure: its value minus that model's}). The first row, and a row compared with itself, get no entry."""
    if not rows:
        return {}
    first = rows[0]
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for row in rows:
        model = str(row.get("model", ""))
        base = base_of(model)
        reference = next((r for r in rows if base and _same(str(r.get("model", "")), base)), first)
        if reference is row:
            continue
        delta = {key: float(value) - float(reference[key]) for key, value in row.items()
                 if comparable(key, value) and comparable(key, reference.get(key))}
        out[model] = (str(reference.get("model", "")), delta)
    return out
