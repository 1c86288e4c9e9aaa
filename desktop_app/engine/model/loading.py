"""Read a model's weights and tokenizer, for generation, export or further training.

`load_model` opens anything model/folders.py resolves: a run (its newest committed checkpoint that
verifies), a checkpoint, a GGUF file (header checked first, then dequantized by transformers' GGUF loader,
tokenizer and chat template from its metadata), our Hugging Face export, or any local Hugging Face causal-LM
folder. A LoRA/QLoRA
run or adapter folder (PEFT files) loads as its base with the adapter merged in memory (`load_merged`).
Safety rules:

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
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.architecture import spec_from_hf_config
from desktop_app.engine.model.families import attention_of, folder_attention
from desktop_app.engine.model.folders import (
    BaseModelInfo,
    check_no_remote_code,
    is_adapter_folder,
    read_config,
    resolve_base,
    resolve_model_folder,
    weight_files,
    weights_sha256,
)
from desktop_app.engine.model.gguf_file import check_loadable, read_header
from desktop_app.engine.model.gguf_reading import parse_once
from desktop_app.engine.run_folder import read_json
from desktop_app.engine.specs import ModelSpec


@dataclass
class LoadedModel:
    """A model ready to generate: the transformers model (eval mode), its fast tokenizer and where it came from."""

    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    spec: ModelSpec | None  # None when the architecture has no ModelSpec equivalent
    kind: str  # run | checkpoint | gguf | export | hf
    path: Path  # the folder the weights were read from (for a run: its checkpoint; a GGUF: the file)
    name: str  # a short label for pickers and logs
    warnings: list[str] = field(default_factory=list)

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


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
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=False,
                                             attn_implementation=attention_of(config.model_type),
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


@contextlib.contextmanager
def _no_tqdm() -> Iterator[None]:
    """transformers' GGUF loader draws its own tqdm bar on stderr, which no logging switch turns off: give that
    module a tqdm that is disabled while it runs (the CLI prints one progress line of its own)."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def load_gguf_tokenizer(file: Path) -> Any:
    """The fast tokenizer (with its chat template) built from a GGUF file's metadata by transformers."""
    from transformers import AutoTokenizer


    check_loadable(read_header(file))  # never hand an unchecked file to the parsers
    try:
        with quiet_transformers(), _no_tqdm():
            tok = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True)
    except Exception as exc:  # the converters raise many kinds for tokenizers they do not know
        raise UserError(f"{file}: its tokenizer cannot be read ({_first_line(exc)})") from None
    if tok.pad_token_id is None and tok.eos_token_id is not None:
        tok.pad_token = tok.eos_token
    return tok


