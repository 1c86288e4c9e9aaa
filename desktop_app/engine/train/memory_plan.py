"""What a run needs in memory, one estimate wherever a figure is shown or a decision made: the Train tab's and the
CLI's preflight, the gate before a model is built (memory_faults.py), Get a model's verdicts (fit.py) and the settings
a base model opens with in the window (`fit_plan`: the largest micro-batch that fits, then gradient checkpointing).

A run is estimated as it will train: its model (a spec, or a base model's config.json), its micro-batch, the
precision it will compute in (`run_precision`: on a CPU, the engine's own choice once torch is loaded) and, for
fine-tuning, the length of its longest example in the base's tokens once data files are chosen
(example_lengths.py); before that, ASSUMED_EXAMPLE_TOKENS, said to be a guess. tests/engine/test_memory_estimate.py
trains runs and holds the estimate to their measured peak memory.

Stdlib only at import (no torch): the window runs this on every change of the form.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.model.families import attention_of
from desktop_app.engine.model.sizing import (
    TrainingShape,
    count_parameters,
    estimate_training_memory,
    spec_for_estimate,
)
from desktop_app.engine.specs import AdapterSpec, ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.train.example_lengths import longest_example

# sizing.estimate_memory is about +-40%: a run is refused only when even 40% less than its estimate is more than the
# machine has free, and is said to fit when its estimate takes at most FITS_SHARE of it (the system, the window and
# the allocator's slack need the rest).
ESTIMATE_LOW = 0.6
FITS_SHARE = 0.8
# Fine-tuning examples are as long as their text (batches are padded to their longest): before data files are chosen
# (or where they cannot be read) the activations are estimated at this many tokens (or the context, if shorter) and
# the estimate is said to be a guess.
ASSUMED_EXAMPLE_TOKENS = 1024


@dataclass(frozen=True)
class Machine:
    """The memory a run on this machine can use, in bytes (0 where unknown). `gpu_known` is False until torch has
    looked for a GPU (the window before the engine is loaded): the memory check waits for it where a GPU would
    train the run."""

    ram_free: int
    ram_total: int = 0
    gpu_free: int = 0
    gpu_total: int = 0
    gpu_name: str = ""
    gpu_known: bool = True


def ram_memory() -> tuple[int, int]:
    """(available, total) bytes of RAM: psutil where installed, else /proc/meminfo; (0, 0) when neither says."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except Exception:  # psutil missing or failing: the kernel's own figures
        pass
    try:
        values = {}
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            name, _, rest = line.partition(":")
            values[name] = int(rest.split()[0]) * 1024  # kB
        return values.get("MemAvailable", values.get("MemFree", 0)), values.get("MemTotal", 0)
    except (OSError, ValueError, IndexError):
        return 0, 0


def this_machine(probe_gpu: bool | None = None) -> Machine:
    """Free RAM now, and the free memory of the GPU a run would use (torch.cuda.mem_get_info). probe_gpu None looks
    only where torch already runs CUDA (opening no CUDA context: a torchrun process must not open one on GPU 0 before
    it picks its own); True loads torch and looks; False never looks (the GPU stays unknown)."""
    free, total = ram_memory()
    torch = sys.modules.get("torch")
    if probe_gpu is False or (probe_gpu is None and (torch is None or not torch.cuda.is_initialized())):
        return Machine(free, total, gpu_known=False)
    import torch

    if not torch.cuda.is_available():
        return Machine(free, total)
    index = torch.cuda.current_device()
    gpu_free, gpu_total = torch.cuda.mem_get_info(index)
    return Machine(free, total, int(gpu_free), int(gpu_total), torch.cuda.get_device_name(index))


