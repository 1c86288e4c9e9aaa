"""Load a model for generation or further training from any folder a user can point at.

Accepted: a run folder (its newest committed checkpoint that verifies), a checkpoint folder, our
Hugging Face export, or any local Hugging Face causal-LM folder. A LoRA/QLoRA run or adapter folder
(PEFT files) loads as its base with the adapter merged in memory. Safety rules:

- `trust_remote_code` is never enabled: a config that needs custom code is refused with a message.
- Weights come from safetensors. A folder with only pickle weights (.bin/.pt/.pth) is read with
  `torch.load(weights_only=True)`, which accepts plain tensors and refuses any other Python object
  (a pickle can run code on load); we call it ourselves rather than trusting a library default.
- Weights holding NaN/Inf are refused with a UserError naming the tensors (generation from them is
  garbage); `allow_nonfinite=True` loads them anyway and lists them in `LoadedModel.warnings`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import ModelSpec

KINDS = ("run", "checkpoint", "export", "hf")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth")


@dataclass
class LoadedModel:
    """A model ready to generate: the transformers model (eval mode), its fast tokenizer and where it came from."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    spec: ModelSpec | None  # None when the architecture has no ModelSpec equivalent
    kind: str  # run | checkpoint | export | hf
    path: Path  # the folder the weights were read from (for a run: its checkpoint)
    name: str  # a short label for pickers and logs
    warnings: list[str] = field(default_factory=list)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device


@dataclass
class ModelCandidate:
    """A folder in the workspace that `load_model` accepts (for the Generate tab's model picker)."""

    path: Path
    kind: str  # run | export | hf
    name: str


def resolve_model_folder(path: str | Path) -> tuple[Path, str, str]:
    """(folder holding config + weights, kind, display name) for a user-given path; UserError if unusable."""
    from desktop_app.engine import run_folder

    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"{p} does not exist")
    if not p.is_dir():
        raise UserError(f"{p} is a file; give the model folder (the one holding config.json)")
    if run_folder.is_run_folder(p):
        committed = run_folder.list_committed(p)
        found, problems = run_folder.find_resumable(p)
        if found is None:
            if committed:
                raise UserError(f"run {p} has no usable checkpoint: " + "; ".join(problems))
            raise UserError(f"run {p} has no committed checkpoint yet: train it until the first checkpoint "
                            "is saved, then load it")
        return found, "run", f"{p.name} (step {run_folder.step_of(found)})"
    if run_folder.is_checkpoint_folder(p):
        run_folder.verify_checkpoint(p)  # raises a UserError naming the damaged file
        parent = p.parent.parent.name if p.parent.name == "checkpoints" else ""
        return p, "checkpoint", f"{parent} {p.name}".strip()
    kind = "export" if (p / "model_spec.json").is_file() else "hf"
    return p, kind, p.name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _read_config(folder: Path) -> dict[str, Any]:
    file = folder / "config.json"
    if not file.is_file():
        raise UserError(f"{folder} has no config.json: not a model folder (expected a run, checkpoint, export "
                        "or Hugging Face model folder)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{file} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{file} must hold a JSON object")
    return data


def _check_no_remote_code(folder: Path, config: dict[str, Any]) -> None:
    from transformers import CONFIG_MAPPING

    model_type = config.get("model_type")
    if model_type in CONFIG_MAPPING:
        return
    if config.get("auto_map"):
        raise UserError(f"{folder} needs custom Python code shipped with the model (trust_remote_code), which "
                        "this app never runs for safety; use a model of an architecture transformers knows")
    raise UserError(f"{folder}: model type {model_type!r} is not known to the installed transformers")


def _weight_files(folder: Path) -> tuple[list[Path], list[Path]]:
    safetensors = sorted(folder.glob("*.safetensors"))
    pickles = sorted(p for p in folder.iterdir() if p.suffix in _PICKLE_SUFFIXES and p.is_file()
                     and not p.name.startswith(("optimizer", "training_args", "scheduler", "rng")))
    return safetensors, pickles


