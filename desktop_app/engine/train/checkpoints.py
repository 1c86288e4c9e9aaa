"""Atomic checkpoints: save, load, retention (listing and verification: run_folder.py, torch-free).

A committed checkpoint is RUN_DIR/checkpoints/step-XXXXXXXX/ holding
    config.json, generation_config.json, model.safetensors, tokenizer.json (+ tokenizer_config.json)
    model_spec.json         -> a loadable Hugging Face folder
      (a LoRA/QLoRA run holds adapter_config.json + adapter_model.safetensors instead of config.json +
      model.safetensors: PEFT's own format, loadable with PeftModel.from_pretrained(base, folder))
    optimizer.safetensors   AdamW state tensors (exp_avg, exp_avg_sq, step), bit-exact, no pickle
    optimizer.json          param groups and non-tensor optimizer values
    rng.safetensors         torch CPU (and CUDA) generator states
    trainer_state.json      step, schedule scale, grad-scaler, data position, metrics offset, RNG of
                            python/numpy, best val loss, counters
    run.json                the run config the state belongs to
    manifest.json           sha256 + size of every file above, written LAST: the commit marker

How a save stays atomic: everything is staged in checkpoints/.tmp-step-N-<random>/, each file is
fsynced, the manifest is written and fsynced last, the folder is renamed to step-XXXXXXXX and the
parent fsynced. A crash at any moment leaves either no new checkpoint or a complete one; staging
folders are ignored and swept. Resume only considers folders whose manifest verifies.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from desktop_app.engine import os_faults
from desktop_app.engine.fileio import fsync_dir
from desktop_app.engine.finetune.adapters import adapter_state, load_adapter_state, save_adapter
from desktop_app.engine.run_folder import (
    ADAPTER_WEIGHTS,
    CHECKPOINT_FORMAT_VERSION,
    MANIFEST,
    CheckpointError,
    checkpoint_name,
    checkpoints_dir,
    list_committed,
    sha256_file,
    step_of,
    verify_checkpoint,
)

# Test hook: seconds to sleep inside a save, after the weights are staged and before the manifest
# (the window a kill -9 test must be able to hit). Also settable in-process via `save_pause_hook`.
PAUSE_ENV = "AZR_TEST_SAVE_PAUSE_S"
save_pause_hook: Callable[[Path], None] | None = None


@dataclass
class CheckpointPayload:
    """Everything one checkpoint holds, as plain objects (the loop builds it; this module writes it)."""

    step: int
    model: torch.nn.Module
    optimizer_tensors: dict[str, torch.Tensor]
    optimizer_meta: dict[str, Any]
    trainer_state: dict[str, Any]
    run_config: dict[str, Any]
    model_spec: dict[str, Any] | None = None
    rng_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # Writes the tokenizer files into a folder (e.g. hf_tokenizer(...).save_pretrained, or a copy).
    write_tokenizer: Callable[[Path], None] | None = None
    # The model's whole state when `model` itself holds only a shard of it (FSDP: gathered on process 0).
    model_state: dict[str, torch.Tensor] | None = None


# --- writing ------------------------------------------------------------------------------------------

def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    save_file(tensors, str(path), metadata=metadata)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, allow_nan=True) + "\n", encoding="utf-8")


def model_state_for_saving(model: torch.nn.Module, state: dict[str, torch.Tensor] | None = None
                           ) -> dict[str, torch.Tensor]:
    """HF state-dict names, tied duplicates dropped (the first name of shared storage is kept, which is
    the input embedding for tied LM heads, as `from_pretrained` expects). `state`: the whole state of a sharded
    `model` (FSDP), whose tensors are separate copies: which names are tied is read off the model itself."""
    out: dict[str, torch.Tensor] = {}
    seen: set[Any] = set()
    for name, tensor in model.state_dict().items():
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # an FSDP shard (DTensor)
        key = (id(tensor), local.untyped_storage().data_ptr(), local.storage_offset(), tuple(tensor.shape))
        if key in seen or (key[1:] in seen and local.numel()):
            continue
        seen.update((key, key[1:]))
        source = tensor if state is None else state[name]
        out[name] = source.detach().to("cpu").contiguous()
    return out


def _is_adapter_model(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _unique_tensors(model: torch.nn.Module) -> dict[Any, torch.Tensor]:
    out: dict[Any, torch.Tensor] = {}
    for tensor in model.state_dict().values():
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        out.setdefault((local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape)), local)
    return out


def estimate_checkpoint_bytes(payload: CheckpointPayload) -> int:
    """About how many bytes the checkpoint takes on disk (weights, optimizer state, a generous rest)."""
    if _is_adapter_model(payload.model):

        state = adapter_state(payload.model, payload.model_state)
    else:  # the tensors' sizes, without copying them off a GPU (shared storage counted once)
        state = payload.model_state if payload.model_state is not None else \
            {str(k): v for k, v in _unique_tensors(payload.model).items()}
    model_bytes = sum(t.numel() * t.element_size() for t in state.values())
    opt_bytes = sum(t.numel() * t.element_size() for t in payload.optimizer_tensors.values())
    return model_bytes + opt_bytes + (4 << 20)  # + tokenizer, JSON, RNG (generous)


def save_checkpoint(run_dir: str | Path, payload: CheckpointPayload) -> Path:
    """Write a checkpoint atomically and return its committed folder.

    Raises CheckpointError (a UserError) with the path, the space needed and the space free when the
    disk is full or the folder is not writable; the staging folder is removed and every earlier
    checkpoint is untouched.
    """
    parent = checkpoints_dir(run_dir)
    final = parent / checkpoint_name(payload.step)
    staging = parent / f".tmp-{checkpoint_name(payload.step)}-{secrets.token_hex(4)}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        os_faults.check_free_space(parent, estimate_checkpoint_bytes(payload), f"the step {payload.step} checkpoint")
        staging.mkdir()
        _stage(staging, payload)
        if final.exists():  # same step saved again (e.g. save-now at a save step): replace atomically
            trash = parent / f".trash-{final.name}-{secrets.token_hex(4)}"
            os.replace(final, trash)
            os.replace(staging, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(staging, final)
        fsync_dir(parent)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        # safetensors reports a full disk as SafetensorError("... (os error 28)"): the OSError it is
        if isinstance(exc, OSError) or (isinstance(exc, Exception) and os_faults.fixable(exc)):
            raise save_error(parent, payload, exc) from exc
        raise
    return final


class SaveFault(CheckpointError):
    """A checkpoint the operating system refused for a reason the person can fix (a full disk, a read-only or
    forbidden folder). `fault` is os_faults' one line (a DiskFault); `folder` the checkpoints folder; `needed` and
    `free` in bytes (free -1 when unknown). The staging folder is gone and every earlier checkpoint untouched."""

    def __init__(self, message: str, fault: os_faults.DiskFault, folder: Path, needed: int, free: int) -> None:
        super().__init__(message)
        self.fault, self.folder, self.needed, self.free = fault, folder, needed, free


def save_error(parent: Path, payload: CheckpointPayload, exc: BaseException) -> CheckpointError:
    """The error a failed save raises: a SaveFault for a fault the person can fix, else a CheckpointError; both
    say the path, the space needed and free, and which earlier checkpoint is intact."""
    try:
        need = estimate_checkpoint_bytes(payload)
    except Exception:
        need = 0
    free = os_faults.free_bytes(parent)
    number = os_faults.os_errno(exc) or 0
    what = {errno.EACCES: "the folder is not writable", errno.EPERM: "the folder is not writable"}.get(number) or \
        os_faults.FIXABLE_ERRNOS.get(number) or getattr(exc, "strerror", None) or str(exc).splitlines()[0][:200]
    space = f"; a checkpoint needs about {_mb(need)}" if need else ""
    if free is not None:
        space += f", {_mb(free)} is free there"
    prev = list_committed(parent.parent) if parent.exists() else []
    kept = f"; the previous checkpoint {prev[-1]} is intact" if prev else "; no earlier checkpoint exists"
    message = f"could not save the step {payload.step} checkpoint in {parent}: {what}{space}{kept}"
    if not os_faults.fixable(exc):
        return CheckpointError(message)
    # a full disk: the folder that is full; else the file the OS names (a vanished dataset's tokenizer, say)
    where = parent if number in os_faults.SPACE_ERRNOS else (os_faults.fault_path(exc) or parent)
    fault = os_faults.fault_error(exc, doing=f"saving the step {payload.step} checkpoint", path=where, needed=need)
    return SaveFault(message, fault, parent, need, free if free is not None else -1)


def _mb(n: int | float) -> str:
    return f"{n / 1e6:.1f} MB"


def _stage(staging: Path, p: CheckpointPayload) -> None:
    # Weights first (the largest file), HF config next to them: the folder loads with from_pretrained.
    if _is_adapter_model(p.model):
        # Only the adapter (PEFT's files); no config.json, so transformers' own from_pretrained(folder) also
        # sees an adapter folder and loads its base from adapter_config.json.

        save_adapter(p.model, staging, state=p.model_state)
    else:
        _write_tensors(staging / "model.safetensors", model_state_for_saving(p.model, p.model_state),
                       {"format": "pt"})
        config = getattr(p.model, "config", None)
        if config is not None:
            config.save_pretrained(staging)
    gen = getattr(p.model, "generation_config", None)
    if gen is not None:
        with contextlib.suppress(Exception):  # optional file; a model without it still loads
            gen.save_pretrained(staging)
    if p.write_tokenizer is not None:
        p.write_tokenizer(staging)
    if p.model_spec is not None:
        _write_json(staging / "model_spec.json", p.model_spec)
    _write_tensors(staging / "optimizer.safetensors", p.optimizer_tensors or {"_empty": torch.zeros(0)})
    _write_json(staging / "optimizer.json", p.optimizer_meta)
    if p.rng_tensors:
        _write_tensors(staging / "rng.safetensors", p.rng_tensors)
    _write_json(staging / "trainer_state.json", p.trainer_state)
    _write_json(staging / "run.json", p.run_config)

    pause = os.environ.get(PAUSE_ENV)
    if pause:
        time.sleep(float(pause))
    if save_pause_hook is not None:
        save_pause_hook(staging)

    files: dict[str, dict[str, Any]] = {}
    for f in sorted(staging.iterdir()):
        if f.is_file():
            _fsync_file(f)
            files[f.name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
    manifest = {"format_version": CHECKPOINT_FORMAT_VERSION, "step": p.step, "created": time.time(), "files": files}
    _write_json(staging / MANIFEST, manifest)
    _fsync_file(staging / MANIFEST)
    fsync_dir(staging)


# --- reading ------------------------------------------------------------------------------------------

def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))  # verified files: an error here is a real one


@dataclass
class LoadedCheckpoint:
    path: Path
    step: int
    model_state: dict[str, torch.Tensor]
    optimizer_tensors: dict[str, torch.Tensor]
    optimizer_meta: dict[str, Any]
    rng_tensors: dict[str, torch.Tensor]
    trainer_state: dict[str, Any]
    run_config: dict[str, Any]
    model_spec: dict[str, Any] | None
    adapter: bool = False  # model_state holds a PEFT adapter's tensors (adapter_model.safetensors)


def load_checkpoint(path: str | Path, *, verify: bool = True) -> LoadedCheckpoint:
    """Read a checkpoint (no pickle: safetensors + JSON). Verifies checksums first unless told not to."""
    path = Path(path)
    if verify:
        verify_checkpoint(path)
    opt = load_file(str(path / "optimizer.safetensors"))
    opt.pop("_empty", None)
    rng_file = path / "rng.safetensors"
    spec_file = path / "model_spec.json"
    adapter = (path / ADAPTER_WEIGHTS).is_file() and not (path / "model.safetensors").is_file()
    return LoadedCheckpoint(
        path=path, step=step_of(path), adapter=adapter,
        model_state=load_file(str(path / (ADAPTER_WEIGHTS if adapter else "model.safetensors"))),
        optimizer_tensors=opt, optimizer_meta=_json(path / "optimizer.json"),
        rng_tensors=load_file(str(rng_file)) if rng_file.exists() else {},
        trainer_state=_json(path / "trainer_state.json"),
        run_config=_json(path / "run.json"),
        model_spec=_json(spec_file) if spec_file.exists() else None,
    )


def load_model_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load weights saved by `model_state_for_saving` (only tied duplicates may be absent), or a PEFT model's
    adapter tensors saved with it."""
    if _is_adapter_model(model):

        load_adapter_state(model, state)
        return
    if any(".lora_" in k for k in state):
        raise CheckpointError("the checkpoint holds a LoRA adapter but the model has none: was the run's adapter "
                              "setting changed?")
    result = model.load_state_dict(state, strict=False)
    full = model.state_dict()
    ptrs = {}
    for name, t in full.items():
        ptrs.setdefault((t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape)), []).append(name)
    tied = {n for names in ptrs.values() if len(names) > 1 for n in names[1:]}
    missing = [k for k in result.missing_keys if k not in tied]
    if missing or result.unexpected_keys:
        raise CheckpointError(f"the checkpoint weights do not fit this model: missing {missing[:5]}, "
                              f"unexpected {list(result.unexpected_keys)[:5]}")


