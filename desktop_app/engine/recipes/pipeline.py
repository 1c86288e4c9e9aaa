"""Multi-stage pipelines (e.g. pretrain -> SFT -> DPO): stages of the one training loop, each stage's output the
next one's base (the file and folder format: pipeline_folder.py).

`run_pipeline` is a generator like `train`: it yields each stage's events (a stage's own Finished becomes a
log line) and ends with one Finished for the pipeline. Resuming (the same call with resume=True) skips
completed stages, resumes the interrupted one from its newest checkpoint and goes on from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log, Progress, StageStarted
from desktop_app.engine.methods import method_of
from desktop_app.engine.pipeline_folder import (
    DONE,
    PIPELINE_FILE,
    Stage,
    is_pipeline_dir,
    load_pipeline,
    read_state,
    stage_dir,
    write_pipeline,
    write_state,
)
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.loop import train
from desktop_app.engine.train.preflight import ERROR
from desktop_app.engine.train.request import PreparedRun, fit_pipeline_stages, prepare_run, request_of_fields


def run_pipeline(source: str | Path | dict[str, Any] | None, out: str | Path, controls: Controls | None = None, *,
                 resume: bool = False, interactive: bool = False) -> Iterator[Event]:
    """Run (or resume) a pipeline into the folder `out`, yielding every stage's events and a final Finished.

    source: the pipeline file or dict (None with resume=True: the pipeline.json inside `out`)."""
    controls = controls or Controls()
    out = Path(out)
    if resume:
        stages = _stages_to_resume(source, out)
    else:
        stages = yield from _start_folder(source, out)
    old = {s.get("name"): s for s in read_state(out).get("stages", []) if isinstance(s, dict)} if resume else {}
    status = [{"name": s.name, "run_dir": str(stage_dir(out, i, s)), "status": old.get(s.name, {}).get("status",
               "pending"), "step": old.get(s.name, {}).get("step", 0)} for i, s in enumerate(stages)]
    n = len(stages)
    for i, stage in enumerate(stages):
        if status[i]["status"] in DONE and run_folder.latest_checkpoint(stage_dir(out, i, stage)) is not None:
            yield Log("info", f"pipeline stage {i + 1}/{n} '{stage.name}': already {status[i]['status']}, skipped")
            continue
        yield Progress("pipeline", i, n, "stages", stage.name)
        finished = yield from _run_stage(_StageRun(out, stages, i, status), controls, interactive)
        reason = finished.reason if finished is not None else "failed"
        status[i]["status"] = reason
        status[i]["step"] = finished.step if finished is not None else status[i]["step"]
        write_state(out, status, i)
        message = finished.message if finished is not None else "no result"
        yield Log("info" if reason in DONE else "warning",
                  f"pipeline stage {i + 1}/{n} '{stage.name}' {reason}: {message}")
        if reason not in DONE:
            yield Finished(reason, step=i, message=f"pipeline {reason} in stage {i + 1}/{n} '{stage.name}': {message}; "
                           f"resume with: train --resume {out}", result=_result(out, status))
            return
    yield Progress("pipeline", n, n, "stages", "done")
    yield Finished("completed", step=n, message=f"pipeline of {n} stage(s) completed", result=_result(out, status))


def _stages_to_resume(source: str | Path | dict[str, Any] | None, out: Path) -> list[Stage]:
    """The stages `out` was started with; a `source` given again must be the same pipeline."""
    if not is_pipeline_dir(out):
        raise UserError(f"{out} is not a pipeline folder (no {PIPELINE_FILE}): nothing to resume")
    stages = load_pipeline(out / PIPELINE_FILE)
    if source is not None:
        given, _notes = fit_pipeline_stages(load_pipeline(source))
        if [(s.name, s.config) for s in given] != [(s.name, s.config) for s in stages]:
            raise UserError(f"the pipeline differs from the one {out} was started with; resume without changing "
                            f"it (or start a new folder). Started with: {out / PIPELINE_FILE}")
    return stages


def _start_folder(source: str | Path | dict[str, Any] | None, out: Path) -> Iterator[Event]:
    """A new pipeline folder holding the stages as they will run (pretraining stages fitted to their datasets, a
    note each); returns the stages."""
    if source is None:
        raise UserError("no pipeline given")
    stages, notes = fit_pipeline_stages(load_pipeline(source))
    if out.exists() and any(out.iterdir()):
        if is_pipeline_dir(out):
            raise UserError(f"{out} already holds a pipeline: resume it (train --resume {out}) or choose a new "
                            "output folder")
        raise UserError(f"{out} is not empty: choose a new output folder for the pipeline")
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_pipeline(out, stages)
    except OSError as exc:
        raise UserError(f"cannot write the pipeline folder {out}: {exc.strerror or exc}") from None
    for note in notes:
        yield Log("info", note)
    return stages


@dataclass
class _StageRun:
    """Stage `index` of a pipeline in `out`, and every stage's status (written to pipeline_state.json)."""

    out: Path
    stages: list[Stage]
    index: int
    status: list[dict[str, Any]]


