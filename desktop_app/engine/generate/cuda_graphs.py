"""Decode steps captured as CUDA graphs, one per shape (batch bucket x length bucket x sampler settings).

A small model's decode step on a GPU is ~150-400 tiny kernels whose launches (~9 us each from Python on an
H100) cost far more than their arithmetic; a CUDA graph replays all of them with one launch. `GraphSet.run`
captures a step function the first time a key is seen and replays it afterwards. The function must touch
only tensors that live as long as the graph (static buffers) and must not read anything back to the host.

Capturing runs the function a few times on a side stream first (lazy cuBLAS/allocator set-up must not
happen during capture); those warm-up runs advance the step's state, so the caller passes `snapshot`, which
saves that state and returns how to put it back after each of them (without one: a single warm-up). All
graphs of a set share one memory pool: they never run at the same time, and each writes its results into
the static buffers before the next one runs.

Where graphs cannot be used (no CUDA, or a capture fails: an unsupported op, out of memory) the set runs the
function eagerly from then on and `reason` says why: the same results, only slower. AZR_DECODE_GRAPHS=0
turns capturing off (to compare, or to rule graphs out when hunting a bug). With `compile_steps` (or
AZR_DECODE_COMPILE=1) each step is compiled by torch.compile before capture, fusing its elementwise kernels;
a step that fails to compile or capture that way is captured uncompiled.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import torch

log = logging.getLogger(__name__)

Snapshot = Callable[[], Callable[[], None]]  # saves the state a step changes; returns its restorer
_WARMUP_RUNS = 2
MAX_GRAPHS = 96  # per set; the least recently used graph goes first beyond it (each holds some pool memory)


def graphs_available(device: torch.device) -> tuple[bool, str]:
    """Whether steps on `device` can be captured as CUDA graphs, and why (or why not)."""
    if device.type != "cuda":
        return False, f"CUDA graphs need a CUDA device (decoding on {device.type})"
    if os.environ.get("AZR_DECODE_GRAPHS", "1") == "0":
        return False, "CUDA graphs are turned off (AZR_DECODE_GRAPHS=0)"
    if not torch.cuda.is_available():
        return False, "CUDA is not available"
    return True, "decode steps replay as CUDA graphs (one per batch and length bucket)"


class GraphSet:
    """Step functions by key: captured once, then replayed (or run eagerly where graphs are unavailable)."""

    def __init__(self, device: torch.device, enabled: bool | None = None, *, compile_steps: bool = False):
        self.device = device
        available, self.reason = graphs_available(device)
        self.enabled = available if enabled is None else (enabled and available)
        if enabled is False and available:
            self.reason = "CUDA graphs were turned off by the caller"
        # torch.compile each step before capturing it (fuses its elementwise kernels; costs a compile per
        # new shape): opt-in, for the benchmark to measure, or AZR_DECODE_COMPILE=1.
        self.compile_steps = self.enabled and (compile_steps or os.environ.get("AZR_DECODE_COMPILE", "0") == "1")
        if self.compile_steps:
            self.reason += ", each step compiled by torch.compile first"
        self.graphs: OrderedDict[Hashable, Any] = OrderedDict()
        self.pool: Any = None
        self.side: Any = None  # the stream warm-ups and captures run on
        self.captures = 0
        self.replays = 0

    def run(self, key: Hashable, step: Callable[[], None], snapshot: Snapshot | None = None) -> None:
        """Run `step` once: by replaying its graph for `key` (captured now if new), or eagerly."""
        if not self.enabled:
            step()
            return
        graph = self.graphs.get(key)
        if graph is None:
            graph = self._capture(step, snapshot)
            if graph is None:  # capture failed: the set runs eagerly from now on
                step()
                return
            self.graphs[key] = graph
            while len(self.graphs) > MAX_GRAPHS:
                self.graphs.popitem(last=False)
        else:
            self.graphs.move_to_end(key)
        graph.replay()
        self.replays += 1

    def _compiled(self, step: Callable[[], None]) -> Callable[[], None]:
        if not self.compile_steps:
            return step
        try:
            return torch.compile(step, fullgraph=True)
        except Exception as exc:  # torch.compile refuses up front (no compiler here): plain steps
            log.warning("torch.compile of a decode step failed (%s): capturing it uncompiled", exc)
            self.compile_steps = False
            return step

    def _capture(self, step: Callable[[], None], snapshot: Snapshot | None) -> Any:
        run = self._compiled(step)
        restore = snapshot() if snapshot is not None else None
        try:
            if self.side is None:
                self.side = torch.cuda.Stream(self.device)
            side, current = self.side, torch.cuda.current_stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                for _ in range(_WARMUP_RUNS if restore is not None else 1):
                    run()
                    if restore is not None:  # every warm-up starts from the real state (a second step from
                        restore()  # the first one's state could write past its length bucket)
                # Captured directly (torch.cuda.graph would also collect garbage and empty the allocator's
                # cache, which costs a training process far more than a capture); "thread_local": another
                # thread's CUDA work (a training run beside the chat) neither breaks the capture nor fails.
                torch.cuda.synchronize(self.device)  # nothing pending when the capture begins
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin(*(() if self.pool is None else (self.pool,)), capture_error_mode="thread_local")
                try:
                    run()  # recorded, not run
                finally:
                    graph.capture_end()
            current.wait_stream(side)
        except Exception as exc:  # any capture failure falls back: uncompiled, then eager steps
            torch.cuda.synchronize(self.device)
            if restore is not None:
                restore()
            first = str(exc).splitlines()[0] if str(exc) else ""
            if run is not step:
                log.warning("a compiled decode step could not be captured (%s: %s): capturing it uncompiled",
                            type(exc).__name__, first)
                self.compile_steps = False
                return self._capture(step, snapshot)
            self.disable(f"capturing a decode step as a CUDA graph failed ({type(exc).__name__}: {first}); "
                         "decoding without graphs")
            return None
        if self.pool is None:
            self.pool = graph.pool()
        self.captures += 1
        return graph

    def disable(self, reason: str) -> None:
        """Run eagerly from now on (and drop the graphs) with `reason`."""
        log.warning(reason)
        self.enabled, self.reason = False, reason
        self.graphs.clear()

    def clear(self) -> None:
        """Forget every graph (their buffers are about to be replaced)."""
        self.graphs.clear()
        self.pool = None
