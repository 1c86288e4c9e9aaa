"""Torch threads of the decode thread: the engine's policy, applied to a batch whose size changes.

The engine starts small work on one thread and lets a ThreadTuner time 1 thread against all cores while
it decodes (generate/threads.py, generate/thread_tuner.py). Step times depend on how many rows decode, so the
server keeps one tuner per batch-size bucket (1, 2, 4, ... rows), each made by the engine's `new_tuner`, and
each learns its own answer; torch's thread count is per calling thread here, so this touches only the decode
thread.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from desktop_app.engine.devices import cpu_cores
from desktop_app.engine.generate.thread_tuner import ThreadTuner
from desktop_app.engine.generate.threads import decode_threads, new_tuner


def _bucket(rows: int) -> int:
    return 1 << max(0, rows - 1).bit_length()


class DecodeThreads:
    """`before(rows)` sets the thread count for the next step; `after()` reports how long it took."""

    def __init__(self, model: Any, fixed: int | None = None):
        self.model = model
        self.fixed = fixed
        self.cores = cpu_cores()
        self.tuners: dict[int, ThreadTuner | None] = {}
        self._current: ThreadTuner | None = None
        self._applied: int | None = None
        self._t0 = 0.0

    def _tuner(self, rows: int) -> ThreadTuner | None:
        key = _bucket(rows)
        if key not in self.tuners:
            self.tuners[key] = new_tuner(self.model, key)
        return self.tuners[key]

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
