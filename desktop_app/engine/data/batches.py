"""Seeded, resumable batch sources: windows of a TokenStore (pretraining) and indices of examples (fine-tuning).

The training order is a pure function of (seed, epoch): epoch e visits every window of the split in
the order `default_rng([seed, e]).permutation(n)`. The position is just (epoch, cursor), so a
checkpoint stores three integers and resume continues with exactly the same batches. Several processes
(torchrun) walk the same order and each reads only its rows of every batch, so the order and the position
do not depend on how many processes train.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.errors import UserError


class BatchSource:
    """Where the loop takes each optimizer step's whole batch from: resumable (its state is plain JSON, saved in
    every checkpoint), and returning the position each batch started at, so accumulation and out-of-memory retries
    re-split the same data and a rollback can step over a bad batch. Defaults for what a source may not need."""

    def __init__(self) -> None:
        self.skipped: set[tuple[int, int]] = set()  # positions stepped over (kept through a rollback)

    def take(self, count: int) -> tuple[Any, list[int]]:
        raise NotImplementedError

    def skip(self, position: list[int]) -> None:
        """Step over the batch at `position` whenever the source reaches it again."""

    def set_shard(self, rank: int, processes: int) -> bool:
        """Several processes: True when take() will return only this process's rows from now on (the loop then
        does not split the batch itself)."""
        return False

    @property
    def epoch_progress(self) -> float:
        return 0.0

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class SeededOrder(BatchSource):
    """`n` items visited once per epoch in the order `default_rng([seed, epoch]).permutation(n)`, resumable from
    (epoch, cursor); an epoch boundary inside a batch continues into the next epoch's order. Subclasses say what
    an item is (`gather`) and what their state calls the item count (`size_key`)."""

    size_key = "items"

    def __init__(self, n: int, seed: int):
        super().__init__()
        self.n = int(n)
        self.seed = int(seed)
        self.epoch = 0
        self.cursor = 0
        self._perm_epoch = -1
        self._perm: np.ndarray | None = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        assert self._perm is not None
        return self._perm

    def next_indices(self, count: int) -> np.ndarray:
        out = []
        while count:
            piece = self._permutation(self.epoch)[self.cursor:self.cursor + count]
            out.append(piece)
            count -= len(piece)
            self.cursor += len(piece)
            if self.cursor >= self.n:
                self.epoch += 1
                self.cursor = 0
        return np.concatenate(out)

    def take(self, count: int) -> tuple[Any, list[int]]:
        while (self.epoch, self.cursor) in self.skipped:
            self.next_indices(count)  # step over a batch marked bad
        position = [self.epoch, self.cursor]
        return self.gather(self.next_indices(count), count), position

    def gather(self, idx: np.ndarray, count: int) -> Any:
        """The batch of the items `idx` (a `count`-item step)."""
        raise NotImplementedError

    def skip(self, position: list[int]) -> None:
        self.skipped.add((int(position[0]), int(position[1])))

    @property
    def epoch_progress(self) -> float:
        return self.epoch + self.cursor / self.n

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "cursor": self.cursor, self.size_key: self.n,
                "skipped": sorted([list(p) for p in self.skipped])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self.skipped = {(int(a), int(b)) for a, b in state.get("skipped", [])}
        if int(state.get(self.size_key, self.n)) != self.n or self.cursor >= self.n:
            # The data changed (a dataset grew, an accepted config change): keep the epoch, restart it.
            self.cursor = 0
        self._perm_epoch = -1


class WindowBatchSource(SeededOrder):
    """Windows (context_length + 1 tokens) of one split, shuffled per epoch, resumable.

    The store is verified against its manifest when the source is made (a run's start), and the file is checked
    before each batch: a damaged, deleted or moved file stops the run with one line naming it.
    `take(n)` returns `(tokens, position)`: an int64 tensor (n, context_length + 1) and the
    position it started at (a JSON-able list). `skip(position)` marks a batch to be stepped over
    whenever the source reaches that position again (the rollback policy skips a poisoned batch).
    """

    size_key = "windows"

    def __init__(self, store: TokenStore, split: str = "train", *, seed: int = 0):
        store.verify()  # a truncated or altered token file: refused naming it, before the first step
        self.watch = store.watch(split)  # deleted, moved or cut short during the run: stops it naming the file
        n = store.num_chunks(split)
        if n == 0:
            raise UserError(f"the {split} split of {store.path} has no complete window of "
                            f"{store.context_length + 1} tokens: add more text or lower the context length")
        super().__init__(n, seed)
        self.store = store
        self.split = split
        self.shard: tuple[int, int] | None = None  # (rank, processes): take() returns that rank's rows only

    def set_shard(self, rank: int, processes: int) -> bool:
        """From now on take(count) advances by count windows but reads and returns only rows
        rank*count/processes .. (rank+1)*count/processes (count must divide evenly)."""
        self.shard = (int(rank), int(processes)) if processes > 1 else None
        return self.shard is not None

    def gather(self, idx: np.ndarray, count: int) -> torch.Tensor:
        if self.shard is not None:
            rank, processes = self.shard
            per = count // processes
            idx = idx[rank * per:(rank + 1) * per]
        self.watch.check()  # one stat: the file at that path is still the prepared one
        stride, width = self.store.stride, self.store.context_length + 1
        try:
            out = self.store.read_windows(self.split, [int(i) * stride for i in idx], width)
        except OSError:
            self.watch.check()  # deleted or moved since the stat: the sentence naming the file
            raise
        return torch.from_numpy(out)

    def state_dict(self) -> dict[str, Any]:
        return {"split": self.split, **super().state_dict()}


class IndexBatchSource(SeededOrder):
    """Indices of `n` examples (fine-tuning records), shuffled per epoch; take(k) -> (k example indices, position)."""

    size_key = "examples"

    def __init__(self, n: int, seed: int):
        if n < 1:
            raise UserError("no training examples")
        super().__init__(n, seed)

    def gather(self, idx: np.ndarray, count: int) -> list[int]:
        return [int(i) for i in idx]


def eval_windows(store: TokenStore, count: int, split: str = "val") -> torch.Tensor:
    """A fixed, evenly spaced set of `count` windows of a split (the same at every evaluation)."""
    n = store.num_chunks(split)
    if n == 0:
        return torch.zeros((0, store.context_length + 1), dtype=torch.int64)
    idx = np.unique(np.linspace(0, n - 1, num=min(count, n)).round().astype(np.int64))
    return torch.from_numpy(store.chunks(split, idx))