# --- housekeeping -------------------------------------------------------------------------------------

def sweep_staging(run_dir: str | Path) -> list[Path]:
    """Remove staging/trash folders left by a crash (never a committed checkpoint)."""
    parent = checkpoints_dir(run_dir)
    removed = []
    if parent.is_dir():
        for p in parent.iterdir():
            if p.is_dir() and (p.name.startswith(".tmp-") or p.name.startswith(".trash-")):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def apply_retention(run_dir: str | Path, keep_last: int, keep_steps: set[int] | None = None) -> list[Path]:
    """Delete committed checkpoints beyond the newest `keep_last`, except steps in `keep_steps` (the best).

    Each is first renamed to a hidden trash name (atomic), so a crash mid-delete never leaves a
    half-deleted folder that looks committed.
    """
    keep_steps = keep_steps or set()
    committed = list_committed(run_dir)
    doomed = [p for p in committed[:-keep_last] if step_of(p) not in keep_steps] if keep_last > 0 else []
    removed = []
    for p in doomed:
        trash = p.with_name(f".trash-{p.name}-{secrets.token_hex(4)}")
        try:
            os.replace(p, trash)
        except OSError:
            continue
        shutil.rmtree(trash, ignore_errors=True)
        removed.append(p)
    if removed:
        fsync_dir(checkpoints_dir(run_dir))
    return removed