@dataclass(frozen=True)
class MemoryPlan:
    """A run as the memory estimate sees it: the model, how it trains, and where its sequence length comes from."""

    spec: ModelSpec
    shape: TrainingShape
    batch_size: int  # sequences (DPO: pairs) per optimizer step
    rows: int  # sequences per example: 2 for DPO's chosen and rejected answers
    length: str  # the sequence length's source, in words: "the longest example", "a guess: ...", ...
    finetune: bool

    @property
    def guessed_length(self) -> bool:
        return self.length.startswith("a guess")

    @property
    def micro_batch(self) -> int:
        """Examples per forward pass (0: rollouts, not estimated)."""
        return self.shape.batch_size // self.rows

    def total(self, shape: TrainingShape | None = None) -> int:
        """Bytes the run needs, as planned or with another shape."""
        return estimate_training_memory(self.spec, shape or self.shape)["total"]


def memory_budget(device: str, machine: Machine) -> tuple[str, int, bool] | None:
    """(what the run draws on, free bytes, a GPU?) for the run's device; None where unknown."""
    if device == "cuda" or (device == "auto" and machine.gpu_total):
        if not machine.gpu_total:
            return None  # not looked yet, or no GPU (the engine refuses device cuda by itself)
        return f"the GPU ({machine.gpu_name or 'CUDA'})", machine.gpu_free, True
    if device == "auto" and not machine.gpu_known:
        return None  # a GPU may train it: wait until torch has looked
    if not machine.ram_total:
        return None
    return "this machine's RAM", machine.ram_free, False


def memory_plan(config: RunConfig, train: TrainSpec, on_gpu: bool) -> MemoryPlan | None:
    """The model and training shape of a run, or None where the model cannot be read without loading it."""
    folder = None if config.model else base_folder(config.base_model)
    base = read_config(folder) if folder is not None else None
    spec = config.model_spec() if config.model else (spec_for_estimate(base) if base is not None else None)
    if spec is None:
        return None
    seq, length = sequence_length(config, spec, folder)
    micro = 1 if train.auto_micro_batch else (train.micro_batch_size or train.batch_size)
    rows = 2 if config.objective == "dpo" else 1  # chosen and rejected answers
    if config.is_rl:
        micro = 0  # rollouts: their activations are not estimated here
    adapter = config.adapter_spec() if config.adapter else None
    shape = TrainingShape(micro * rows, seq, run_precision(train.precision, on_gpu),
                          bool(train.gradient_checkpointing), adapter.kind if adapter else "none",
                          adapter.rank if adapter else 8,
                          attention_of(base.get("model_type")) if base is not None else "sdpa")
    return MemoryPlan(spec, shape, train.batch_size, rows, length, config.is_finetune)


def sequence_length(config: RunConfig, spec: ModelSpec, folder: Path | None) -> tuple[int, str]:
    """(tokens per sequence, where that comes from): a prepared dataset's window; for fine-tuning the longest
    example of the data files (at most max_len, or the context), a packed window, or a guess before data is chosen."""
    if config.objective == "causal_lm":
        window = dataset_context(config.dataset) if config.dataset else 0
        return (window, "the dataset's window") if window else (spec.context_length, "the model's context")
    if config.objective not in ("sft", "dpo"):
        return spec.context_length, "the model's context"
    options = config.options()
    limit = int(getattr(options, "max_len", 0) or 0) or spec.context_length
    if getattr(options, "packing", False):
        return limit, "packed windows"
    tokenizer = folder / "tokenizer.json" if folder is not None else None
    longest = longest_example(list(config.data or []), dict(config.columns or {}),
                              tokenizer if tokenizer is not None and tokenizer.is_file() else None)
    if longest:
        return min(longest, limit), "the longest example"
    if limit < ASSUMED_EXAMPLE_TOKENS:
        return limit, "the longest example allowed"
    return ASSUMED_EXAMPLE_TOKENS, "a guess until data files are chosen"


def run_precision(precision: str, on_gpu: bool) -> str:
    """The precision a run computes in: as set; "auto" is bf16 on a GPU and `cpu_auto_precision` on a CPU."""
    if precision in ("fp32", "bf16", "fp16"):
        return precision
    return "bf16" if on_gpu else cpu_auto_precision()


