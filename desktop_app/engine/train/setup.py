"""Run setup: everything the loop needs before its first step, each piece a short function the loop calls in order.

The run config (its canonical form and differences; request.py turns a request into one), the checkpoint a resume
continues from, the base model and its checksum, the run folder, and the model itself (fresh from a spec, or a base
with chat tokens and adapters), with its tokenizer writer and FLOPs per token.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from desktop_app.engine import run_folder
from desktop_app.engine.data.batches import BatchSource
from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Log
from desktop_app.engine.finetune.adapters import apply_adapter
from desktop_app.engine.finetune.base_model import load_base
from desktop_app.engine.finetune.chat_template import as_hf_tokenizer, ensure_chat_tokens
from desktop_app.engine.generate.prompts import context_length
from desktop_app.engine.method_options import method_options
from desktop_app.engine.model.architecture import build_model, spec_from_hf_config
from desktop_app.engine.model.folders import resolve_base as resolve
from desktop_app.engine.model.folders import weights_sha256
from desktop_app.engine.model.sizing import flops_per_token as spec_flops
from desktop_app.engine.objectives.base import Objective, TrainContext
from desktop_app.engine.run_folder import RUN_FILE, MetricsWriter
from desktop_app.engine.specs import AdapterSpec, DistributedSpec, ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.distributed import Wrapped
from desktop_app.engine.train.tracking import TrackedMetrics

if TYPE_CHECKING:
    from desktop_app.engine.model.folders import BaseModelInfo
    from desktop_app.engine.protocols import CausalLM, ChatTokenizer, TextTokenizer


# --- the run config --------------------------------------------------------------------------------------

def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Readable differences between two run configs, one line per changed leaf ("train.lr: 0.001 -> 0.002")."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<unset>"), new.get(key, "<unset>")
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            lines += config_diff(a, b, name + ".")
        elif a != b:
            lines.append(f"{name}: {json.dumps(a)} -> {json.dumps(b)}")
    return lines


def canonical_config(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Fill RunConfig/TrainSpec/ModelSpec/adapter/option defaults so {} and an explicit default compare equal
    (and a run.json written before a field existed matches one that has it at its default)."""
    out = dict(config_dict)
    with contextlib.suppress(Exception):
        out = RunConfig.from_dict(out).to_dict()
    with contextlib.suppress(Exception):
        out["train"] = TrainSpec.from_dict(out.get("train", {})).to_dict()
    if out.get("model"):
        with contextlib.suppress(Exception):
            out["model"] = ModelSpec.from_dict(out["model"]).to_dict()
    with contextlib.suppress(Exception):
        out["adapter"] = AdapterSpec.from_dict(out.get("adapter", {})).to_dict()
    with contextlib.suppress(Exception):
        out["distributed"] = DistributedSpec.from_dict(out.get("distributed", {})).to_dict()
    with contextlib.suppress(Exception):
        options = method_options(out.get("objective", "causal_lm"), out.get("method_options", {}))
        if options is not None:
            out["method_options"] = options.to_dict()
    return out


# --- where the run starts from -----------------------------------------------------------------------------

def resolve_base(config: RunConfig, resume: bool) -> tuple[RunConfig, BaseModelInfo]:
    """Resolve config.base_model to the folder holding its weights, checksum them, and record both in the config
    it returns. A base that changed since the config recorded it is refused."""

    try:
        info = resolve(config.base_model)
    except UserError as exc:
        if resume:
            raise UserError(f"cannot resume: the base model of this run cannot be used ({exc})") from None
        raise
    sha = weights_sha256(info)
    if config.base_model_sha256 and config.base_model_sha256 != sha:
        what = "cannot resume" if resume else "refusing to start"
        raise UserError(f"{what}: the base model {info.folder} has changed since this run was set up (its weights' "
                        f"checksum was {config.base_model_sha256[:12]}..., now {sha[:12]}...). Restore the original "
                        "base model, or start a new run on the new one")
    return config.replace(base_model=str(info.folder), base_model_sha256=sha), info


def check_same_base(recorded: dict[str, Any], config: RunConfig) -> None:
    """Resume: the checkpoint's base (path and checksum) must be the one the run now loads."""
    old_sha = recorded.get("base_model_sha256") or ""
    if old_sha and config.base_model_sha256 and old_sha != config.base_model_sha256:
        raise UserError(f"cannot resume: the base model {config.base_model} has changed since this run started (its "
                        f"weights' checksum was {old_sha[:12]}..., now {config.base_model_sha256[:12]}...). Restore "
                        "the original base model, or start a new run on the new one")


