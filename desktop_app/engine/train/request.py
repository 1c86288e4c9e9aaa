"""One way to start a run: what a person asked for, in any front end's words, becomes the run config the engine trains.

The window, the CLI and the server each translate their own inputs (widgets, flags, JSON bodies with workspace names)
into a `RunRequest`; everything after that is decided here, once: the model (a preset, a spec or a base), the method's
default learning rate, paths made absolute, the model fitted to its dataset's tokenizer and windows, and the checks
(`preflight_request`: what would not work on this machine, engine/train/preflight.py).
engine/session.py opens and runs what this plans (the one door every front end uses); `prepare_sample` prepares the
bundled sample corpus there when no dataset was chosen. Pipelines fit their pretraining stages here too
(`fit_pipeline_stages`) and plan each stage as a request (`request_of_fields`).

No torch at import: the window builds requests before the engine is loaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, DatasetReady, Event, Finished
from desktop_app.engine.methods import default_lr
from desktop_app.engine.model.hub_cache import resolve_model_reference
from desktop_app.engine.presets import preset
from desktop_app.engine.specs import DataSpec, ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.train.memory_plan import Machine, base_parameters, this_machine
from desktop_app.engine.train.preflight import Finding, preflight

if TYPE_CHECKING:
    from desktop_app.engine.pipeline_folder import Stage

DEFAULT_SEED = 1337


@dataclass
class SampleCorpus:
    """Text files to prepare into a new dataset before the run starts (the window's first launch, no dataset)."""

    files: list[str]
    dataset_dir: str
    data_spec: DataSpec


@dataclass
class RunRequest:
    """A run as a front end asks for it. Either `config` (a whole run.json; `train` and `seed` then override it) or
    the fields: a model from `preset`, `model` (a spec) or `base_model`, trained by `objective` on `dataset`
    (pretraining) or `data` (fine-tuning files)."""

    objective: str = "causal_lm"
    dataset: str = ""
    preset: str = ""
    model: dict[str, Any] = field(default_factory=dict)
    base_model: str = ""
    data: list[str] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)  # role -> column of table data files; {} = guessed
    adapter: dict[str, Any] = field(default_factory=dict)
    method_options: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    distributed: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    config: dict[str, Any] | None = None
    config_folder: str = ""  # where a run.json's relative paths are looked up (the file's folder)
    sample: SampleCorpus | None = None


@dataclass
class PreparedRun:
    """The run config the engine will train, one note per thing it adapted (shown to the person), and what preflight
    found in it on this machine (warnings and errors: the front end decides whether an error stops it)."""

    config: RunConfig
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def request_of_fields(fields: dict[str, Any]) -> RunRequest:
    """The request a run config's fields describe (a pipeline stage, an API body): what is given is kept, what is
    not is decided as for any new run (the method's learning rate, the seed); the fields recorded when a run starts
    (the base's checksum, the format version) are left to it."""
    given = {k: v for k, v in fields.items() if k not in ("base_model_sha256", "format_version")}
    unknown = sorted(set(given) - {f.name for f in dataclasses.fields(RunRequest)} - {"config", "config_folder",
                                                                                        "sample"})
    if unknown or any(k in given for k in ("config", "config_folder", "sample", "preset")):
        raise UserError(f"unknown run config field(s): {', '.join(unknown or ['preset'])}")
    return RunRequest(**given)


def make_run_config(**fields: Any) -> tuple[RunConfig, list[str]]:
    """A RunConfig from the fields this engine knows; the names it does not know are returned (an engine that lacks
    a method's fields refuses to start it by name instead of failing on a TypeError)."""
    known = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(k for k, v in fields.items() if k not in known and v not in ("", [], {}, None))
    return RunConfig(**{k: v for k, v in fields.items() if k in known}), unknown


# --- the request to a config -------------------------------------------------------------------------------------

def plan_run(request: RunRequest) -> RunConfig:
    """The run config a request describes, before it is fitted to its dataset (which may not be prepared yet)."""
    if request.config is not None:
        return _from_run_json(request)
    sources = [name for name, given in (("preset", request.preset), ("model", request.model),
                                        ("base_model", request.base_model)) if given]
    if len(sources) > 1:
        raise UserError(f"give one model to train, not {' and '.join(sources)}: a preset, a model spec or a base model")
    model: dict[str, Any] = {}
    if request.preset:

        model = preset(request.preset).to_dict()
    elif request.model:
        model = ModelSpec.from_dict(request.model).to_dict()
    config, _unknown = make_run_config(
        model=model, base_model=_base_path(request.base_model), dataset=_absolute(request.dataset),
        objective=request.objective, data=[_absolute(d) for d in request.data], columns=dict(request.columns),
        adapter=dict(request.adapter),
        method_options=_absolute_options(request.method_options), train=_train_settings(request),
        distributed=dict(request.distributed), seed=DEFAULT_SEED if request.seed is None else request.seed)
    return config


