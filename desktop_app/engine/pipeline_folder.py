"""A pipeline on disk (torch-free): its file, its stages' run folders and its state file. recipes/pipeline.py runs
one; the window and engine/runs.py read where one stands.

A pipeline file (JSON):

    {"stages": [
        {"name": "pretrain", "config": {"model": {...}, "dataset": "ws/datasets/sample", "train": {...}}},
        {"name": "sft", "config": {"objective": "sft", "data": ["chats.jsonl"], "adapter": {"kind": "lora"}}},
        {"name": "dpo", "config": "dpo-run.json"}
    ]}

Each stage's "config" is a run config (an object, or the path of a run.json). A stage without base_model
starts from the previous stage's run (its newest good checkpoint; a LoRA stage's adapter is merged in
memory). Relative paths are taken from the pipeline file's folder.

Layout of the output folder OUT:
    pipeline.json          the pipeline as run (absolute paths)
    pipeline_state.json    per stage: name, run folder, status (pending | running | completed |
                           early_stopped | stopped | failed), step; written atomically at each change
    stages/NN-name/        one ordinary run folder per stage (run.json, metrics.jsonl, checkpoints/)

`recipes.pipeline.run_pipeline` runs one (and resumes it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.specs import RunConfig, SpecError, load_json, save_json

PIPELINE_FILE = "pipeline.json"
STATE_FILE = "pipeline_state.json"
STAGES_DIR = "stages"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DONE = ("completed", "early_stopped")


@dataclass
class Stage:
    name: str
    config: dict[str, Any]  # a RunConfig dict; base_model "" = the previous stage's run
    follows_previous: bool


def _absolute(value: str, root: Path) -> str:
    if not value:
        return value
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (root / p).resolve())


def _absolutize(config: dict[str, Any], root: Path) -> dict[str, Any]:
    out = dict(config)
    for key in ("dataset", "base_model"):
        if isinstance(out.get(key), str):
            out[key] = _absolute(out[key], root)
    if isinstance(out.get("data"), list):
        out["data"] = [_absolute(d, root) if isinstance(d, str) else d for d in out["data"]]
    options = out.get("method_options")
    if isinstance(options, dict) and isinstance(options.get("val_data"), list):
        out["method_options"] = {**options, "val_data": [_absolute(d, root) if isinstance(d, str) else d
                                                         for d in options["val_data"]]}
    return out


def load_pipeline(source: str | Path | dict[str, Any]) -> list[Stage]:
    """The stages of a pipeline file (or dict), checked: every problem of every stage at once (SpecError)."""
    if isinstance(source, dict):
        data, root = source, Path.cwd()
    else:
        path = Path(source)
        data, root = load_json(path), path.parent.resolve()
    stages_raw = data.get("stages")
    problems: list[str] = []
    unknown = sorted(set(data) - {"stages", "format_version"})
    if unknown:
        problems.append(f"unknown pipeline field(s): {', '.join(unknown)}")
    if not isinstance(stages_raw, list) or not stages_raw:
        raise SpecError([*problems, "a pipeline needs a non-empty list of stages"])
    stages: list[Stage] = []
    seen: set[str] = set()
    for i, raw in enumerate(stages_raw, 1):
        where = f"stage {i}"
        if not isinstance(raw, dict):
            problems.append(f"{where} must be an object with name and config")
            continue
        name = raw.get("name", f"stage{i}")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            problems.append(f"{where}: name {name!r} must be letters, digits, '-', '_' or '.'")
            name = f"stage{i}"
        elif name in seen:
            problems.append(f"{where}: the name {name!r} is used twice")
        seen.add(name)
        where = f"stage {i} ({name})"
        extra = sorted(set(raw) - {"name", "config"})
        if extra:
            problems.append(f"{where}: unknown field(s) {', '.join(extra)}")
        config = raw.get("config")
        config_root = root
        if isinstance(config, str):
            config_path = Path(_absolute(config, root))
            try:
                config = load_json(config_path)
            except SpecError as exc:
                problems += [f"{where}: {m}" for m in exc.problems]
                continue
            config_root = config_path.parent
        if not isinstance(config, dict):
            problems.append(f"{where}: config must be a run config object or the path of a run.json")
            continue
        config = _absolutize(config, config_root)
        follows = not config.get("base_model") and not config.get("model")
        if follows and i == 1:
            problems.append(f"{where}: the first stage needs a model spec or a base_model (there is no earlier stage "
                            "to start from)")
        try:
            check = RunConfig.from_dict({**config, **({"base_model": "<previous stage>"} if follows else {})})
            problems += [f"{where}: {m}" for m in check.validate()]
        except SpecError as exc:
            problems += [f"{where}: {m}" for m in exc.problems]
            continue
        stages.append(Stage(name, config, follows))
    if problems:
        raise SpecError(problems)
    return stages


def stage_dir(out: Path, index: int, stage: Stage) -> Path:
    return out / STAGES_DIR / f"{index + 1:02d}-{stage.name}"


def read_state(out: str | Path) -> dict[str, Any]:
    """pipeline_state.json of a pipeline folder ({} when absent or unreadable)."""
    try:
        data = json.loads((Path(out) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_pipeline_dir(path: str | Path) -> bool:
    return (Path(path) / PIPELINE_FILE).is_file()


def write_pipeline(out: Path, stages: list[Stage]) -> None:
    """pipeline.json: the pipeline as it runs (absolute paths), so a resume runs the same stages."""
    save_json({"format_version": 1, "stages": [{"name": s.name, "config": s.config} for s in stages]},
              out / PIPELINE_FILE)


def write_state(out: Path, status: list[dict[str, Any]], current: int) -> None:
    """pipeline_state.json: every stage's name, run folder, status and step, and which stage runs (atomic)."""
    save_json({"format_version": 1, "current": current, "stages": status}, out / STATE_FILE)
