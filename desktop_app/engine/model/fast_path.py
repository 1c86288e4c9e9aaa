"""Which kernels train a model on this device, and why: the fast path on GPUs, chosen from measurements.

On CUDA a training step through transformers' eager modules is dominated by small element-wise kernels (see
fast_forward.py), so the default there is a fast path: the fused forward (fast_forward.py) compiled by
torch.compile, or run with Liger Kernel's Triton kernels, with the output projection and the loss fused in chunks
(fused_loss.py) either way. Which one is fastest depends on the family and size, and the two do not stack (measured:
Liger + torch.compile ran slower than compile alone, and Liger's fused cross-entropy crashed under Dynamo), so the
choice is a table of measurements (`MEASURED`), overridable with TrainSpec.kernels:

    auto     the table's choice for the family and size (compile, except for short runs; see below)
    compile  torch.compile of the fused forward (of transformers' decoder for families without one)
    liger    the fused forward with Liger's RMSNorm, RoPE and SwiGLU kernels and its fused linear cross-entropy
    eager    transformers' own modules, with the chunked output projection + loss

Whatever is chosen is logged with its reason, like the device and precision choices (devices.py). When a compilation
or kernel fails, the loop falls back to eager and logs why (TrainingModel.fall_back). Compiled kernels are cached in
the workspace (`compile_cache_dir`), so a later run of the same shapes compiles in seconds.

The CPU keeps its own paths (fused_llama.py for a plain fp32 llama: ~75% of a CPU step is matmuls, and torch.compile
gave no gain there in 30-80 s of compiling); `compile: true` or `kernels: compile` compile there too when asked.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from desktop_app.engine.model.fast_forward import inner_model, unsupported_reason
from desktop_app.engine.model.fused_loss import liger_available
from desktop_app.engine.model.training_forward import EAGER, Kernels, TrainingModel

# A run shorter than this many steps does not pay back compilation (~20-60 s at 0.1-1B on an H100, seconds from a
# warm cache), so `auto` skips it. Measured: 47 s to compile the ~0.9B llama; steps of 0.05-0.5 s.
MIN_STEPS_TO_COMPILE = 100


@dataclass(frozen=True)
class Measurement:
    family: str
    up_to_params: float  # the row applies to models with at most this many parameters
    mode: str
    evidence: str


# Measured on one H100 (torch 2.11, CUDA 13, bf16 autocast, fused AdamW; medians of 15-25 synchronised steps), issue
# 21. The first three columns of that table were transformers' modules; the fused forward compiled is what the
# "compiled plain-PyTorch reference" column measured (a hand-written model of the same shape under torch.compile).
# tests/bench/bench_train_gpu.py measures every mode side by side: update a row when it shows another winner.
MEASURED = (
    Measurement("llama", 4e8, "compile",
                "H100, 110M llama at 16 x 1024: modules compiled 334-343k tok/s, with Liger's kernels 300k, eager "
                "197-204k; a compiled plain-PyTorch llama 394-419k"),
    Measurement("llama", float("inf"), "compile",
                "H100, ~0.9B llama at 4 x 2048: Liger's kernels 70.5k tok/s, modules compiled 68.7k, eager 51.5k; a "
                "compiled plain-PyTorch llama 81.1k (54.8% MFU)"),
    Measurement("gpt2", float("inf"), "compile",
                "H100, gpt2-small at 16 x 1024: modules compiled 256k tok/s, eager 132.6k; a compiled nanoGPT-style "
                "GPT 316k (344k with its vocabulary padded to 50304)"),
)


@dataclass(frozen=True)
class KernelChoice:
    """The kernels a run trains with (None: the device's own path, no TrainingModel) and why."""

    kernels: Kernels | None
    reason: str
    warning: bool = False

    @property
    def name(self) -> str:
        return self.kernels.mode if self.kernels is not None else "default"


def compile_unavailable(device: torch.device) -> str:
    """Why torch.compile cannot run here ("" when it can): Dynamo's platform support, and Triton on CUDA."""
    try:
        import torch._dynamo

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile is not supported on this platform"
    except Exception as exc:  # pragma: no cover - a broken install
        return f"torch.compile is unavailable ({exc})"
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "torch.compile needs Triton for CUDA, which is not installed"
    return ""


def _measured(family: str, params: int) -> Measurement | None:
    for row in MEASURED:
        if row.family == family and params <= row.up_to_params:
            return row
    return None


def _kernels(mode: str, fused_forward: bool, device: torch.device) -> Kernels:
    if mode == "compile":
        # The loss runs outside the compiled graph (Liger's cross-entropy crashed inside Dynamo), so Liger's fused
        # kernel serves it when installed; else the chunk kernel compiled on its own.
        loss = ("liger" if liger_available() else "compiled") if device.type == "cuda" else "chunked"
        return Kernels("compile", fused_forward, loss=loss, flex=fused_forward and device.type == "cuda")
    if mode == "liger":
        return Kernels("liger", True, loss="liger", flex=device.type == "cuda")
    return EAGER


def _describe(kernels: Kernels, family: str) -> str:
    forward = f"the fused {family} forward" if kernels.fused_forward else "transformers' modules"
    loss = {"compiled": "compiled chunked", "liger": "Liger's fused", "chunked": "chunked"}[kernels.loss]
    how = {"compile": f"torch.compile of {forward}", "eager": f"{forward} (eager)",
           "liger": f"{forward} with Liger's RMSNorm, RoPE and SwiGLU kernels"}[kernels.mode]
    packed = "; packed rows through FlexAttention" if kernels.flex else ""
    return f"{how}, {loss} output projection + loss (no full logits){packed}"


@dataclass(frozen=True)
class KernelRequest:
    """What a run asks of the kernels: `requested` is TrainSpec.kernels, `compile_flag` TrainSpec.compile (compile
    when kernels is auto), `steps` the run's length (short runs skip compiling); a 4-bit base (`quantized`) and FSDP
    keep their own kernels."""

    requested: str = "auto"
    compile_flag: bool = False
    steps: int = 0
    quantized: bool = False
    fsdp: bool = False


def choose_kernels(model: Any, device: torch.device, request: KernelRequest = KernelRequest()) -> KernelChoice:
    """The kernels to train `model` on `device` with, and why."""
    requested, compile_flag, steps = request.requested, request.compile_flag, request.steps
    quantized, fsdp = request.quantized, request.fsdp
    inner = inner_model(model)
    family = str(getattr(getattr(inner, "config", None), "model_type", "") or type(inner).__name__)
    params = sum(p.numel() for p in model.parameters())
    asked = requested if requested != "auto" else ("compile" if compile_flag else "auto")
    why_not_fused = unsupported_reason(model)
    if device.type != "cuda":
        if asked == "compile":
            why = compile_unavailable(device)
            if why:
                return KernelChoice(None, f"{why}: the {device.type} path runs uncompiled", warning=True)
            kernels = _kernels("compile", why_not_fused is None, device)
            return KernelChoice(kernels, f"{_describe(kernels, family)}, as configured (on the {device.type} "
                                "compilation rarely pays: expect a slow start)")
        if asked == "liger":
            return KernelChoice(None, f"Liger's kernels need a CUDA GPU: the {device.type} path runs instead",
                                warning=True)
        return KernelChoice(None, "the CPU's own path (the fused fp32 llama forward where it applies)"
                            if device.type == "cpu" else f"transformers' modules on {device.type}")
    if fsdp:
        return KernelChoice(None, "transformers' modules: FSDP gathers each module's weights inside its own forward, "
                            "which the fused forward and loss would bypass")
    if quantized:
        return KernelChoice(EAGER, f"{_describe(EAGER, family)}: a 4-bit base runs bitsandbytes' kernels inside "
                            "transformers' modules")
    notes: list[str] = []
    warning = False
    if asked == "auto":
        row = _measured(family, params)
        mode = row.mode if row is not None else "compile"
        basis = f"measured: {row.evidence}" if row is not None else \
            f"{family} was not measured; compiling gave 1.7-1.9x over eager on the families that were"
        if mode == "compile" and 0 < steps < MIN_STEPS_TO_COMPILE:
            mode = "liger" if liger_available() and why_not_fused is None else "eager"
            basis = f"a run of {steps} steps does not pay back compiling (~20-60 s); " + basis
    else:
        mode, basis = asked, "as configured"
    unavailable = compile_unavailable(device) if mode == "compile" else ""
    if unavailable:
        notes.append(unavailable)
        mode, warning = ("liger" if liger_available() and why_not_fused is None else "eager"), asked == "compile"
    if mode == "liger" and (not liger_available() or why_not_fused is not None):
        notes.append("Liger Kernel is not installed (pip install 'azr-model-trainer[gpu]')" if not liger_available()
                     else why_not_fused or "")
        mode, warning = "eager", warning or asked == "liger"
    if mode == "compile" and why_not_fused is not None:
        notes.append(f"no fused forward ({why_not_fused}): transformers' decoder is compiled")
    kernels = _kernels(mode, why_not_fused is None and mode != "eager", device)
    tail = "; ".join(n for n in notes if n)
    return KernelChoice(kernels, f"{_describe(kernels, family)} ({basis}{'; ' + tail if tail else ''})", warning)


def compile_cache_dir(run_dir: Path) -> Path:
    """Where compiled kernels are kept: the workspace's cache/torch-compile when the run lies in a workspace's runs/
    folder (or AZR_WORKSPACE is set), else a folder beside the run."""
    if run_dir.parent.name == "runs":
        return run_dir.parent.parent / "cache" / "torch-compile"
    if os.environ.get("AZR_WORKSPACE"):
        return Path(os.environ["AZR_WORKSPACE"]).expanduser() / "cache" / "torch-compile"
    return run_dir.parent / ".torch-compile-cache"


def use_compile_cache(folder: Path) -> str:
    """Point inductor's (and Triton's) on-disk caches at `folder` unless the user set their own; returns a note."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return f"compiled kernels cached in {os.environ['TORCHINDUCTOR_CACHE_DIR']} (TORCHINDUCTOR_CACHE_DIR)"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"compiled kernels are not cached across runs ({folder}: {exc.strerror or exc})"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    os.environ.setdefault("TRITON_CACHE_DIR", str(folder / "triton"))
    try:  # on by default in recent torch; named explicitly where the setting exists
        from torch._inductor import config as inductor_config

        for name in ("fx_graph_cache", "autotune_local_cache"):
            if hasattr(inductor_config, name):
                setattr(inductor_config, name, True)
    except Exception:  # pragma: no cover - inductor missing
        pass
    return f"compiled kernels cached in {folder}: later runs of the same shapes start in seconds"


def prepare(model: Any, choice: KernelChoice, run_dir: Path) -> tuple[Any, list[str]]:
    """The model the objectives' losses get (a TrainingModel, or the model itself) and notes to log."""
    if choice.kernels is None:
        return model, []
    notes = []
    if choice.kernels.mode == "compile":
        notes.append(use_compile_cache(compile_cache_dir(run_dir)))
    return TrainingModel(model, choice.kernels), notes
