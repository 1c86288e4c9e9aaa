"""Torch threads of the decode thread: the engine's policy, applied to a batch whose size changes.

The engine starts small work on one thread and lets a ThreadTuner time 1 thread against all cores while
it decodes (generate/decode.py, generate/thread_tuner.py). Step times depend on how many rows decode, so the server
keeps one tuner per batch-size bucket (1, 2, 4, ... rows) and each learns its own answer; torch's
thread count is per calling thread here, so this touches only the decode thread.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.devices import cpu_cores
from desktop_app.engine.generate.decode import count_parameters, decode_threads
from desktop_app.engine.generate.thread_tuner import ThreadTuner

_TUNE_MIN_WORK = 10_000_000  # parameters x rows below which one thread is as fast as two (generate/decode.py)


def _bucket(rows: int) -> int:
    return 1 << max(0, rows - 1).bit_length()


class DecodeThreads:
    """`before(rows)` sets the thread count for the next step; `after()` reports how long it took."""

    def __init__(self, model: Any, fixed: int | None = None):
        self.model = model
        self.fixed = fixed
        self.params = count_parameters(model)
        self.cpu = next(model.parameters()).device.type == "cpu"
        self.cores = cpu_cores()
        self.tuners: dict[int, ThreadTuner | None] = {}
        self._current: ThreadTuner | None = None
        self._applied: int | None = None
        self._t0 = 0.0

    def _tuner(self, rows: int) -> ThreadTuner | None:
        key = _bucket(rows)
        if key not in self.tuners:
            if not self.cpu or self.cores < 2 or self.params * key < _TUNE_MIN_WORK:
                self.tuners[key] = None
            else:
                first = decode_threads(self.model, key) or self.cores
                self.tuners[key] = ThreadTuner(first, 1 if first > 1 else self.cores, quick_check=self._check())
        return self.tuners[key]

    def _check(self) -> Any:
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        weight = getattr(head, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
            return None
        row = torch.zeros(1, weight.shape[1], dtype=weight.dtype, device=weight.device)

        def check() -> None:
            with torch.no_grad():
                F.linear(row, weight)

        return check

    def _set(self, n: int | None) -> None:
        if n and n != self._applied:
            torch.set_num_threads(n)
            self._applied = n

    def before(self, rows: int) -> None:
        if self.fixed:
            self._set(self.fixed)
            return
        tuner = self._current = self._tuner(rows)
        if tuner is None:
            self._set(decode_threads(self.model, rows) or self.cores)
        else:
            self._set(tuner.threads)  # (not tuner.apply(): it does not know about the other buckets' settings)
        self._t0 = time.perf_counter()

    def after(self) -> None:
        if self._current is not None:
            self._current.record(time.perf_counter() - self._t0)
            self._applied = torch.get_num_threads()
