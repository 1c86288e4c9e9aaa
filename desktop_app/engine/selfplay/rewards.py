"""Rewards and advantages, as plain functions (unit-tested against hand-worked cases).

Absolute Zero: the solver earns 1 for a correct answer, 0 for a wrong one, -0.5 for a badly formatted
one and -1 for an unparseable one (task worlds decide those); the proposer earns the learnability of its
task, 1 - mean solve rate over N solver samples, and 0 when that rate is 0 or 1 (too hard or trivial).
Advantages are normalised per (role, task type) (TRR++); GRPO normalises per prompt group instead.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import BUILTIN_REWARDS
from desktop_app.engine.tasks.answers import answer_block


def learnability(solve_rate: float) -> float:
    """Proposer reward: 1 - solve rate, but 0 for tasks every sample solves or none does."""
    if solve_rate <= 0.0 or solve_rate >= 1.0:
        return 0.0
    return 1.0 - solve_rate


def normalise(values: Sequence[float], eps: float = 1e-6) -> list[float]:
    """(v - mean) / std within one group; a group with no spread gets zeros (nothing to learn from it)."""
    if not values:
        return []
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    std = math.sqrt(var)
    if std < eps:
        return [0.0] * len(values)
    return [(v - mean) / std for v in values]


def grouped_advantages(rewards: Sequence[float], groups: Sequence[object]) -> list[float]:
    """Normalise rewards within each group key (TRR++: key = (role, task type); GRPO: key = prompt)."""
    out = [0.0] * len(rewards)
    members: dict[object, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    for idx in members.values():
        for i, a in zip(idx, normalise([rewards[i] for i in idx]), strict=True):
            out[i] = a
    return out


# -- reward functions for GRPO / reward-driven self-play -------------------------------------------------

def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+|[^\w\s]", text.lower())


def distinct_n(text: str, n: int = 2) -> float:
    """Share of distinct n-grams among all n-grams of the text (1.0 = no repetition; 0 for empty text)."""
    toks = _tokens(text)
    grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition_penalty(text: str, n: int = 3) -> float:
    """-(share of repeated n-grams): 0 for text without repeats, towards -1 for a loop."""
    toks = _tokens(text)
    grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
    return -(1.0 - len(set(grams)) / len(grams)) if grams else 0.0


def length_reward(text: str, target: int) -> float:
    """1 at the target length in words, falling linearly to 0 at 0 or twice the target."""
    if target <= 0:
        return 0.0
    return max(0.0, 1.0 - abs(len(text.split()) - target) / target)


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def answer_match(completion: str, answer: str) -> float:
    """1 when the completion's answer equals the answer (whitespace/case-insensitive), or when both hold the same
    final number; else 0. The completion's answer is its last <answer> block (what chat prompts ask for) or,
    without one, its first line."""
    if not answer:
        return 0.0
    block = answer_block(completion)
    if block is not None:
        completion = block
    first = completion.strip().splitlines()[0].strip() if completion.strip() else ""
    if first.lower() == answer.strip().lower():
        return 1.0
    got, want = _NUMBER.findall(completion), _NUMBER.findall(answer)
    if got and want:
        try:
            return 1.0 if math.isclose(float(got[-1]), float(want[-1]), rel_tol=1e-9, abs_tol=1e-9) else 0.0
        except ValueError:
            return 0.0
    return 0.0


def format_reward(completion: str, pattern: str) -> float:
    """1 when the completion matches the user's regular expression (from its start), else 0."""
    return 1.0 if re.match(pattern, completion.strip(), re.S) else 0.0


@dataclass
class RewardMix:
    """Weighted sum of reward functions. `likelihood` is filled in by the objective (needs the reference)."""

    weights: dict[str, float] = field(default_factory=lambda: {"answer": 1.0})
    length_target: int = 32
    format_pattern: str = r".+"
    user: Callable[[str, str], float] | None = None

    def check(self) -> RewardMix:
        unknown = [k for k in self.weights if k not in (*BUILTIN_REWARDS, "user")]
        if unknown:
            raise UserError(f"unknown reward function(s) {', '.join(unknown)}; built-in ones: "
                            f"{', '.join(BUILTIN_REWARDS)}, and 'user' for your reward file")
        if self.weights.get("user") and self.user is None:
            raise UserError("a weight for 'user' needs a reward file (--reward-file FILE.py)")
        try:
            re.compile(self.format_pattern)
        except re.error as exc:
            raise UserError(f"format pattern is not a valid regular expression: {exc}") from None
        return self

    def parts(self, prompt: str, completion: str, answer: str = "", likelihood: float = 0.0) -> dict[str, float]:
        """Each weighted function's raw value (shown as its own curve)."""
        values: dict[str, float] = {}
        for name in self.weights:
            if name == "answer":
                values[name] = answer_match(completion, answer)
            elif name == "format":
                values[name] = format_reward(completion, self.format_pattern)
            elif name == "length":
                values[name] = length_reward(completion, self.length_target)
            elif name == "repetition":
                values[name] = repetition_penalty(completion)
            elif name == "distinct":
                values[name] = distinct_n(completion)
            elif name == "likelihood":
                values[name] = likelihood
            elif name == "user":
                values[name] = call_user_reward(self.user, prompt, completion)
        return values

    def total(self, parts: dict[str, float]) -> float:
        return sum(self.weights[name] * value for name, value in parts.items())


def load_user_reward(path: str | Path) -> Callable[[str, str], float]:
    """The user's `reward(prompt, completion) -> float` from their own Python file.

    This is the user's code, run as such in this process (like a plugin): the UI says so when it is picked.
    """
    file = Path(path)
    if not file.is_file():
        raise UserError(f"reward file {file} does not exist")
    spec = importlib.util.spec_from_file_location(f"azr_user_reward_{abs(hash(str(file.resolve())))}", file)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UserError(f"reward file {file.name} failed to load: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, "reward", None)
    if not callable(fn):
        raise UserError(f"reward file {file.name} must define a function reward(prompt, completion) -> float")
    return fn


def call_user_reward(fn: Callable[[str, str], float] | None, prompt: str, completion: str) -> float:
    if fn is None:
        return 0.0
    try:
        value = float(fn(prompt, completion))
    except Exception as exc:
        raise UserError(f"your reward function failed: {type(exc).__name__}: {exc}") from None
    if not math.isfinite(value):
        raise UserError(f"your reward function returned {value} (rewards must be finite numbers)")
    return value
