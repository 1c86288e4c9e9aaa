"""The seam between the one training loop and a training method.

The loop owns everything generic: optimizer, schedule, accumulation, precision, clipping, non-finite
and OOM handling, controls, metrics, checkpoints and resume. An *objective* owns what differs
between methods: where batches come from (its batch source), how a batch becomes a loss plus named
metrics, and how to evaluate. Later methods fit without touching the loop:

- SFT: a batch source over chat/instruction records with loss masks; `loss` masks prompt tokens.
- LoRA/QLoRA: the same objectives; the model handed in is a PEFT-wrapped model.
- DPO: a preference-pair batch source; `setup` gets reference log-probabilities (precomputed once,
  or a reference kept by the objective, not the loop); `loss` returns the DPO loss and reward metrics.

Optional: `notes` (events the loop emits after setup, e.g. per-record data verdicts) and
`state_dict()` / `load_state_dict()` (JSON objective state kept in trainer_state.json).
- Self-play RL: the batch source generates its own episodes with the current model; `loss` is the
  policy-gradient loss, metrics carry rewards.

A batch source must be resumable (`state_dict` / `load_state_dict` of plain JSON) and return each
optimizer step's whole batch with its position, so accumulation and OOM retries re-split the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass
class TrainContext:
    """What the loop hands an objective (read-only by convention)."""

    run_dir: Path
    dataset_dir: Path | None  # None for fine-tuning methods (they read `config.data`)
    store: Any  # TokenStore (None for fine-tuning methods)
    train_spec: Any  # TrainSpec
    model_spec: Any  # ModelSpec | None
    seed: int
    device: torch.device
    autocast: Any  # zero-argument callable returning a context manager (autocast or nullcontext)
    # pretraining: the dataset's tokenizers.Tokenizer; fine-tuning: the base's transformers fast tokenizer
    # (chat template set, chat tokens present)
    tokenizer: Any = None
    config: Any = None  # the RunConfig (data files, method options, adapter)
    # resumed (bool), base (BaseModelInfo | None), adapter (bool: the model is a PeftModel),
    # load_reference (callable -> a frozen copy of the base, prepared like the trained model)
    extras: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class BatchSource(Protocol):
    def take(self, count: int) -> tuple[Any, list[int]]: ...
    def skip(self, position: list[int]) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Objective(Protocol):
    name: str

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        """Called once before training (e.g. load a reference model, precompute eval data)."""

    def batch_source(self, ctx: TrainContext) -> BatchSource:
        """The resumable source of training batches."""

    def split(self, batch: Any, micro_batch: int) -> list[Any]:
        """Cut one step's batch into micro-batches of at most `micro_batch` examples."""

    def to_device(self, micro: Any, device: torch.device) -> Any: ...

    def loss(self, model: torch.nn.Module, micro: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Mean loss of the micro-batch and named scalar metrics (tensors; the loop syncs them rarely)."""

    def tokens(self, micro: Any) -> int:
        """Tokens processed by a micro-batch (for tokens/s and MFU)."""

    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Validation metrics (the loop calls it in eval mode under no_grad); 'val_loss' drives best/early stop."""

    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        """(prompt, text) pairs shown at each evaluation; may be empty."""
