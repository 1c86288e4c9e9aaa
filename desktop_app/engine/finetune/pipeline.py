"""Multi-stage pipelines (e.g. pretrain -> SFT -> DPO): stages of the one training loop, each stage's output the
next one's base.

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

`run_pipeline` is a generator like `train`: it yields each stage's events (a stage's own Finished becomes a
log line) and ends with one Finished for the pipeline. Resuming (the same call with resume=True) skips
completed stages, resumes the interrupted one from its newest checkpoint and goes on from there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log, Progress, StageStarted
from desktop_app.engine.methods import method_of
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


def _write_state(out: Path, stages: list[Stage], status: list[dict[str, Any]], current: int) -> None:
    save_json({"format_version": 1, "current": current, "stages": status}, out / STATE_FILE)


def run_pipeline(source: str | Path | dict[str, Any] | None, out: str | Path, controls: Controls | None = None, *,
                 resume: bool = False, interactive: bool = False) -> Iterator[Event]:
    """Run (or resume) a pipeline into the folder `out`, yielding every stage's events and a final Finished.

    source: the pipeline file or dict (None with resume=True: the pipeline.json inside `out`)."""
    from desktop_app.engine import run_folder as ckpt
    from desktop_app.engine.run_folder import RUN_FILE
    from desktop_app.engine.train.loop import train

    controls = controls or Controls()
    out = Path(out)
    if resume:
        if not is_pipeline_dir(out):
            raise UserError(f"{out} is not a pipeline folder (no {PIPELINE_FILE}): nothing to resume")
        stages = load_pipeline(out / PIPELINE_FILE)
        if source is not None:
            given = load_pipeline(source)
            if [(s.name, s.config) for s in given] != [(s.name, s.config) for s in stages]:
                raise UserError(f"the pipeline differs from the one {out} was started with; resume without changing "
                                f"it (or start a new folder). Started with: {out / PIPELINE_FILE}")
    else:
        if source is None:
            raise UserError("no pipeline given")
        stages = load_pipeline(source)
        if out.exists() and any(out.iterdir()):
            if is_pipeline_dir(out):
                raise UserError(f"{out} already holds a pipeline: resume it (train --resume {out}) or choose a new "
                                "output folder")
            raise UserError(f"{out} is not empty: choose a new output folder for the pipeline")
        try:
            out.mkdir(parents=True, exist_ok=True)
            save_json({"format_version": 1, "stages": [{"name": s.name, "config": s.config} for s in stages]},
                      out / PIPELINE_FILE)
        except OSError as exc:
            raise UserError(f"cannot write the pipeline folder {out}: {exc.strerror or exc}") from None
    old = {s.get("name"): s for s in read_state(out).get("stages", []) if isinstance(s, dict)} if resume else {}
    status = [{"name": s.name, "run_dir": str(stage_dir(out, i, s)), "status": old.get(s.name, {}).get("status",
               "pending"), "step": old.get(s.name, {}).get("step", 0)} for i, s in enumerate(stages)]
    n = len(stages)
    for i, stage in enumerate(stages):
        run_dir = stage_dir(out, i, stage)
        if status[i]["status"] in DONE and ckpt.latest_checkpoint(run_dir) is not None:
            yield Log("info", f"pipeline stage {i + 1}/{n} '{stage.name}': already {status[i]['status']}, skipped")
            continue
        yield Progress("pipeline", i, n, "stages", stage.name)
        has_checkpoint = bool(ckpt.list_committed(run_dir))
        if has_checkpoint and (run_dir / RUN_FILE).is_file():
            config = RunConfig.load(run_dir / RUN_FILE)  # exactly what the stage started with
            how = "resuming"
        else:
            data = dict(stage.config)
            if stage.follows_previous:
                data["base_model"] = str(stage_dir(out, i - 1, stages[i - 1]))
            config = RunConfig.from_dict(data)
            how = "starting"
        yield Log("info", f"pipeline stage {i + 1}/{n} '{stage.name}' ({config.objective}"
                  f"{', ' + config.adapter_spec().kind if config.adapter_spec().kind != 'none' else ''}): {how} in "
                  f"{run_dir}" + (f", base {config.base_model}" if config.base_model else ""))
        status[i]["status"] = "running"
        _write_state(out, stages, status, i)
        yield StageStarted(i, stage.name, str(run_dir), method_of(config).key)
        finished: Finished | None = None
        try:
            for event in train(config, run_dir, controls, resume=has_checkpoint, interactive=interactive):
                if isinstance(event, Finished):
                    finished = event
                    continue
                if event.type == "step":
                    status[i]["step"] = event.step  # type: ignore[attr-defined]
                yield event
        except UserError as exc:
            status[i]["status"] = "failed"
            _write_state(out, stages, status, i)
            raise UserError(f"pipeline stage {i + 1}/{n} '{stage.name}': {exc}") from None
        reason = finished.reason if finished is not None else "failed"
        status[i]["status"] = reason
        status[i]["step"] = finished.step if finished is not None else status[i]["step"]
        _write_state(out, stages, status, i)
        message = finished.message if finished is not None else "no result"
        yield Log("info" if reason in DONE else "warning",
                  f"pipeline stage {i + 1}/{n} '{stage.name}' {reason}: {message}")
        if reason not in DONE:
            yield Finished(reason, step=i, message=f"pipeline {reason} in stage {i + 1}/{n} '{stage.name}': {message}; "
                           f"resume with: train --resume {out}", result=_result(out, status))
            return
    yield Progress("pipeline", n, n, "stages", "done")
    yield Finished("completed", step=n, message=f"pipeline of {n} stage(s) completed", result=_result(out, status))


def _result(out: Path, status: list[dict[str, Any]]) -> dict[str, Any]:
    done = [s for s in status if s["status"] in DONE]
    return {"pipeline_dir": str(out), "stages": status, "run_dir": done[-1]["run_dir"] if done else ""}