def load_pickle_state_dict(file: Path) -> dict[str, Any]:
    """A plain tensor state dict from a .bin/.pt file via torch.load(weights_only=True); anything else refused."""
    import pickle

    import torch

    try:
        state = torch.load(str(file), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"refused to load {file}: it is not a plain tensor file (safe loading rejected it: "
                        f"{first[:200]}). Pickle files can run code; convert the model to safetensors") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise UserError(f"{file} does not hold a state dict of named tensors")
    return state


def _load_from_pickles(folder: Path, files: list[Path], dtype: Any) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
    state: dict[str, Any] = {}
    for f in files:  # several files = shards of one state dict
        state.update(load_pickle_state_dict(f))
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=False, attn_implementation="sdpa",
                                             dtype=dtype or torch.float32)
    result = model.load_state_dict(state, strict=False)
    tied = set()
    if getattr(config, "tie_word_embeddings", False):
        out = model.get_output_embeddings()
        if out is not None:
            tied = {n for n, p in model.named_parameters(remove_duplicate=False) if p is out.weight}
            model.tie_weights()
    missing = [k for k in result.missing_keys if k not in tied and not k.endswith("lm_head.weight")]
    if missing:
        raise UserError(f"{folder}: the weights in {', '.join(f.name for f in files)} do not fit the config "
                        f"(missing {', '.join(missing[:4])}{'...' if len(missing) > 4 else ''})")
    return model


def _load_tokenizer(folder: Path) -> Any:
    from transformers import PreTrainedTokenizerFast

    from desktop_app.engine.data.tokenization import hf_tokenizer

    has_json = (folder / "tokenizer.json").is_file()
    if (folder / "tokenizer_config.json").is_file():
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
        except Exception as exc:
            if not has_json:
                raise UserError(f"{folder}: its tokenizer cannot be loaded ({_first_line(exc)})") from None
            tok = None
        if isinstance(tok, PreTrainedTokenizerFast):
            if tok.pad_token_id is None and tok.eos_token_id is not None:
                tok.pad_token = tok.eos_token
            return tok
    if has_json:
        return hf_tokenizer(folder)
    raise UserError(f"{folder} has no tokenizer (tokenizer.json); a model cannot generate text without the "
                    "tokenizer it was trained with")


def nonfinite_tensors(model: Any) -> list[str]:
    """Names of parameters holding NaN or Inf."""
    import torch

    return [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]


