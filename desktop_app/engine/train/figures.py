"""The figures a logged step reports about the run's pace: its time left (ETA) and its model FLOPs utilisation (MFU).

Nothing here touches the model, the data or a random generator: whatever these figures say, a resumed run replays
bit-exactly.

ETA: the median duration of the recent steps (training only: one slow step, or the first ones with their one-off
costs, do not move it) plus the time spent between steps so far (evaluations, checkpoints) spread over the steps
done. A session gives no estimate before its first few steps (0: not known yet).

MFU: the FLOPs of the tokens trained, over the time they took, over the device's measured matmul peak. A token's FLOPs
are counted at the length of the sequences actually trained (attention grows with it: a token of a 40-token chat on a
model whose context is 8,192 tokens does 200 times less attention work than one of a full window), and a frozen base
(adapters) computes no weight gradients: forward and input gradients only.
"""

from __future__ import annotations

import statistics
from collections import deque

from desktop_app.engine.events import Progress
from desktop_app.engine.model.sizing import flops_per_token
from desktop_app.engine.specs import ModelSpec, TrainSpec

ETA_AFTER_STEPS = 3  # steps of a session before it gives an ETA (the first one holds allocation, compilation)
ETA_WINDOW = 25  # recent steps whose median duration sets the pace


class StepClock:
    """Durations of a session's steps and the time spent between them, for an ETA that does not jump."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=ETA_WINDOW)
        self.steps = 0
        self.between_s = 0.0  # evaluations and checkpoints of this session

    def step_done(self, seconds: float) -> None:
        self.recent.append(max(0.0, seconds))
        self.steps += 1

    def add_between(self, seconds: float) -> None:
        """Time spent between steps (an evaluation, a checkpoint): spread over the steps in the ETA."""
        self.between_s += max(0.0, seconds)

    def pace(self) -> float | None:
        """Seconds per step from here on (None before the first few steps)."""
        if self.steps < ETA_AFTER_STEPS:
            return None
        return statistics.median(self.recent) + self.between_s / self.steps

    def eta(self, remaining_steps: int) -> float:
        """Seconds left for `remaining_steps` more steps; 0 while not known yet (or nothing is left)."""
        pace = self.pace()
        return 0.0 if pace is None or remaining_steps <= 0 else pace * remaining_steps


def mean_length(shapes: list[tuple[int, int]]) -> float:
    """The sequence length a step's attention work corresponds to, from its micro-batches' (rows, tokens): each
    piece's mean length, weighted by its tokens (0 when nothing is known)."""
    tokens = sum(t for rows, t in shapes if rows > 0)
    if tokens <= 0:
        return 0.0
    return sum(t * t / rows for rows, t in shapes if rows > 0) / tokens


def training_flops_per_token(spec: ModelSpec | None, seq_len: float, *, adapter: bool, fallback: float) -> float:
    """Training FLOPs of one token in sequences of `seq_len` tokens: forward, input gradients and, unless the weights
    are frozen (`adapter`), weight gradients. Without a spec (or a length), `fallback` (the setup's figure)."""
    if spec is None or seq_len <= 0:
        return fallback

    length = max(1, round(seq_len))
    full = float(flops_per_token(spec, length))
    if not adapter:
        return full
    return full - float(flops_per_token(spec, 0, training=False))  # no weight gradients: 2 FLOPs per frozen weight


def utilisation(flops: float, seconds: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the share of the device's peak the training's useful FLOPs reached (0 when unknown)."""
    if peak_flops <= 0 or seconds <= 0:
        return 0.0
    return flops / seconds / peak_flops


def step_progress(step: int, spec: TrainSpec, eta: float, elapsed_s: float) -> tuple[float, float]:
    """(share done, seconds left) at `step`: a time-limited run ends by its steps or its clock, whichever comes first
    (its time left is known from the start)."""
    progress = step / spec.steps
    budget = spec.time_budget_s
    if budget:
        progress = max(progress, min(1.0, elapsed_s / budget))
        left = max(0.0, budget - elapsed_s)
        eta = min(eta, left) if eta else left
    return progress, eta


def first_step(spec: TrainSpec, done: int) -> Progress:
    """The setup is done and a session's first step runs (on a large base on a CPU it takes a while)."""
    step = done + 1
    what = (f"step {step:,} running (time limit {spec.time_budget_s / 60:.3g} min)" if spec.time_budget_s
            else f"step {step:,} of {spec.steps:,} running")
    return Progress("training", done, spec.steps, "steps", what)
