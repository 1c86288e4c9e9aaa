"""`train --method grpo|selfplay` from the CLI: a GRPO run with a reward file, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import make_dataset, tiny_config

import desktop_app.cli as cli
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.loop import train


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rlbase")
    dataset = make_dataset(root / "ds", context=64)
    list(train(tiny_config(dataset, steps=2), root / "base"))
    return root / "base"


@pytest.fixture
def run_cli(monkeypatch, capsys):
    monkeypatch.setattr(cli, "VERBS", {"train": cli.VERBS["train"]})

    def run(*argv):
        code = cli.main(["train", *map(str, argv)])
        return code, *capsys.readouterr()

    return run


def test_grpo_with_a_reward_file_from_the_cli(base: Path, tmp_path: Path, run_cli) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "the cat"}\n{"prompt": "a dog", "answer": "sat"}\n')
    reward = tmp_path / "r.py"
    reward.write_text("def reward(prompt, completion):\n    return float(len(completion) < 10)\n")
    code, out, err = run_cli("--method", "grpo", "--base", base, "--data", prompts, "--reward-file", reward,
                             "--steps", "2", "--out", tmp_path / "g", "--json", "--option", "group_size=2",
                             "--option", "max_new_tokens=4", "--option", 'weights={"length": 0.5}')
    assert code == 0, err
    assert json.loads(out.splitlines()[-1])["reason"] == "completed"
    config = RunConfig.load(tmp_path / "g" / "run.json")
    assert config.objective == "grpo" and config.method_options["reward_file"] == str(reward.resolve())
    steps = [m for m in read_metrics(tmp_path / "g") if m.get("type") == "step"]
    assert "reward/user" in steps[-1] and "reward/length" in steps[-1]


@pytest.mark.parametrize("argv, needle", [
    (["--method", "selfplay", "--data", "x.jsonl"], "no --data"),
    (["--method", "grpo"], "prompt files"),
    (["--method", "sft", "--data", "x.jsonl", "--world", "mini"], "--world goes with"),
    (["--method", "sft", "--data", "x.jsonl", "--tasks-from", "minimal"], "--tasks-from goes with"),
    (["--method", "selfplay", "--option", "wrld=mini"], "unknown option"),
    (["--method", "grpo", "--data", "x.jsonl", "--reward-file", "nope.py"], "does not exist"),
])
def test_bad_flags_are_one_line_errors(base: Path, tmp_path: Path, run_cli, argv, needle) -> None:
    (tmp_path / "x.jsonl").write_text('{"prompt": "hi"}\n')
    argv = [a if a != "x.jsonl" else str(tmp_path / "x.jsonl") for a in argv]
    code, _, err = run_cli("--base", base, "--out", tmp_path / "o", *argv)
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_selfplay_with_lora_uses_the_base_as_kl_reference(base: Path, tmp_path: Path, run_cli) -> None:
    code, _, err = run_cli(
        "--method", "selfplay", "--world", "mini", "--base", base, "--adapter", "lora", "--lr", "0.05",
        "--steps", "3", "--threads", "1", "--out", tmp_path / "sp", "--json", "--option", "kl_coef=0.1",
        "--option", "max_new_tokens=6", "--option", "heldout_per_type=2", "--option", "seed_tasks_per_type=2")
    assert code == 0, err
    steps = [m for m in read_metrics(tmp_path / "sp") if m.get("type") == "step"]
    # at first the policy is the base (LoRA's B starts at zero); then the adapter moves it away
    assert steps[0]["kl"] < 1e-6 and max(s["kl"] for s in steps[1:]) > steps[0]["kl"]
    assert list((tmp_path / "sp" / "checkpoints").glob("*/adapter_model.safetensors"))


def test_selfplay_from_the_minimal_seed_from_the_cli(base: Path, tmp_path: Path, run_cli) -> None:
    code, _, err = run_cli(
        "--method", "selfplay", "--world", "mini", "--tasks-from", "minimal", "--base", base, "--steps", "2",
        "--threads", "1", "--out", tmp_path / "sp", "--json", "--option", "max_new_tokens=6",
        "--option", "heldout_per_type=2")
    assert code == 0, err
    assert RunConfig.load(tmp_path / "sp" / "run.json").method_options["tasks_from"] == "minimal"
    state = json.loads(next((tmp_path / "sp" / "checkpoints").glob("*/trainer_state.json")).read_text())
    programs = {t["program"] for b in state["data"]["buffers"].values() for t in b["tasks"]}
    assert "f = lambda x: x" in programs and all("lambda" in p for p in programs)
    assert len(programs) <= 1 + 2 * 3 * 2  # the identity, then only what the proposer wrote (2 per type and step)