def prepare_run(request: RunRequest, machine: Machine | None = None, *, records: int | None = None) -> PreparedRun:
    """The checked run config of a request whose files exist: a new model fitted to its dataset (a whole run.json is
    taken as it is), and what preflight finds in it on `machine` (this one by default; `records`: the fine-tuning
    data's record count where the front end has it)."""
    config = plan_run(request)
    check_files(config)
    notes: list[str] = []
    if request.config is None:
        config, notes = fit_to_dataset(config)
    if request.preset:
        notes = [f"preset {request.preset}: {n}" for n in notes]
    config = config.check()
    return PreparedRun(config, notes, preflight(config, machine or this_machine(), records=records))


def preflight_request(request: RunRequest, machine: Machine | None = None, *, records: int | None = None
                      ) -> list[Finding]:
    """What would not work in a request's run on `machine` (this one by default), before anything starts: the run
    planned and fitted to its dataset as it will start (a dataset not prepared yet: as planned), then preflight.
    `records`: the fine-tuning data's record count where the front end has it. UserError for a request that cannot
    even be planned."""
    config = plan_run(request)
    with contextlib.suppress(UserError, OSError, ValueError, KeyError):  # the run's own checks name those
        config, _notes = fit_to_dataset(config)
    return preflight(config, machine or this_machine(), records=records)


def check_files(config: RunConfig) -> None:
    """Refuse a run whose data or reward file is missing, or whose column mapping does not fit its tables, by its
    name (before any model is loaded)."""
    missing = [d for d in config.data if not Path(d).expanduser().exists()]
    if missing:
        raise UserError(f"data file {missing[0]} does not exist")
    options = config.method_options if isinstance(config.method_options, dict) else {}
    reward = options.get("reward_file")
    if isinstance(reward, str) and reward and not Path(reward).expanduser().is_file():
        raise UserError(f"reward file {Path(reward).expanduser()} does not exist")
    if config.columns and config.data:
        from desktop_app.engine.finetune.formats import check_table_columns  # lazy: start-up

        val_data = options.get("val_data")
        check_table_columns([*config.data, *(val_data if isinstance(val_data, list) else [])], config.columns)


def fit_to_dataset(config: RunConfig) -> tuple[RunConfig, list[str]]:
    """A from-scratch model fitted to its dataset (vocabulary and context), with a note per change; any other run
    as it is."""
    if not (config.model and config.dataset):
        return config, []
    from desktop_app.engine.data.token_store import TokenStore  # lazy: start-up

    spec, notes = adapt_model_to_dataset(config.model_spec(), TokenStore(config.dataset))
    return config.replace(model=spec.to_dict()), notes


def adapt_model_to_dataset(spec: ModelSpec, store: Any) -> tuple[ModelSpec, list[str]]:
    """Fit a (preset) spec to a dataset's TokenStore: vocab_size = the tokenizer's rounded up to a multiple of 64
    (the rows past the tokenizer's are never a target; GPUs multiply such matrices far faster:
    model/architecture.padded_vocab), context_length = the dataset's. Returns the spec and one note per change."""
    from desktop_app.engine.model.architecture import VOCAB_MULTIPLE, padded_vocab  # lazy: start-up

    notes = []
    vocab = padded_vocab(store.vocab_size)
    if spec.vocab_size != vocab:
        padding = f", rounded up to a multiple of {VOCAB_MULTIPLE}" if vocab != store.vocab_size else ""
        notes.append(f"vocab_size set to {vocab} (the dataset's tokenizer has {store.vocab_size} tokens{padding}) "
                     f"instead of {spec.vocab_size}")
        spec = spec.replace(vocab_size=vocab)
    if spec.context_length != store.context_length:
        notes.append(f"context_length set to {store.context_length} (the dataset's windows) instead of "
                     f"{spec.context_length}")
        spec = spec.replace(context_length=store.context_length)
    return spec, notes


def config_from_preset(dataset: str | Path, preset_name: str, *, seed: int = DEFAULT_SEED,
                       **train_overrides: Any) -> tuple[RunConfig, list[str]]:
    """A RunConfig training preset `preset_name` on `dataset`, fitted to its tokenizer and context (recipes and
    benchmarks; front ends build a RunRequest)."""
    request = RunRequest(dataset=str(dataset), preset=preset_name, seed=seed,
                         train={k: v for k, v in train_overrides.items() if v is not None})
    prepared = prepare_run(request)
    return prepared.config, prepared.notes