def choose_checkpoint(run_dir: Path, config: RunConfig, resume: bool, accept_config_change: bool
                      ) -> tuple[ckpt.LoadedCheckpoint | None, list[Event]]:
    """The checkpoint a run continues from (None: it starts at step 0), and notes on the way. Resuming takes the
    newest committed checkpoint that verifies; a config that differs from the checkpoint's is refused with a diff
    unless `accept_config_change` (the model itself may never change). A fresh run refuses a folder that holds
    checkpoints already."""
    pending: list[Event] = []
    loaded: ckpt.LoadedCheckpoint | None = None
    loaded: ckpt.LoadedCheckpoint | None = None
    if resume:
        path, problems = run_folder.find_resumable(run_dir)
        for p in problems:
            pending.append(Log("warning", f"{p}; falling back to an earlier checkpoint"))
        if path is None:
            if not (run_dir / RUN_FILE).exists():
                raise UserError(f"{run_dir} is not a training run (no {RUN_FILE}); nothing to resume")
            pending.append(Log("warning", "no complete checkpoint to resume from: starting this run from step 0"))
        else:
            loaded = ckpt.load_checkpoint(path, verify=False)  # verified just above
            check_same_base(loaded.run_config, config)
            diff = config_diff(canonical_config(loaded.run_config), canonical_config(config.to_dict()))
            # how many processes, DDP or FSDP, where the run is also tracked: free to change
            moved = [d for d in diff if d.startswith(("distributed.", "train.trackers:"))]
            if moved:
                pending.append(Log("info", "continuing with other distributed or tracking settings: "
                                   + "; ".join(moved)))
            diff = [d for d in diff if d not in moved]
            if diff:
                model_changed = [d for d in diff if d.startswith(("model.", "base_model", "objective", "adapter."))]
                if model_changed:
                    raise UserError("cannot resume: the model differs from the checkpoint's ("
                                    + "; ".join(model_changed) + "). Start a new run to train another model.")
                if not accept_config_change:
                    raise UserError("the run config differs from the one the checkpoint was trained with:\n  "
                                    + "\n  ".join(diff) + "\nresume with --accept-config-change to continue "
                                    "with the new settings")
                pending.append(Log("warning", "continuing with a changed config: " + "; ".join(diff)))
    elif run_folder.list_committed(run_dir):
        raise UserError(f"{run_dir} already holds checkpoints of a run: resume it (train --resume {run_dir}) "
                        "or choose a new output folder")

    return loaded, pending


def open_run_folder(run_dir: Path, config: RunConfig, loaded: ckpt.LoadedCheckpoint | None,
                    notes: list[Event]) -> MetricsWriter:
    """Write run.json, cut metrics.jsonl back to the checkpoint's offset (or start it afresh) and open it, with the
    run's trackers (TensorBoard, MLflow, W&B) behind it; where they are (or why not) is added to `notes`."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        ckpt.sweep_staging(run_dir)
        config.save(run_dir / RUN_FILE)
        keep = int(loaded.trainer_state.get("metrics_offset", 0)) if loaded is not None else None
        writer = TrackedMetrics(run_dir, config, keep_bytes=keep, resume_step=loaded.step if loaded else None)
        notes += writer.notes
        return writer
    except OSError as exc:
        raise UserError(f"cannot write the run folder {run_dir}: {exc.strerror or exc}; choose a folder you can "
                        "write to (with free space)") from None


def thread_warnings(requested: int, chosen: int, loaded: ckpt.LoadedCheckpoint | None) -> list[Event]:
    out: list[Event] = []
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows
        load = 0.0
    if requested == 0 and chosen > 1 and load > chosen:
        # Measured on 2 cores: 2 threads next to another busy process ran at 0.2-1.0x the speed of 1.
        out.append(Log("warning", f"the machine is busy (load {load:.1f} on {chosen} threads): if training is "
                       "slow, set threads to 1"))
    before = loaded.trainer_state.get("threads") if loaded is not None else None
    if before and before != chosen:
        out.append(Log("warning", f"this run was trained with {before} CPU thread(s) and continues with {chosen}: "
                       "results stay valid but are no longer bit-identical to an uninterrupted run"))
    return out


def check_optimizer_state(tensors: dict[str, torch.Tensor], kind: str) -> None:
    """A checkpoint's optimizer state must be of the optimizer that resumes it (8-bit AdamW keeps other tensors
    than AdamW; loading one into the other would fail later or train on garbage)."""
    eight_bit = any(".state1" in k or "__bnb_optimizer_quant_state__" in k for k in tensors)
    if eight_bit and kind == "adamw":
        raise UserError("cannot resume: the checkpoint holds 8-bit AdamW state but this run now uses AdamW (FSDP "
                        "trains with AdamW): resume it in one process or with distributed.strategy ddp")
    if not eight_bit and kind != "adamw" and any(k.endswith(".exp_avg") for k in tensors):
        raise UserError("cannot resume: the checkpoint holds AdamW state but this run now uses 8-bit AdamW: set "
                        "optimizer to adamw to continue it")


# --- the model -----------------------------------------------------------------------------------------------

@dataclass
class Parts:
    """What one train() call trains with, built by the loop's setup; the steps read it."""

    model: torch.nn.Module
    wrapped: Wrapped  # computes the objective's loss (through DDP/FSDP when several processes train)
    optimizer: torch.optim.Optimizer
    scaler: Any  # torch.amp.GradScaler, or None
    objective: Objective
    source: BatchSource
    ctx: TrainContext
    write_tokenizer: Callable[[Path], None] | None
    flops_per_token: float
    peak_flops: float  # measured matmul peak of this device (MFU's denominator; 0 when unknown)
    source_shards: bool = False  # the source returns only this process's rows
    fast: Any = None  # the TrainingModel of the chosen fast path (model/fast_path.py), which can fall back to eager



