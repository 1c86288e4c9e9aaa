"""Adaptive torch thread count for a loop of short repeated steps (token decoding), chosen by timing.

Why measure instead of assume: decoding one token of a ~30M model at batch 1 streams all its weights
through the CPU, and a second thread nearly doubles that bandwidth when the other core is idle
(measured here: 13 -> 24 GB/s, ~1.7x tokens/s). But when another thread keeps that core busy (a
training run, a busy GUI), each of the ~70 parallel regions per token waits for the descheduled
worker and decoding runs 5-20x SLOWER than on one thread. Which case holds changes while the app
runs, so the tuner starts on the safe choice, tries the other one, keeps the faster, and checks again
now and then (less often each time the other choice loses, so a busy machine rarely pays for a probe),
and at once when the step time jumps (another thread just got busy). Before trying more threads with
real steps it times one small parallel op at both counts (`quick_check`): a collapsed real step of a
~30M model costs as much as ~40 normal ones, a collapsed quick check a few milliseconds.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TunerTiming:
    """How a ThreadTuner times its steps and when it probes the other thread count."""

    warm: int = 2  # first steps not timed: they pay for allocations and cache warm-up
    probe: int = 3  # steps a probe of the other count runs
    interval: int = 64  # timed steps between probes (doubled up to max_interval while the other count loses)
    max_interval: int = 256
    jump: float = 2.0  # a step this many times the median: the machine's load changed (probe again, or stop one)
    margin: float = 0.05  # the other count wins when this much faster


class ThreadTuner:
    """Times steps and picks the faster of two torch thread counts. Use: `apply()` before a step,
    `record(seconds)` after it. Thread counts are per calling thread in torch's OpenMP build."""

    def __init__(self, start: int, other: int, timing: TunerTiming = TunerTiming(),
                 quick_check: Callable[[], object] | None = None):
        self.current, self.other = start, other
        self.quick_check = quick_check
        self.warm, self.probe = timing.warm, timing.probe  # warm counts down
        self.base_interval, self.max_interval = timing.interval, timing.max_interval
        self.jump, self.margin = timing.jump, timing.margin
        self.interval = 2  # the first probe comes right after two timed steps
        self.since_probe = 0
        self.history: deque[float] = deque(maxlen=8)  # recent step times of `current`
        self.trial: list[float] | None = None  # step times of `other` while probing
        self.switches = 0
        self._applied: int | None = None

    def state(self) -> dict[str, int]:
        """What a later loop over the same work should start from (see resume)."""
        return {"current": self.current, "other": self.other, "interval": self.interval,
                "since_probe": self.since_probe}

    @classmethod
    def resume(cls, state: dict[str, int], timing: TunerTiming = TunerTiming(),
               quick_check: Callable[[], object] | None = None) -> ThreadTuner:
        """A tuner that continues from an earlier loop's state, so repeated short generations do not
        each pay for a probe. It always starts on the fewer threads (never the slow case): when more
        won last time they are probed right after the warm-up (a few slower steps if they still win,
        one collapsed step if the machine got busy meanwhile); when fewer won, the probe back-off
        carries on where it was."""
        few, many = sorted((state["current"], state["other"]))
        tuner = cls(few, many, timing, quick_check)
        if state["current"] == few:
            tuner.interval, tuner.since_probe = state["interval"], state["since_probe"]
        return tuner

    @property
    def threads(self) -> int:
        """The thread count the next step runs with."""
        return self.other if self.trial is not None else self.current

    def apply(self) -> None:
        n = self.threads
        if n != self._applied:
            torch.set_num_threads(n)
            self._applied = n

    def record(self, seconds: float) -> None:
        if self.warm > 0:  # first steps pay for allocations and cache warm-up: not representative
            self.warm -= 1
            return
        if self.trial is not None:
            self._record_trial(seconds)
            return
        self.history.append(seconds)
        self.since_probe += 1
        recent = list(self.history)
        if len(recent) >= 4 and min(recent[-2:]) > self.jump * statistics.median(recent[:-2]):
            # The machine changed (another thread got busy or idle): measure again against the new times.
            self.history = deque(recent[-2:], maxlen=8)
            self.trial = []
        elif self.since_probe >= self.interval:
            if self.other > self.current and not self._quick_check_favours_more():
                # A lost check costs a few ms, so check again after the base interval (no back-off): a
                # hiccup on an idle machine must not keep decoding on one thread for hundreds of tokens.
                self.interval, self.since_probe = self.base_interval, 0
            else:
                self.trial = []

    def _quick_check_favours_more(self) -> bool:
        """Before probing more threads with real steps: time a small parallel op (a few ms) at both
        counts. On a busy machine more threads lose this too, and a real probe step would cost as much
        as dozens of normal steps, so it is skipped."""
        if self.quick_check is None:
            return True
        def timed(n: int) -> float:
            torch.set_num_threads(n)
            t0 = time.perf_counter()
            self.quick_check()  # type: ignore[misc]
            return time.perf_counter() - t0

        try:
            reference = timed(self.current)
            # The first run on more threads wakes them (they sleep after a while unused): a little slower
            # when idle, far slower when a core is busy -> stop there, having paid for one run.
            if timed(self.other) > 3.0 * reference:
                return False
            times: dict[int, list[float]] = {self.current: [reference], self.other: []}
            for _ in range(5):
                few, many = timed(self.current), timed(self.other)
                times[self.current].append(few)
                times[self.other].append(many)
                if many > 1.5 * few:  # one collapsed run is evidence enough of a busy core
                    return False
        finally:
            torch.set_num_threads(self.current)
            self._applied = self.current
        # Medians: one lucky run on a busy machine, or one hiccup on an idle one, must not decide.
        return statistics.median(times[self.other]) < 0.75 * statistics.median(times[self.current])

    def _lost_probe(self) -> None:
        self.interval = min(self.max_interval, max(self.base_interval, 2 * self.interval))
        self.since_probe = 0

    def _record_trial(self, seconds: float) -> None:
        assert self.trial is not None
        self.trial.append(seconds)
        reference = statistics.median(self.history)  # never empty: a probe starts after a recorded step
        if len(self.trial) < self.probe and seconds <= self.jump * reference:
            return  # (a step far slower than the reference ends the probe early: it cannot win)
        if statistics.median(self.trial) < (1.0 - self.margin) * reference:
            self.current, self.other = self.other, self.current  # the other setting wins
            self.history = deque(self.trial, maxlen=8)
            self.interval = self.base_interval
            self.switches += 1
            self.since_probe = 0
        else:
            self._lost_probe()
        self.trial = None
