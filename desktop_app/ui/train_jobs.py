"""What the Train tab runs in the background runner's worker thread: generators of the engine's typed events.

No Qt here. Each job only chains engine generators (and fits a new model to its dataset, as the CLI's --preset
does); the tab shows what they yield through its run display.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.events import Controls, DatasetReady, Event, Finished, Log, Progress
from desktop_app.engine.specs import DataSpec, ModelSpec, RunConfig


def train_job(config: RunConfig, run_dir: Path, controls: Controls, resume: bool,
              sample_paths: list[str] | None = None, dataset_dir: Path | None = None,
              data_spec: DataSpec | None = None) -> Iterator[Event]:
    """One run: train() (its RunFolder first, then a resumed run's History). With `sample_paths`, the sample corpus
    is prepared into `dataset_dir` first (the first-launch path): its Progress and Log, then DatasetReady."""
    if sample_paths and dataset_dir is not None and data_spec is not None:
        from desktop_app.engine.data.prepare import prepare_dataset

        done = None
        for event in prepare_dataset(sample_paths, dataset_dir, data_spec, controls=controls):
            if isinstance(event, Finished):
                done = event  # not the run's end: training follows
            else:
                yield event
        if done is None or done.reason != "completed":
            yield Finished(reason=done.reason if done else "failed",
                           message=(done.message if done else "") or "preparing the sample corpus did not finish")
            return
        config = config.replace(dataset=str(dataset_dir))
        yield DatasetReady(str(dataset_dir))
    from desktop_app.engine.train.loop import train
    from desktop_app.engine.train.setup import adapt_model_to_dataset

    if config.model and not resume:
        # Fit vocab/context to the dataset's tokenizer and windows (and say so), as the CLI's --preset does.
        from desktop_app.engine.data.token_store import TokenStore

        spec, notes = adapt_model_to_dataset(config.model_spec(), TokenStore(config.dataset))
        for note in notes:
            yield Log("info", f"model: {note}")
        config = config.replace(model=spec.to_dict())
    run_dir.mkdir(parents=True, exist_ok=True)
    # interactive: the thread policy leaves a core to the window so the GUI stays responsive.
    yield from train(config, run_dir, controls, resume=resume, interactive=True)


def demo_job(out: Path, controls: Controls, minutes: float,
             train_overrides: dict[str, Any] | None = None) -> Iterator[Event]:
    """The self-play CPU demo (seed corpus -> pretraining -> self-play). Each phase is a run of its own whose
    RunFolder event (with its method: pretraining, self-play) starts fresh curves; `train_overrides`: TrainSpec
    fields both of its runs take (e.g. a time_budget_s), passed to the recipe as they are."""
    from desktop_app.engine.recipes.selfplay_demo import run_demo

    options = {"train_overrides": dict(train_overrides)} if train_overrides else {}
    yield from run_demo(out, minutes=minutes, controls=controls, **options)


def fit_pretraining_stages(source: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Pretraining stages' model specs fitted to their datasets' tokenizer and windows, as a single run's are."""
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.train.setup import adapt_model_to_dataset

    stages, notes = [], []
    for stage in source.get("stages", []):
        config = stage.get("config") if isinstance(stage, dict) else None
        if isinstance(config, dict) and config.get("model") and config.get("dataset"):
            spec, fit = adapt_model_to_dataset(ModelSpec.from_dict(config["model"]), TokenStore(config["dataset"]))
            stage = {**stage, "config": {**config, "model": spec.to_dict()}}
            notes += [f"stage {stage.get('name')}: model: {note}" for note in fit]
        stages.append(stage)
    return {**source, "stages": stages}, notes


def pipeline_job(source: dict[str, Any] | None, out: Path, controls: Controls, resume: bool) -> Iterator[Event]:
    """A pipeline (source None: resume the one in `out`): each stage's StageStarted, then its run's events."""
    from desktop_app.engine.recipes.pipeline import run_pipeline

    if source is not None and not resume:
        source, notes = fit_pretraining_stages(source)
        for note in notes:
            yield Log("info", note)
    for event in run_pipeline(source, out, controls, resume=resume, interactive=True):
        if isinstance(event, Progress) and event.stage == "pipeline":
            continue  # stages done / all: the display follows StageStarted instead
        yield event