def load_gguf_weights(file: Path, dtype: Any = None) -> Any:
    """A plain (not quantized) causal LM from a GGUF file: dequantized by transformers, then moved into a fresh
    model built from the same config without its quantization_config, so it trains, merges and saves like any
    other (transformers refuses to save a model it loaded from GGUF)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM


    header = read_header(file)
    check_loadable(header)
    dtype = dtype or torch.float32
    try:
        with quiet_transformers(), _no_tqdm():
            config = AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True)
            if header.architecture == "gpt2":  # transformers' GGUF reader assumes GPT-2's own 1024 / 4 x width
                for key, attr in (("gpt2.context_length", "n_positions"), ("gpt2.feed_forward_length", "n_inner")):
                    if isinstance(header.metadata.get(key), int):
                        setattr(config, attr, header.metadata[key])
                # a GGUF records no dropout; like the llama families, fine-tune without it unless asked
                config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
            if header.architecture == "llama" and config.model_type != "llama":
                # transformers reads a llama file named "...mistral..." as mistral, then finds no tensor map for
                # it; llama.cpp runs it as llama, and so do we
                from transformers import LlamaConfig

                config = LlamaConfig(**{k: v for k, v in config.to_dict().items()
                                        if k not in ("model_type", "architectures", "sliding_window")})
            loaded = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=dtype,
                                                          config=config, local_files_only=True,
                                                          attn_implementation=attention_of(config.model_type))
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, NotImplementedError) as exc:
        raise UserError(f"{file}: the model cannot be loaded ({_first_line(exc)})") from None
    config = loaded.config
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attr):
            delattr(config, attr)
    config.name_or_path = str(file)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention_of(config.model_type))
    result = model.load_state_dict(loaded.state_dict(), strict=False)
    del loaded
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    missing = [k for k in result.missing_keys if not k.endswith("lm_head.weight")]
    if missing:
        raise UserError(f"{file}: the GGUF tensors do not fill the model (missing {', '.join(missing[:4])})")
    return model


def load_tokenizer(folder: Path) -> Any:
    """The fast tokenizer of a model folder (its tokenizer_config.json's, else its tokenizer.json wrapped) or of
    a GGUF file; pad falls back to eos. UserError when there is none."""
    from transformers import PreTrainedTokenizerFast

    from desktop_app.engine.data.tokenization import hf_tokenizer  # lazy: tokenizers

    if folder.is_file():
        return load_gguf_tokenizer(folder)
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


def load_weights(folder: Path, safetensors: list[Path], pickles: list[Path], dtype: Any) -> Any:
    """The causal LM of a folder from its safetensors, else its plain-tensor pickles (see weight_files)."""
    import torch
    from transformers import AutoModelForCausalLM

    if safetensors:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(folder), trust_remote_code=False, local_files_only=True, use_safetensors=True,
                attn_implementation=folder_attention(folder), dtype=dtype or torch.float32)
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
def quiet_transformers() -> Iterator[None]:
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
    """Load a run (newest verified checkpoint), checkpoint, GGUF file, export or local HF causal-LM folder.

    device: auto|cpu|cuda|mps. dtype: a torch dtype (default float32). Raises UserError with a clear
    message for a missing folder, config, weights or tokenizer, custom-code models, unsafe pickles and
    (unless allow_nonfinite) NaN/Inf weights.
    """

    from desktop_app.engine.devices import resolve_device  # lazy: torch

    folder, kind, name = resolve_model_folder(path)
    if is_adapter_folder(folder):  # a LoRA/QLoRA run: its base with the adapter merged in memory
        return _load_adapter(folder, kind, name, resolve_device(device), dtype)
    if kind == "gguf":
        with parse_once():  # tokenizer, config and weights from one parse of the file
            tokenizer = load_gguf_tokenizer(folder)
            model = load_gguf_weights(folder, dtype)
    else:
        config = read_config(folder)
        check_no_remote_code(folder, config)
        safetensors, pickles = weight_files(folder)
        tokenizer = load_tokenizer(folder)  # before the weights: a missing tokenizer fails fast
        with quiet_transformers():
            model = load_weights(folder, safetensors, pickles, dtype)
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
    with quiet_transformers():
        model, tokenizer, info, _notes = load_merged(folder)
    if dtype is not None:
        model.to(dtype)
    model.to(device)
    model.eval()
    assert info.adapter_base is not None
    spec = None
    with contextlib.suppress(UserError):

        spec = spec_from_hf_config(model.config)
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, kind=kind, path=folder,
                       name=f"{name} (adapter on {info.adapter_base.name})", warnings=[])


def _spec_of(folder: Path, model: Any) -> ModelSpec | None:
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


def load_full(info: BaseModelInfo) -> tuple[Any, Any, list[str]]:
    """fp32 model (adapters merged) and tokenizer of a base, on the CPU, and notes on what was done."""
    import torch

    notes: list[str] = []
    if info.adapter_base is not None:
        from peft import PeftModel

        model, _, inner_notes = load_full(info.adapter_base)
        notes += inner_notes
        tokenizer = load_tokenizer(info.folder)
        rows = int(model.get_input_embeddings().weight.shape[0])
        if len(tokenizer) > rows:  # the adapter's run added chat tokens; its saved embeddings fill the rows
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with quiet_transformers(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated transformers property
            model = PeftModel.from_pretrained(model, str(info.folder), is_trainable=False)
        model = model.merge_and_unload()
        notes.append(f"base {info.name}: the adapter was merged into its base {info.adapter_base.name} in memory")
        return model, tokenizer, notes
    if info.kind == "gguf":
        with parse_once():  # tokenizer, config and weights from one parse of the file
            tokenizer = load_gguf_tokenizer(info.folder)
            model = load_gguf_weights(info.folder, torch.float32)
    else:
        tokenizer = load_tokenizer(info.folder)
        safetensors, pickles = weight_files(info.folder)
        with quiet_transformers():
            model = load_weights(info.folder, safetensors, pickles, torch.float32)
    bad = nonfinite_tensors(model)
    if bad:
        raise UserError(f"base model {info.folder} has NaN or infinite weights in {len(bad)} tensor(s) "
                        f"({', '.join(bad[:3])}): it cannot be fine-tuned; choose an earlier checkpoint")
    return model, tokenizer, notes


def load_merged(path: str | Path) -> tuple[Any, Any, BaseModelInfo, list[str]]:
    """An adapter run/checkpoint/folder for inference or export: (its base with the adapter merged, in fp32 on
    the CPU; the adapter's tokenizer; what it is; notes). Refused when the base changed since training."""
    info = resolve_base(path)
    if info.adapter_base is None:
        raise UserError(f"{path} holds no adapter")
    recorded = read_json(info.folder / "run.json")
    sha = recorded.get("base_model_sha256") if isinstance(recorded, dict) else None
    if isinstance(sha, str) and sha and sha != weights_sha256(info.adapter_base):
        raise UserError(f"the base model {info.adapter_base.folder} of the adapter {info.folder} has changed since "
                        "the adapter was trained (its weights' checksum differs); the adapter only fits the base it "
                        "was trained on: restore that base model")
    model, tokenizer, notes = load_full(info)
    return model, tokenizer, info, notes
