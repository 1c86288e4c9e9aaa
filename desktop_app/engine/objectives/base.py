"""The seam between the one training loop and a training method.

The loop owns everything generic: optimizer, schedule, accumulation, precision, clipping, non-finite
and OOM handling, controls, metrics, checkpoints and resume. An *objective* owns what differs
between methods: where batches come from (its batch source, data/batches.py), how a batch becomes a loss
plus named metrics, and how to evaluate. `Objective` below is the whole protocol, with no-op defaults for
what a method may skip, so the loop never has to ask whether a method has something:

- causal LM: windows of a prepared dataset; SFT: chat/instruction records with loss masks (the model may be
  a PEFT-wrapped LoRA/QLoRA model); DPO: preference pairs and a reference; GRPO and self-play: the batch
  source plays rollouts with the current model, the loss is a policy-gradient loss, metrics carry rewards.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from desktop_app.engine.data.batches import BatchSource
from desktop_app.engine.events import Event
from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec

if TYPE_CHECKING:
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.model.folders import BaseModelInfo


@dataclass(frozen=True)
class Processes:
    """The processes that train one run together (torchrun), as an objective sees them: this one's rank, how many
    there are, and `gather(value, what)`: every process's JSON-able value in rank order (every process calls it at
    the same point; `what` names the moment for the error when another process is gone). One process: rank 0 of 1.
    A rollout method plays its share of each round's episodes and gathers the rest (objectives/episodes.py)."""

    rank: int = 0
    world: int = 1
    gather: Callable[[Any, str], list[Any]] | None = None

    def share(self, count: int) -> range:
        """This process's items of `count`: every world-th from its rank (dealt out in turn, so each process gets a
        mix of a round's kinds of work: short and long replies, cheap and costly checks)."""
        return range(self.rank, count, self.world)

    def pool(self, mine: list[Any], what: str) -> list[Any]:
        """Every process's items in their order, each process's `mine` being its `share` of them (in order)."""
        if self.world == 1 or self.gather is None:
            return mine
        parts = self.gather(mine, what)
        return [parts[i % self.world][i // self.world] for i in range(sum(len(part) for part in parts))]


@dataclass
class TrainContext:
    """What the loop hands an objective (read-only by convention)."""

    run_dir: Path
    config: RunConfig  # data files, method options, adapter
    train_spec: TrainSpec
    device: torch.device
    autocast: Callable[[], AbstractContextManager[Any]]  # autocast, or a null context
    seed: int
    store: TokenStore | None = None  # pretraining's prepared dataset (None for the fine-tuning methods)
    dataset_dir: Path | None = None
    model_spec: ModelSpec | None = None
    # pretraining: the dataset's tokenizers.Tokenizer; fine-tuning: the base's transformers fast tokenizer
    # (chat template set, chat tokens present)
    tokenizer: Any = None
    resumed: bool = False
    base: BaseModelInfo | None = None  # the base model a method starts from
    adapter: bool = False  # the model is a PeftModel (LoRA/QLoRA)
    load_reference: Callable[[], torch.nn.Module] | None = None  # a frozen copy of the base, prepared alike
    processes: Processes = Processes()  # several under torchrun


class Objective:
    """A training method, as the loop sees it. Subclasses implement batch_source, split, loss and tokens."""

    name = ""
    # On several processes, whether every process evaluates its share (the rollout methods, which gather the
    # results), or process 0 alone evaluates (DDP) while the others wait
    shares_evaluation = False

    def __init__(self) -> None:
        self.notes: list[Event] = []  # emitted by the loop after setup (e.g. per-record data verdicts)

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        """Called once before training (e.g. read the data, keep a reference model)."""

    def batch_source(self, ctx: TrainContext) -> BatchSource:
        raise NotImplementedError

    def split(self, batch: Any, micro_batch: int) -> list[Any]:
        """Cut one step's batch into micro-batches of at most `micro_batch` examples."""
        raise NotImplementedError

    def shard(self, batch: Any, rank: int, world: int) -> Any:
        """This process's part of a step's batch when several train it, or None: the loop takes rows
        rank*B/N .. (rank+1)*B/N. A method whose loss is normalised over the whole step shards itself."""
        return None

    def to_device(self, micro: Any, device: torch.device) -> Any:
        return micro

    def loss(self, model: torch.nn.Module, micro: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Mean loss of the micro-batch and named scalar metrics (tensors; the loop syncs them rarely)."""
        raise NotImplementedError

    def tokens(self, micro: Any) -> int:
        """Tokens processed by a micro-batch (for tokens/s and MFU)."""
        raise NotImplementedError

    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        """Validation metrics (the loop calls it in eval mode under no_grad); 'val_loss' drives best/early stop."""
        return {}

    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        """(prompt, text) pairs shown at each evaluation."""
        return []

    def stalled(self, evaluations: int, best_val_loss: float) -> str:
        """Why early stopping ended the run, in the words of what `evaluate` measures."""
        return f"validation loss has not improved for {evaluations} evaluations (best {best_val_loss:.4f})"

    def state_dict(self) -> dict[str, Any] | None:
        """JSON state kept in trainer_state.json (None: nothing to keep)."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        """Release what setup took (sandboxes, worker processes)."""


def context_of(ctx: TrainContext, model: torch.nn.Module) -> int:
    """The longest sequence a method may build: the dataset's windows, else the model's positions."""
    if ctx.store is not None:
        return int(ctx.store.context_length)
    return int(getattr(model.config, "max_position_embeddings", 0) or 512)
