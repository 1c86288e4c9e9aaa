"""Torch threads and the GIL while decoding: the one thread policy of `stream_text` and the server's batcher.

With small work a second torch thread mostly adds synchronisation, and when another thread (the GUI, a
training run) keeps a core busy it makes decoding several times slower; on an idle machine it makes a
memory-bound 12M-28M model ~1.6x faster. So decoding starts on the safe choice (`decode_threads`: 1 thread
for small work on CPU) and a ThreadTuner (thread_tuner.py, made by `new_tuner`) times it against all cores
while decoding, keeps the faster and re-checks. In this torch build (OpenMP) `torch.set_num_threads` applies
to the calling thread only (checked: other threads keep their count); `torch_threads` restores it anyway.
While generating, the GIL switch interval is lowered to 50 us (`short_gil_switch`) so a busy Python thread
delays each GIL hand-back by at most that.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.devices import cpu_cores
from desktop_app.engine.generate.thread_tuner import ThreadTuner

# parameters x batch rows up to which decoding starts on one thread on CPU (see decode_threads).
_ONE_THREAD_WORK = 1_000_000_000
# Below this much work (parameters x rows) one thread is as fast as two even when idle (the 0.9M preset:
# 2,164 vs 2,048 tokens/s), so "auto" stays on one thread without timing anything.
_TUNE_MIN_WORK = 10_000_000


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def decode_threads(model: torch.nn.Module, batch: int) -> int | None:
    """The torch threads decoding `batch` rows with `model` starts with: 1 on CPU unless parameters x
    batch exceed ~1e9 (then None: all cores); None on GPUs. With threads="auto", stream_text then lets a
    ThreadTuner (thread_tuner.py) time 1 thread against all cores and keep the faster.

    Why start on 1: with small work a second thread mostly adds synchronisation, and when another thread
    keeps a core busy, 2 threads decoded the 0.9M and 12M presets 7-20x SLOWER than 1 (measured with
    tests/bench/bench_generate.py on the shared 2-core machine). On an idle machine, 2 threads decode a
    12M-28M model ~1.6x faster (the weight matmuls are memory-bound and 2 cores stream faster): the
    tuner finds that within a few tokens.
    """
    device = next(model.parameters()).device
    if device.type != "cpu":
        return None
    return 1 if count_parameters(model) * max(1, batch) <= _ONE_THREAD_WORK else None


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` torch threads (None = unchanged), then restore the previous setting."""
    if not n:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# While decoding, the loop hands the GIL back and forth with any other busy Python thread (the GUI):
# each torch op releases it, and getting it back can take a whole switch interval (5 ms by default).
# Measured here with a Python thread spinning beside decoding of the 12M preset: 5 tokens/s at 1 ms,
# 23 at 0.2 ms, 42 at 50 us (the spinner kept 84% of its own speed), 52 at 20 us (79%). 50 us.
_GIL_SWITCH_S = 0.00005
_gil_lock = threading.Lock()
_gil_users = 0
_gil_saved = 0.0


@contextlib.contextmanager
def short_gil_switch() -> Iterator[None]:
    """Lower sys.setswitchinterval to 1 ms while any generation runs (restored when the last one ends)."""
    global _gil_users, _gil_saved
    with _gil_lock:
        if _gil_users == 0:
            _gil_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_gil_saved, _GIL_SWITCH_S))
        _gil_users += 1
    try:
        yield
    finally:
        with _gil_lock:
            _gil_users -= 1
            if _gil_users == 0:
                sys.setswitchinterval(_gil_saved)


# ----------------------------------------------------------------------------------------------------
# Choosing between 1 thread and all cores while decoding


def quick_check(model: Any) -> Callable[[], None] | None:
    """A small parallel op shaped like decoding (one row times the output matrix, memory-bound) for the
    tuner to time at 1 and at all threads before it risks real steps on more threads."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return None
    row = torch.zeros(1, weight.shape[1], dtype=weight.dtype, device=weight.device)

    def check() -> None:
        with torch.no_grad():
            F.linear(row, weight)

    return check


def new_tuner(model: Any, rows: int, saved: dict[str, int] | None = None) -> ThreadTuner | None:
    """The tuner for decoding `rows` rows with `model`, or None where timing cannot pay (not on CPU, one
    core, or work below _TUNE_MIN_WORK: stay on decode_threads' choice). It starts on decode_threads'
    choice against the other of 1 / all cores, or continues from `saved` (a ThreadTuner state for the same
    work) when that compared the same two counts."""
    cores = cpu_cores()
    if next(model.parameters()).device.type != "cpu" or cores < 2 or count_parameters(model) * rows < _TUNE_MIN_WORK:
        return None
    check = quick_check(model)
    if saved is not None and {saved["current"], saved["other"]} == {1, cores}:
        return ThreadTuner.resume(saved, quick_check=check)
    first = decode_threads(model, rows) or cores
    return ThreadTuner(first, 1 if first > 1 else cores, quick_check=check)


# (parameters, rows) -> the last ThreadTuner state for that work: later calls continue from it.
_TUNING: dict[tuple[int, int], dict[str, int]] = {}


def thread_tuner(model: Any, rows: int) -> tuple[ThreadTuner | None, int | None]:
    """stream_text's tuner for decoding `rows` rows with `model` (None where none pays), continuing from the
    last call's state for the same work, and the thread count to start with."""
    tuner = new_tuner(model, rows, _TUNING.get((count_parameters(model), rows)))
    if tuner is None:
        return None, decode_threads(model, rows)
    return tuner, tuner.threads


def remember_tuner(model: Any, rows: int, tuner: ThreadTuner) -> None:
    """Keep the tuner's state for the next call decoding the same work (see thread_tuner)."""
    _TUNING[(count_parameters(model), rows)] = tuner.state()
