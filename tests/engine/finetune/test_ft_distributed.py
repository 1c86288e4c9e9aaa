"""Fine-tuning on 2 processes (torchrun, gloo, CPU) equals 1 process: LoRA SFT with DDP (the loss stays
normalised by the whole step's loss-bearing tokens), and QLoRA with FSDP in the order that works (quantize and
freeze the base, inject adapters, then shard; the 4-bit weights stay whole on each process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ft_helpers import ft_config, make_base, repeat_chats, write_jsonl
from safetensors.torch import load_file

from desktop_app.engine import run_folder as rf
from desktop_app.engine.train.loop import train

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.skipif(os.name != "posix", reason="torchrun on POSIX"), pytest.mark.timeout(600)]


def _torchrun(config: Path, out: Path) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "desktop_app",
           "train", "--config", str(config), "--out", str(out), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize(("adapter", "strategy"), [("lora", "ddp"), ("qlora", "fsdp")])
def test_adapters_on_two_processes_equal_one(tmp_path, adapter, strategy):
    base = make_base(tmp_path / "base", "llama", layers=2)
    data = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(48))
    # FSDP trains with AdamW (8-bit AdamW cannot update sharded parameters): the one process does too, to compare
    config = ft_config(base, [data], adapter={"kind": adapter, "rank": 4}, steps=4, batch_size=4, optimizer="adamw")
    one = {e.step: e.metrics["loss"] for e in train(config, tmp_path / "one") if e.type == "step"}
    path = tmp_path / "run.json"
    config.replace(distributed={"strategy": strategy}).save(path)
    events = _torchrun(path, tmp_path / "two")
    two = {e["step"]: e["loss"] for e in events if e["type"] == "step"}
    assert two.keys() == one.keys() and all(abs(two[s] - one[s]) < 1e-5 for s in one), (two, one)
    if strategy == "fsdp":
        assert any("4-bit base weights stay whole" in e.get("message", "") for e in events)
    # the adapter each run saved: PEFT's files, the same tensors
    a = load_file(rf.list_committed(tmp_path / "one")[-1] / "adapter_model.safetensors")
    b = load_file(rf.list_committed(tmp_path / "two")[-1] / "adapter_model.safetensors")
    # (Adam divides by sqrt(v): where a gradient is ~0, a 1e-7 difference in it moves a weight by up to ~lr/100)
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