@dataclass
class Prepared:
    """The model a run trains and what goes with it (see prepare_model)."""

    model: Any
    model_spec: ModelSpec | None
    tokenizer: Any
    write_tokenizer: Callable[[Path], None] | None
    notes: list[str]
    adapter: bool = False  # LoRA/QLoRA adapters on a frozen base
    quantized: bool = False  # a 4-bit base (QLoRA)
    load_reference: Callable[[], Any] | None = None  # a second, frozen copy of the base (DPO, KL)


def prepare_model(config: RunConfig, base_info: BaseModelInfo | None, store: TokenStore | None, device: torch.device,
                  spec: TrainSpec) -> Prepared:
    """A fresh model from the spec, or the base model: for fine-tuning methods with its own (transformers)
    tokenizer, chat tokens ensured (embeddings grown when added) and LoRA/QLoRA adapters applied; for
    pretraining continued from a base, the dataset's tokenizer."""
    if base_info is None:
        assert store is not None  # validated: pretraining needs a dataset
        tokenizer = load_dataset_tokenizer(store)
        model, model_spec = build_from_spec(config, store, tokenizer)
        return Prepared(model, model_spec, tokenizer, store_tokenizer_writer(store), [])


    adapter = config.adapter_spec()
    base = load_base(base_info, device, quantize=adapter if adapter.kind == "qlora" else None)
    model = base.model
    params = sum(p.numel() for p in model.parameters())
    notes = [f"base model {base_info.name} ({base_info.model_type}, {params / 1e6:.2f}M parameters"
             f"{' as stored' if base.quantized else ''}) from {base_info.folder}", *base.notes]
    tokenizer, write_tokenizer, new_ids = _base_tokenizer(config, base, base_info, store, notes)
    model_spec = None
    with contextlib.suppress(Exception):

        model_spec = spec_from_hf_config(model.config)
    if adapter.kind != "none":

        model, adapter_notes = apply_adapter(model, adapter, seed=config.seed, new_token_ids=new_ids,
                                             quantized=base.quantized,
                                             gradient_checkpointing=spec.gradient_checkpointing)
        notes += adapter_notes
    return Prepared(model, model_spec, tokenizer, write_tokenizer, notes, adapter=adapter.kind != "none",
                    quantized=base.quantized, load_reference=_reference_loader(config, base_info, device))