def fit_pipeline_stages(stages: list[Stage]) -> tuple[list[Stage], list[str]]:
    """A pipeline's pretraining stages (a model spec and a dataset) fitted to their datasets' tokenizer and windows,
    as a single run is, with a note per change."""
    fitted, notes = [], []
    for stage in stages:
        config = stage.config
        if config.get("model") and config.get("dataset"):
            from desktop_app.engine.data.token_store import TokenStore  # lazy: start-up

            spec, fit = adapt_model_to_dataset(ModelSpec.from_dict(config["model"]), TokenStore(config["dataset"]))
            stage = dataclasses.replace(stage, config={**config, "model": spec.to_dict()})
            notes += [f"stage {stage.name}: model: {note}" for note in fit]
        fitted.append(stage)
    return fitted, notes


# --- running it ----------------------------------------------------------------------------------------------------

def prepare_sample(sample: SampleCorpus, controls: Controls) -> Iterator[Event]:
    """Prepare the sample corpus; returns the dataset folder, or None after yielding the Finished that ends the run."""
    from desktop_app.engine.data.prepare import prepare_dataset  # lazy: start-up

    done = None
    for event in prepare_dataset(sample.files, Path(sample.dataset_dir), sample.data_spec, controls=controls):
        if isinstance(event, Finished):
            done = event  # not the run's end: training follows
        else:
            yield event
    if done is None or done.reason != "completed":
        yield Finished(reason=done.reason if done else "failed",
                       message=(done.message if done else "") or "preparing the sample corpus did not finish")
        return None
    yield DatasetReady(sample.dataset_dir)
    return sample.dataset_dir


# --- the pieces -------------------------------------------------------------------------------------------------

def _train_settings(request: RunRequest) -> dict[str, Any]:
    """The TrainSpec of a request: the fields given, and the method's learning rate when none is."""

    train = {k: v for k, v in request.train.items() if v is not None}
    if "lr" not in train:
        size = base_parameters(request.base_model) if request.base_model else 0
        train["lr"] = default_lr(request.objective, str(request.adapter.get("kind") or "none"), size)
    return TrainSpec.from_dict(train).to_dict()


def _absolute(path: str) -> str:
    """An existing path made absolute (run.json must work from any directory); anything else as given, for the
    checks to name it."""
    p = Path(path).expanduser()
    return str(p.resolve()) if path and p.exists() else path


def _base_path(base: str) -> str:
    """A base model as run.json records it: an existing path made absolute; a Hub id pulled earlier (ORG/NAME or
    ORG/NAME:QUANT) as its folder or file in the Hugging Face cache; anything else as given, for the checks. A GGUF
    file keeps its name: a file of a Hub snapshot links to a blob named by its hash, and run.json should say which
    repository and quantization the run started from."""
    if not base:
        return base
    try:
        path = resolve_model_reference(base)
    except UserError:
        return base  # not in the cache: the run's checks say so, with the pull command
    return os.path.abspath(path) if path.is_file() else _absolute(str(path))


def _absolute_options(options: dict[str, Any]) -> dict[str, Any]:
    """Method options whose values are files (a reward file, validation data) with absolute paths: run.json must
    work from any directory."""
    out = dict(options)
    if isinstance(out.get("reward_file"), str):
        out["reward_file"] = _absolute(out["reward_file"])
    if isinstance(out.get("val_data"), list):
        out["val_data"] = [_absolute(d) for d in out["val_data"]]
    return out


def _from_run_json(request: RunRequest) -> RunConfig:
    """A whole run config: its relative paths taken from its file's folder when they do not exist from here, with
    the request's train settings and seed over it."""
    assert request.config is not None
    config = RunConfig.from_dict(request.config)
    folder = Path(request.config_folder) if request.config_folder else None
    if folder is not None:
        config = _relative_to(config, folder)
    overrides = {k: v for k, v in request.train.items() if v is not None}
    if overrides or request.seed is not None:
        config = config.replace(train={**config.train, **overrides},
                                seed=request.seed if request.seed is not None else config.seed)
    return config


def _relative_to(config: RunConfig, folder: Path) -> RunConfig:
    """A run config's relative dataset, base model and data paths, taken from the config file's folder when they do
    not exist from the current directory."""
    def fix(value: str) -> str:
        p = Path(value).expanduser()
        if p.is_absolute() or p.exists() or not (folder / p).exists():
            return value
        return str((folder / p).resolve())

    changes: dict[str, Any] = {}
    if config.dataset:
        changes["dataset"] = fix(config.dataset)
    if config.base_model:
        changes["base_model"] = fix(config.base_model)
    if config.data:
        changes["data"] = [fix(d) for d in config.data]
    if isinstance(config.method_options, dict) and isinstance(config.method_options.get("val_data"), list):
        changes["method_options"] = {**config.method_options,
                                     "val_data": [fix(d) for d in config.method_options["val_data"]]}
    return config.replace(**changes) if changes else config
