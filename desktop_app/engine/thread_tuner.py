"""Adaptive torch thread count for a loop of short repeated steps (token decoding), chosen by timing.

Why measure instead of assume: decoding one token of a ~30M model at batch 1 streams all its weights
through the CPU, and a second thread nearly doubles that bandwidth when the other core is idle
(measured here: 13 -> 24 GB/s, ~1.7x tokens/s). But when another thread keeps that core busy (a
training run, a busy GUI), each of the ~70 parallel regions per token waits for the descheduled
worker and decoding runs 5-20x SLOWER than on one thread. Which case holds changes while the app
runs, so the tuner starts on the safe choice, tries the other one, keeps the faster, and checks again
now and then (less often each time the other choice loses, so a busy machine rarely pays for a probe),
and at once when the step time jumps (another thread just got busy).
"""

from __future__ import annotations

import statistics
from collections import deque

import torch


class ThreadTuner:
    """Times steps and picks the faster of two torch thread counts. Use: `apply()` before a step,
    `record(seconds)` after it. Thread counts are per calling thread in torch's OpenMP build."""

    def __init__(self, start: int, other: int, *, warm: int = 2, probe: int = 3, interval: int = 64,
                 max_interval: int = 256, jump: float = 2.0, margin: float = 0.05):
        self.current, self.other = start, other
        self.warm, self.probe, self.base_interval, self.max_interval = warm, probe, interval, max_interval
        self.jump, self.margin = jump, margin
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
    def resume(cls, state: dict[str, int], **kwargs: float) -> ThreadTuner:
        """A tuner that continues from an earlier loop's state, so repeated short generations do not
        each pay for a probe. It always starts on the fewer threads (never the slow case): when more
        won last time they are probed right after the warm-up (a few slower steps if they still win,
        one collapsed step if the machine got busy meanwhile); when fewer won, the probe back-off
        carries on where it was."""
        few, many = sorted((state["current"], state["other"]))
        tuner = cls(few, many, **kwargs)  # type: ignore[arg-type]
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
            self.trial = []

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
        else:
            self.interval = min(self.max_interval, max(self.base_interval, 2 * self.interval))
        self.trial = None
        self.since_probe = 0
