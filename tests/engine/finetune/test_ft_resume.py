"""Exact resume of every fine-tuning method: abandoned mid-run in process, and kill -9 of a real CLI process
(during a step or inside a checkpoint save), then resume: loss curve and final weights bit for bit."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from ft_helpers import ft_config, make_base, make_tokenizer, newest, preference_pairs, repeat_chats, write_jsonl
from safetensors.torch import load_file
from train_helpers import metrics_losses

from desktop_app.engine import run_folder as rf
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.loop import train

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    return {"base": make_base(root / "base", "llama", width=64),
            "old": make_base(root / "old", "llama", width=64, tokenizer=make_tokenizer(chat_tokens=False)),
            "chats": write_jsonl(root / "chats.jsonl", repeat_chats(40)),
            "pairs": write_jsonl(root / "pairs.jsonl", preference_pairs(40))}


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    folder = newest(run_dir)
    adapter = folder / "adapter_model.safetensors"
    return load_file(str(adapter if adapter.exists() else folder / "model.safetensors"))


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


CASES = {
    "sft-full": ("base", "chats", "sft", {}, {}),
    "sft-lora-dropout": ("base", "chats", "sft", {"kind": "lora", "dropout": 0.1}, {}),
    "sft-qlora-8bit-adamw": ("base", "chats", "sft", {"kind": "qlora", "rank": 64}, {}),
    "sft-lora-added-tokens": ("old", "chats", "sft", {"kind": "lora"}, {}),
    "sft-packed": ("base", "chats", "sft", {"kind": "lora"}, {"packing": True, "max_len": 64}),
    "dpo-full-precomputed": ("base", "pairs", "dpo", {}, {}),
    "dpo-full-live": ("base", "pairs", "dpo", {}, {"reference": "live"}),
    "dpo-qlora-added-tokens": ("old", "pairs", "dpo", {"kind": "qlora"}, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_abandoned_run_resumes_bit_exactly(world, tmp_path, case):
    base, data, objective, adapter, options = CASES[case]
    config = ft_config(world[base], [world[data]], objective=objective, adapter=adapter, options=options, steps=8,
                       save_every=4, eval_every=3, sample_tokens=3, micro_batch_size=2)
    ref = list(train(config, tmp_path / "ref"))
    assert ref[-1].reason == "completed"
    run = tmp_path / "run"
    gen = train(config, run)
    for event in gen:  # past the step-4 checkpoint, then vanish like a crash
        if event.type == "step" and event.step >= 6:
            break
    gen.close()
    assert [rf.step_of(p) for p in rf.list_committed(run)] == [4]
    resumed = list(train(config, run, resume=True))
    assert resumed[-1].reason == "completed"
    assert metrics_losses(run) == metrics_losses(tmp_path / "ref")
    assert same_weights(final_weights(run), final_weights(tmp_path / "ref"))


STEPS, SAVE_EVERY = 12, 3


def _start(args: list[str], pause: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), ckpt.PAUSE_ENV: str(pause)}
    return subprocess.Popen([sys.executable, "-m", "desktop_app", "train", *args, "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)


def _staging(run_dir: Path) -> list[Path]:
    parent = rf.checkpoints_dir(run_dir)
    return [p for p in parent.iterdir() if p.name.startswith(".tmp-")] if parent.exists() else []


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX kill -9")
@pytest.mark.parametrize("adapter", [{}, {"kind": "lora", "dropout": 0.1}], ids=["sft-full", "sft-lora"])
def test_kill_9_anywhere_then_resume_is_exact(world, tmp_path, adapter):
    config = ft_config(world["base"], [world["chats"]], adapter=adapter, steps=STEPS, save_every=SAVE_EVERY,
                       keep_last=2, eval_every=4, micro_batch_size=2)
    config_file = tmp_path / "run.json"
    config.save(config_file)
    assert list(train(config, tmp_path / "ref"))[-1].reason == "completed"
    ref_losses, ref_weights = metrics_losses(tmp_path / "ref"), final_weights(tmp_path / "ref")
    seed = int(os.environ.get("AZR_KILL_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    for trial, mode in enumerate(["save", "step"]):
        where = f"seed {seed}, trial {trial}, mode {mode}"
        run_dir = tmp_path / f"run{trial}"
        proc = _start(["--config", str(config_file), "--out", str(run_dir)], pause=0.3)
        target = rng.choice(range(SAVE_EVERY, STEPS, SAVE_EVERY)) if mode == "save" else rng.randint(1, STEPS - 2)
        try:
            for line in proc.stdout:
                event = json.loads(line)
                if event["type"] == "step" and event["step"] >= target:
                    if mode == "save":  # this step's save is running: wait until it is staging
                        deadline = time.time() + 10
                        while not _staging(run_dir) and time.time() < deadline:
                            time.sleep(0.005)
                        time.sleep(rng.uniform(0.0, 0.3))
                    else:
                        time.sleep(rng.uniform(0.0, 0.02))
                    break
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        if mode == "save":
            assert _staging(run_dir), f"the kill missed the save window ({where})"
        visible = [p for p in rf.checkpoints_dir(run_dir).iterdir() if not p.name.startswith(".")] \
            if rf.checkpoints_dir(run_dir).exists() else []
        for p in visible:  # no half checkpoint is ever visible
            rf.verify_checkpoint(p)
        if trial == 1:  # resume across processes, through the CLI
            proc = _start(["--resume", str(run_dir)])
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, where
            assert json.loads(out.splitlines()[-1])["reason"] == "completed", where
        else:
            assert list(train(config, run_dir, resume=True))[-1].reason == "completed", where
        assert not _staging(run_dir), where
        assert metrics_losses(run_dir) == ref_losses, where
        assert same_weights(final_weights(run_dir), ref_weights), where
