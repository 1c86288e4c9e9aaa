"""GRPO with reward functions: learns what its reward asks for, resumes exactly, refuses bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.data.prompt_files import load_prompts
from desktop_app.engine.errors import UserError
from desktop_app.engine.objectives.grpo import GRPOObjective
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.train.loop import train


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo")
    dataset = make_dataset(root / "ds", context=64)
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in
                               ["the cat", "a dog", "birds", "the sun", "we read", "rain"]))
    reward = root / "reward.py"
    reward.write_text("def reward(prompt, completion):\n"
                      "    return completion.count('e') / max(1, len(completion))\n")
    return root, dataset, prompts, reward


def _options(prompts: Path, reward: Path) -> dict:
    return {"prompts": [str(prompts)], "group_size": 8, "prompts_per_step": 4, "max_new_tokens": 12,
            "weights": {}, "reward_file": str(reward), "eval_prompts": 6}


def test_grpo_raises_the_reward_it_is_given(setup) -> None:
    root, dataset, prompts, reward = setup
    config = tiny_config(dataset, steps=40, batch_size=16, lr=3e-2, warmup_steps=1, log_every=1)
    events = list(train(config, root / "learn", objective=GRPOObjective(_options(prompts, reward))))
    assert events[-1].reason == "completed"
    steps = [m for m in read_metrics(root / "learn") if m.get("type") == "step"]
    rewards = [m["reward"] for m in steps]
    assert len(rewards) == 40 and "reward/user" in steps[-1]
    first, last = sum(rewards[:8]) / 8, sum(rewards[-8:]) / 8
    print(f"GRPO mean reward, first 8 steps {first:.3f}, last 8 steps {last:.3f}")
    assert last > first + 0.03 and last > 3 * first, (first, last)


def test_grpo_resume_is_exact(setup) -> None:
    root, dataset, prompts, reward = setup
    config = tiny_config(dataset, steps=6, batch_size=16, lr=1e-2, save_every=3)
    list(train(config, root / "full", objective=GRPOObjective(_options(prompts, reward))))
    part = tiny_config(dataset, steps=6, batch_size=16, lr=1e-2, save_every=3)
    from desktop_app.engine.events import Controls

    controls = Controls()
    for event in train(part, root / "half", controls, objective=GRPOObjective(_options(prompts, reward))):
        if getattr(event, "step", 0) == 3 and event.type == "step":
            controls.stop.set()
    list(train(part, root / "half", resume=True, objective=GRPOObjective(_options(prompts, reward))))
    losses = [(m["step"], m["loss"], m["reward"]) for m in read_metrics(root / "full") if m.get("type") == "step"]
    resumed = [(m["step"], m["loss"], m["reward"]) for m in read_metrics(root / "half") if m.get("type") == "step"]
    assert resumed == losses


def test_bad_prompt_files_and_options_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(UserError, match="line 2"):
        load_prompts([str(bad)])
    missing = tmp_path / "none.jsonl"
    with pytest.raises(UserError, match="does not exist"):
        load_prompts([str(missing)])
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"answer": "x"}\n')
    with pytest.raises(UserError, match="prompt"):
        load_prompts([str(empty)])
    with pytest.raises(UserError, match="group_size"):
        GRPOObjective({"group_size": 1})
    with pytest.raises(UserError, match="unknown GRPO option"):
        GRPOObjective({"groupsize": 4})
    with pytest.raises(UserError, match="unknown reward"):
        GRPOObjective({"weights": {"vibes": 1.0}})


def test_the_window_and_the_method_judge_prompt_files_alike(tmp_path: Path) -> None:
    from desktop_app.engine.data.prompt_files import describe_prompt_file

    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    answered = tmp_path / "answered.jsonl"
    answered.write_text('{"prompt": "a", "answer": "1"}\n')
    assert describe_prompt_file(plain) == "prompts" and describe_prompt_file(answered) == "prompts with answers"
    assert [r["prompt"] for r in load_prompts([str(plain), str(answered)])] == ["a", "b", "a"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    for read in (describe_prompt_file, load_prompts):
        with pytest.raises(UserError, match=r"bad.jsonl line 2: .*\"prompt\""):
            read(str(bad))
