"""Reward computation against hand-worked cases: learnability, penalties, TRR++ and GRPO normalisation,
built-in reward functions and the user's reward file."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.selfplay.rewards import (
    RewardMix,
    answer_match,
    distinct_n,
    grouped_advantages,
    learnability,
    length_reward,
    load_user_reward,
    normalise,
    repetition_penalty,
)
from desktop_app.engine.tasks.base import PENALTY_FORMAT, PENALTY_UNPARSEABLE, REWARD_CORRECT, REWARD_WRONG


@pytest.mark.parametrize("rate, expected", [(0.0, 0.0), (1.0, 0.0), (0.25, 0.75), (0.5, 0.5), (0.75, 0.25)])
def test_learnability(rate: float, expected: float) -> None:
    assert learnability(rate) == pytest.approx(expected)


def test_solver_rewards_are_the_papers() -> None:
    assert (REWARD_CORRECT, REWARD_WRONG, PENALTY_FORMAT, PENALTY_UNPARSEABLE) == (1.0, 0.0, -0.5, -1.0)


def test_normalise_by_hand() -> None:
    # mean 2, population std sqrt(2/3)
    std = math.sqrt(2 / 3)
    assert normalise([1.0, 2.0, 3.0]) == pytest.approx([-1 / std, 0.0, 1 / std])
    assert normalise([0.5, 0.5]) == [0.0, 0.0]  # no spread: nothing to learn
    assert normalise([]) == []


def test_trr_plus_plus_normalises_per_role_and_type() -> None:
    rewards = [1.0, 0.0, 1.0, 0.0, -1.0, 0.3]
    groups = [("solver", "deduction"), ("solver", "deduction"), ("solver", "abduction"),
              ("solver", "abduction"), ("proposer", "deduction"), ("proposer", "deduction")]
    adv = grouped_advantages(rewards, groups)
    assert adv == pytest.approx([1.0, -1.0, 1.0, -1.0, -1.0, 1.0])
    # the same reward in a different group is judged against that group only
    assert grouped_advantages([1.0, 1.0, 0.0], ["a", "b", "b"]) == pytest.approx([0.0, 1.0, -1.0])


def test_builtin_reward_functions() -> None:
    assert distinct_n("a b c d", 2) == 1.0 and distinct_n("a a a a", 2) == pytest.approx(1 / 3)
    assert distinct_n("", 2) == 0.0
    assert repetition_penalty("one two three four") == 0.0
    assert repetition_penalty("x y z x y z x y z") < -0.5
    assert length_reward("a b c d", 4) == 1.0 and length_reward("a b", 4) == 0.5 and length_reward("", 4) == 0.0
    assert answer_match("42\nbecause", "42") == 1.0
    assert answer_match("the answer is 41", "42") == 0.0
    assert answer_match("so it is 3.0", "3") == 1.0
    assert answer_match("anything", "") == 0.0


def test_reward_mix_weights_and_parts() -> None:
    mix = RewardMix(weights={"answer": 2.0, "length": 0.5}, length_target=2).check()
    parts = mix.parts("q", "7 apples", "7")
    assert parts == {"answer": 1.0, "length": 1.0}
    assert mix.total(parts) == pytest.approx(2.5)
    with pytest.raises(UserError, match="unknown reward"):
        RewardMix(weights={"vibes": 1.0}).check()
    with pytest.raises(UserError, match="reward file"):
        RewardMix(weights={"user": 1.0}).check()
    with pytest.raises(UserError, match="regular expression"):
        RewardMix(weights={"format": 1.0}, format_pattern="(").check()


def test_user_reward_file(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text("def reward(prompt, completion):\n    return completion.count('a') / max(1, len(completion))\n")
    mix = RewardMix(weights={"user": 1.0}, user=load_user_reward(good)).check()
    assert mix.parts("p", "aab", "")["user"] == pytest.approx(2 / 3)
    cases = {
        "missing.py": None,
        "no_fn.py": "x = 1\n",
        "broken.py": "def reward(:\n",
        "raises.py": "def reward(p, c):\n    raise ValueError('nope')\n",
        "nan.py": "def reward(p, c):\n    return float('nan')\n",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(UserError):
            fn = load_user_reward(path)
            RewardMix(weights={"user": 1.0}, user=fn).check().parts("p", "c")