def _load_weights(folder: Path, safetensors: list[Path], pickles: list[Path], dtype: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    if safetensors:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(folder), trust_remote_code=False, local_files_only=True, use_safetensors=True,
                attn_implementation="sdpa", dtype=dtype or torch.float32)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise UserError(f"{folder}: the model cannot be loaded ({_first_line(exc)})") from None
    elif pickles:
        try:
            model = _load_from_pickles(folder, pickles, dtype)
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(f"{folder}: the model cannot be loaded ({_first_line(exc)})") from None
    else:
        raise UserError(f"{folder} has no weights (model.safetensors)")
    return model


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No "Loading weights" progress bar on stderr (the CLI prints one clear line per problem)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_model(path: str | Path, *, device: str = "auto", dtype: Any = None,
               allow_nonfinite: bool = False) -> LoadedModel:
    """Load a run (newest verified checkpoint), checkpoint, export or local HF causal-LM folder.

    device: auto|cpu|cuda|mps. dtype: a torch dtype (default float32). Raises UserError with a clear
    message for a missing folder, config, weights or tokenizer, custom-code models, unsafe pickles and
    (unless allow_nonfinite) NaN/Inf weights.
    """

    from desktop_app.engine.devices import resolve_device
    from desktop_app.engine.finetune.base_model import is_adapter_folder

    folder, kind, name = resolve_model_folder(path)
    if is_adapter_folder(folder):  # a LoRA/QLoRA run: its base with the adapter merged in memory
        return _load_adapter(folder, kind, name, resolve_device(device), dtype)
    config = _read_config(folder)
    _check_no_remote_code(folder, config)
    safetensors, pickles = _weight_files(folder)
    tokenizer = _load_tokenizer(folder)  # before the weights: a missing tokenizer fails fast
    with _quiet_transformers():
        model = _load_weights(folder, safetensors, pickles, dtype)
    model.to(resolve_device(device))
    model.eval()
    warnings: list[str] = []
    bad = nonfinite_tensors(model)
    if bad:
        message = (f"{folder}: the weights contain NaN or infinite values in {len(bad)} tensor(s) "
                   f"({', '.join(bad[:3])}{'...' if len(bad) > 3 else ''}); training probably diverged; "
                   "load an earlier checkpoint")
        if not allow_nonfinite:
            raise UserError(message)
        warnings.append(message)
    vocab = getattr(model.config, "vocab_size", None)
    if isinstance(vocab, int) and len(tokenizer) > vocab:
        warnings.append(f"the tokenizer has {len(tokenizer)} tokens but the model only {vocab}; prompts using "
                        "the extra tokens will be refused")
    return LoadedModel(model=model, tokenizer=tokenizer, spec=_spec_of(folder, model), kind=kind, path=folder,
                       name=name, warnings=warnings)


def _load_adapter(folder: Path, kind: str, name: str, device: Any, dtype: Any) -> LoadedModel:
    """An adapter folder (PEFT files, no config.json): its base (any kind this module loads) with the adapter
    merged in memory, which decodes as fast as a plain model; the base on disk is untouched."""
    from desktop_app.engine.finetune.base_model import load_merged

    with _quiet_transformers():
        model, tokenizer, info, _notes = load_merged(folder)
    if dtype is not None:
        model.to(dtype)
    model.to(device)
    model.eval()
    assert info.adapter_base is not None
    spec = None
    with contextlib.suppress(UserError):
        from desktop_app.engine.model.architecture import spec_from_hf_config

        spec = spec_from_hf_config(model.config)
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, kind=kind, path=folder,
                       name=f"{name} (adapter on {info.adapter_base.name})", warnings=[])


def _spec_of(folder: Path, model: Any) -> ModelSpec | None:
    from desktop_app.engine.model.architecture import spec_from_hf_config

    spec_file = folder / "model_spec.json"
    if spec_file.is_file():
        try:
            return ModelSpec.from_dict(json.loads(spec_file.read_text(encoding="utf-8")))
        except (UserError, OSError, ValueError, TypeError):
            pass
    try:
        return spec_from_hf_config(model.config)
    except UserError:
        return None


def list_generatable(workspace: Any) -> list[ModelCandidate]:
    """Folders of a workspace that `load_model` can open: runs with a committed checkpoint, exports and
    models/ folders with a config.json. Newest first within each kind (runs, then exports, then models).

    `workspace` is a Workspace or its root path. Cheap: no checksum is verified and no weights read.
    """
    from desktop_app.engine import run_folder
    from desktop_app.engine.workspace import Workspace

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    found: list[ModelCandidate] = []
    for run in ws.items("runs") if ws.folder("runs").is_dir() else []:
        if run.is_dir():
            latest = run_folder.latest_checkpoint(run, verify=False)
            if latest is not None:
                found.append(ModelCandidate(run, "run", f"{run.name} (step {run_folder.step_of(latest)})"))
    for kind_folder, kind in (("exports", "export"), ("models", "hf")):
        if not ws.folder(kind_folder).is_dir():
            continue
        for item in ws.items(kind_folder):
            if item.is_dir() and (item / "config.json").is_file():
                found.append(ModelCandidate(item, "export" if (item / "model_spec.json").is_file() else kind,
                                            item.name))
    return found