def _stage_config(run: _StageRun) -> tuple[PreparedRun, bool]:
    """The stage's run, and whether it is the one it started with (a stage with a checkpoint and its run.json
    continues exactly as it began). A new stage is a request like any new run: the method's defaults where the
    stage gives none (its learning rate), its files checked, its model fitted, preflight once."""
    i, stage = run.index, run.stages[run.index]
    run_dir = stage_dir(run.out, i, stage)
    if run_folder.list_committed(run_dir) and (run_dir / run_folder.RUN_FILE).is_file():
        return PreparedRun(RunConfig.load(run_dir / run_folder.RUN_FILE)), True
    data = dict(stage.config)
    if stage.follows_previous:
        data["base_model"] = str(stage_dir(run.out, i - 1, run.stages[i - 1]))
    prepared = prepare_run(request_of_fields(data))
    errors = [f.message for f in prepared.findings if f.level == ERROR]
    if errors:
        raise UserError("this stage cannot work on this machine: " + " ".join(errors))
    return prepared, False


def _run_stage(run: _StageRun, controls: Controls, interactive: bool) -> Iterator[Event]:
    """Train one stage, yielding its events (its own Finished kept back); returns that Finished (None: none came)."""
    i, stage, n, status = run.index, run.stages[run.index], len(run.stages), run.status
    run_dir = stage_dir(run.out, i, stage)
    try:
        prepared, recorded = _stage_config(run)
    except UserError as exc:
        status[i]["status"] = "failed"
        write_state(run.out, status, i)
        raise UserError(f"pipeline stage {i + 1}/{n} '{stage.name}': {exc}") from None
    config = prepared.config
    has_checkpoint = bool(run_folder.list_committed(run_dir))
    adapter = config.adapter_spec().kind
    yield Log("info", f"pipeline stage {i + 1}/{n} '{stage.name}' ({config.objective}"
              f"{', ' + adapter if adapter != 'none' else ''}): {'resuming' if recorded else 'starting'} in "
              f"{run_dir}" + (f", base {config.base_model}" if config.base_model else ""))
    status[i]["status"] = "running"
    write_state(run.out, status, i)
    yield StageStarted(i, stage.name, str(run_dir), method_of(config).key)
    for note in prepared.notes:
        yield Log("info", f"model: {note}")
    for finding in prepared.findings:
        yield Log(finding.level, f"check before start: {finding.message}")
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
        write_state(run.out, status, i)
        raise UserError(f"pipeline stage {i + 1}/{n} '{stage.name}': {exc}") from None
    return finished


def _result(out: Path, status: list[dict[str, Any]]) -> dict[str, Any]:
    done = [s for s in status if s["status"] in DONE]
    return {"pipeline_dir": str(out), "stages": status, "run_dir": done[-1]["run_dir"] if done else ""}
