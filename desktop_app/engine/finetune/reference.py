"""DPO's reference model: log-probabilities of the answers under the frozen starting point.

Which model is the reference:
- LoRA / QLoRA: the trained model itself with its adapters switched off (`disable_adapter()`): the frozen
  base, no second copy in memory. Works the same after a resume, since the base never changes.
- Full fine-tuning: a second, frozen copy of the base (loaded on demand). Before the first training step
  the model being trained *is* the base, so a fresh run precomputes with it and needs no copy at all.

Precompute (default when the data is no larger than what training will visit): one pass over every pair
before training; the results are kept in `reference_logps.safetensors` in the run folder (atomic write,
keyed by the base's checksum and the pairs' tokens), so a resumed run reads them instead of computing
them again, bit for bit the same numbers. Live: each step computes the reference's log-probabilities of
its own batch (no pass before training; costs one extra forward per step, and for full fine-tuning a
second copy of the model).

The reference always runs in eval mode (no dropout) under no_grad, so it neither moves the training RNG
nor depends on it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from desktop_app.engine.fileio import atomic_write_bytes

CACHE_FILE = "reference_logps.safetensors"


@contextlib.contextmanager
def eval_mode(model: Any) -> Iterator[None]:
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def signature(base_sha: str, adapter_kind: str, sets: dict[str, list[Any]]) -> str:
    """What the cached numbers depend on: the base, whether it is 4-bit (QLoRA), and every pair's tokens."""
    h = hashlib.sha256()
    h.update(f"{base_sha}|{'qlora' if adapter_kind == 'qlora' else 'full'}".encode())
    for name in sorted(sets):
        for ex in sets[name]:
            h.update(json.dumps([name, ex.prompt_ids, ex.chosen_ids, ex.rejected_ids]).encode())
    return h.hexdigest()


def load_cache(run_dir: Path, sig: str) -> dict[str, torch.Tensor] | None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    path = run_dir / CACHE_FILE
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
        if meta.get("signature") != sig:
            return None
        return load_file(str(path))
    except Exception:  # damaged: recompute
        return None


def save_cache(run_dir: Path, sig: str, tables: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save


    data = save({k: v.contiguous() for k, v in tables.items()}, metadata={"signature": sig})
    atomic_write_bytes(run_dir / CACHE_FILE, data)


class Reference:
    """Computes reference log-probabilities of batches: with the adapters disabled, or with a frozen copy."""

    def __init__(self, model: Any, *, adapter: bool, load_copy: Callable[[], Any] | None, pristine: bool):
        self.model = model
        self.adapter = adapter
        self.load_copy = load_copy
        self.pristine = pristine  # the trained model still equals the base (fresh run, before step 1)
        self.copy: Any = None

    @contextlib.contextmanager
    def _use(self, during_training: bool) -> Iterator[Any]:
        if self.adapter:
            with eval_mode(self.model), self.model.disable_adapter():
                yield self.model
            return
        if self.pristine and not during_training:
            with eval_mode(self.model):
                yield self.model
            return
        if self.copy is None:
            if self.load_copy is None:
                raise RuntimeError("no reference model available")
            self.copy = self.load_copy()
        yield self.copy

    @torch.no_grad()
    def logps(self, batch: Any, seq_logps: Callable[[Any, Any], tuple[torch.Tensor, torch.Tensor]],
              autocast: Callable[[], Any], *, during_training: bool) -> torch.Tensor:
        """Summed log-probabilities of each row's answer tokens under the reference (float32, [rows]).
        during_training: the trained model has moved away from the base (so a full model needs the copy)."""
        with self._use(during_training) as ref, autocast():
            total, _ = seq_logps(ref, batch)
        return total.float()

    def release(self) -> None:
        """Drop the frozen copy (after precomputing, it is not needed any more)."""
        self.copy = None