def cpu_auto_precision() -> str:
    """What "auto" computes in on this CPU: the engine's own choice (devices.choose_precision: bf16 where this CPU
    was measured to run it fast) once torch is loaded, fp32 before (torch is not loaded to find out)."""
    if "torch" not in sys.modules:
        return "fp32"
    import torch

    from desktop_app.engine.devices import choose_precision  # lazy: torch

    return choose_precision(torch.device("cpu"), "auto").name


def fit_plan(plan: MemoryPlan, free: int) -> MemoryPlan:
    """The plan with the least change that brings its estimate within FITS_SHARE of `free`: the largest micro-batch
    (a divisor of the batch) that fits, else gradient checkpointing with the largest that then fits; where nothing
    fits, the lightest of them (a micro-batch of 1 with checkpointing). Rollouts (micro-batch 0) are kept."""
    if not plan.micro_batch:
        return plan
    limit = free * FITS_SHARE
    checkpointing = [plan.shape.gradient_checkpointing] + ([] if plan.shape.gradient_checkpointing else [True])
    for ckpt in checkpointing:
        for micro in divisors(plan.batch_size):
            shape = dataclasses.replace(plan.shape, batch_size=micro * plan.rows, gradient_checkpointing=ckpt)
            if plan.total(shape) <= limit:
                return dataclasses.replace(plan, shape=shape)
    return dataclasses.replace(plan, shape=dataclasses.replace(plan.shape, batch_size=plan.rows,
                                                                gradient_checkpointing=True))


def opening_plan(spec: ModelSpec, adapter: str, on_gpu: bool, attention: str = "sdpa") -> MemoryPlan:
    """A fine-tuning run of `spec` as a base opens it, before data files are chosen: TrainSpec's batch in one pass,
    the guessed example length, the precision it will compute in, `adapter` ("none", "lora", "qlora") at
    AdapterSpec's rank. `fit_plan` of it is what Get a model says and what the Train tab opens with."""
    train = TrainSpec()
    shape = TrainingShape(train.batch_size, min(spec.context_length, ASSUMED_EXAMPLE_TOKENS),
                          run_precision(train.precision, on_gpu), False, adapter, AdapterSpec().rank, attention)
    return MemoryPlan(spec, shape, train.batch_size, 1, "a guess until data files are chosen", True)


def base_parameters(path: str) -> int:
    """The parameter count of a base model from its config.json (0 where it cannot be read)."""
    config = base_config(path)
    spec = spec_for_estimate(config) if config is not None else None
    return count_parameters(spec) if spec is not None else 0


def divisors(n: int) -> list[int]:
    """The divisors of n, largest first."""
    return sorted({d for i in range(1, int(n ** 0.5) + 1) if n % i == 0 for d in (i, n // i)}, reverse=True)


def dataset_context(dataset: str) -> int:
    """The window length of a prepared dataset (its manifest), 0 when unreadable."""
    try:
        manifest = json.loads((Path(dataset).expanduser() / "manifest.json").read_text(encoding="utf-8"))
        return int(manifest["chunking"]["context_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def base_folder(path: str, depth: int = 0) -> Path | None:
    """The folder holding a base model's config.json and tokenizer: a model folder, a run's newest checkpoint, or the
    base an adapter sits on; None where there is none (nothing verified or loaded: this runs while the person types)."""
    folder = Path(path).expanduser()
    if not path or not folder.is_dir() or depth > 8:
        return None
    from desktop_app.engine.model.folders import adapter_base_path, is_adapter_folder  # lazy: start-up

    if run_folder.is_run_folder(folder):
        committed = run_folder.list_committed(folder)
        if not committed:
            return None
        folder = committed[-1]
    if is_adapter_folder(folder):
        return base_folder(adapter_base_path(folder), depth + 1)
    return folder


def read_config(folder: Path) -> dict[str, Any] | None:
    """A model folder's config.json as a dict; None where it is missing or unreadable (the run's checks name it)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def base_config(path: str) -> dict[str, Any] | None:
    """The config.json (a dict) of a base model from the folder alone (`base_folder`); None where it cannot be read
    this way (a GGUF file, no config.json)."""
    folder = base_folder(path)
    return read_config(folder) if folder is not None else None