def _base_tokenizer(config: RunConfig, base: Any, base_info: BaseModelInfo, store: TokenStore | None,
                    notes: list[str]) -> tuple[Any, Callable[[Path], None], list[int]]:
    """The tokenizer a run on a base model speaks, its writer, and the ids of chat tokens it added (notes appended):
    the base's own with chat tokens for fine-tuning, the base's own for RL rollouts, the dataset's for continued
    pretraining."""

    model = base.model
    if config.is_finetune:

        tokenizer = as_hf_tokenizer(base.tokenizer)
        before = len(tokenizer)
        notes += ensure_chat_tokens(tokenizer, model)
        return tokenizer, hf_tokenizer_writer(tokenizer, context_length(model)), list(range(before, len(tokenizer)))
    if config.is_rl and store is None:  # rollouts speak the base's own tokenizer (no chat tokens added)
        tokenizer = as_hf_tokenizer(base.tokenizer)
        return tokenizer, hf_tokenizer_writer(tokenizer, context_length(model)), []
    assert store is not None  # continued pretraining from a base: the dataset was prepared with its tokenizer
    vocab = int(getattr(model.config, "vocab_size", 0))
    if vocab < store.vocab_size:
        raise UserError(f"base model {base_info.folder} knows {vocab} tokens but the dataset's tokenizer has "
                        f"{store.vocab_size}: prepare the dataset with the base model's tokenizer")
    return load_dataset_tokenizer(store), store_tokenizer_writer(store), []


def _reference_loader(config: RunConfig, base_info: BaseModelInfo, device: torch.device) -> Callable[[], Any]:
    def load_reference() -> Any:
        """A second, frozen copy of the base prepared the same way (full-model DPO's reference)."""

        ref = load_base(base_info, device)
        if config.is_finetune:

            ensure_chat_tokens(as_hf_tokenizer(ref.tokenizer), ref.model)
        ref.model.eval().requires_grad_(False)
        return ref.model

    return load_reference


def load_dataset_tokenizer(store: TokenStore) -> Any:
    if not store.tokenizer_path.exists():
        return None
    try:
        from desktop_app.engine.data.tokenization import load_tokenizer  # lazy: tokenizers

        return load_tokenizer(store.tokenizer_path)
    except ImportError:  # pragma: no cover - tokenization.py is part of the app
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(store.tokenizer_path))


def special_ids(tokenizer: TextTokenizer) -> dict[str, int | None]:
    if tokenizer is None:
        return {}
    try:
        from desktop_app.engine.data.tokenization import special_tokens_of  # lazy: tokenizers

        names = special_tokens_of(tokenizer)
    except Exception:
        return {}
    ids = {}
    for role in ("pad", "bos", "eos"):
        name = names.get(role)
        ids[f"{role}_token_id"] = tokenizer.token_to_id(name) if name else None
    return ids


def build_from_spec(config: RunConfig, store: TokenStore, tokenizer: TextTokenizer
                    ) -> tuple[CausalLM, ModelSpec | None]:
    spec = config.model_spec()
    if spec.vocab_size < store.vocab_size:
        raise UserError(f"the model's vocab_size {spec.vocab_size} is smaller than the dataset tokenizer's "
                        f"{store.vocab_size} tokens: set vocab_size to {store.vocab_size}")
    if spec.context_length < store.context_length:
        raise UserError(f"the model's context_length {spec.context_length} is shorter than the dataset's windows "
                        f"of {store.context_length} tokens: set context_length to {store.context_length} or "
                        "prepare the dataset with a shorter context")

    return build_model(spec, seed=config.seed, **special_ids(tokenizer)), spec


def store_tokenizer_writer(store: TokenStore) -> Callable[[Path], None]:
    def write_tokenizer(folder: Path) -> None:
        # tokenizer.json + tokenizer_config.json (special tokens, chat template): the checkpoint is a
        # complete HF folder. A failure here fails the save loudly, like any other file of it.
        from desktop_app.engine.data.tokenization import hf_tokenizer  # lazy: tokenizers

        hf_tokenizer(store.tokenizer_path, model_max_length=store.context_length).save_pretrained(str(folder))

    return write_tokenizer


def hf_tokenizer_writer(tokenizer: ChatTokenizer, context_length: int | None) -> Callable[[Path], None]:
    def write_tokenizer(folder: Path) -> None:
        from desktop_app.engine.data.tokenization import save_hf_tokenizer  # lazy: tokenizers

        save_hf_tokenizer(tokenizer, folder, context_length)

    return write_tokenizer


def flops_per_token(model: CausalLM, spec: ModelSpec | None, *, adapter: bool = False) -> float:
    """Training FLOPs per token (the MFU numerator); a frozen base (adapters) has no weight gradients."""
    if spec is not None:

        full = float(spec_flops(spec))
    else:
        full = 6.0 * sum(p.numel() for p in model.parameters() if p.dtype.is_floating_point)
    return full * 2.0 / 3.0 if adapter else full  # forward 2N + input gradients 2N
