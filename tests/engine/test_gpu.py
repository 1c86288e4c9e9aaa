"""CUDA checks (the scale-out issue's GPU test matrix). Marked `gpu`; they skip cleanly without a CUDA device.

Run them where a GPU is lent: `bash scripts/test.sh tests/engine/test_gpu.py -m gpu`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.train.loop import train

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")]


def _losses(events) -> list[float]:
    return [e.metrics["loss"] for e in events if e.type == "step"]


def test_one_step_loss_and_gradients_match_the_cpu_in_fp32(tmp_path):
    from desktop_app.engine.data.batches import WindowBatchSource
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.objectives.causal_lm import mean_loss

    dataset = make_dataset(tmp_path / "ds")
    spec = tiny_config(dataset).model_spec()
    batch, _ = WindowBatchSource(TokenStore(dataset), seed=0).take(8)
    grads, losses = [], []
    for device in ("cpu", "cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = build_model(spec, seed=0).to(device).train()
        x = batch.to(device)
        loss = mean_loss(model, x[:, :-1], x[:, 1:])
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad.detach().cpu() for n, p in model.named_parameters()})
    assert abs(losses[0] - losses[1]) < 1e-5
    assert max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0]) < 1e-4


def test_a_thousand_steps_are_stable_and_learn(tmp_path):
    config = tiny_config(make_dataset(tmp_path / "ds", n_docs=200), steps=1000, device="cuda", save_every=500,
                         log_every=10)
    events = list(train(config, tmp_path / "run"))
    losses = _losses(events)
    assert events[-1].reason == "completed" and all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5


def test_bf16_autocast_on_cuda_trains_and_resumes(tmp_path):
    config = tiny_config(make_dataset(tmp_path / "ds"), steps=20, device="cuda", precision="bf16", save_every=10)
    events = list(train(config, tmp_path / "run"))
    assert any("bf16" in e.message for e in events if e.type == "log")
    assert events[-1].reason == "completed" and all(math.isfinite(v) for v in _losses(events))
    more = list(train(config.replace(train={**config.train, "steps": 30}), tmp_path / "run", resume=True,
                      accept_config_change=True))
    assert more[-1].reason == "completed" and next(e.step for e in more if e.type == "step") == 21


def test_qlora_4bit_with_paged_adamw_on_cuda(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "finetune"))
    from ft_helpers import ft_config, make_base, repeat_chats, write_jsonl

    base = make_base(tmp_path / "base", "llama", layers=2)
    data = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(32))
    config = ft_config(base, [data], adapter={"kind": "qlora", "rank": 4}, steps=6, batch_size=4, device="cuda")
    events = list(train(config, tmp_path / "run"))
    assert any("paged 8-bit AdamW" in e.message for e in events if e.type == "log")
    assert events[-1].reason == "completed" and all(math.isfinite(v) for v in _losses(events))


def test_whole_flow_on_cuda_prepare_train_resume_generate_export(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    py = [sys.executable, "-m", "desktop_app"]

    def cli(*args: str) -> str:
        proc = subprocess.run([*py, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    cli("prepare", str(ROOT / "resources" / "sample_corpus"), "--out", str(tmp_path / "ds"), "--vocab-size", "1024",
        "--context", "128")
    cli("train", "--dataset", str(tmp_path / "ds"), "--preset", "tiny", "--steps", "40", "--device", "cuda",
        "--save-every", "20", "--out", str(tmp_path / "run"))
    cli("train", "--resume", str(tmp_path / "run"))
    text = cli("generate", str(tmp_path / "run"), "--prompt", "Once upon a time", "--max-new-tokens", "16")
    assert text.strip()
    cli("export", str(tmp_path / "run"), "--format", "hf", "--out", str(tmp_path / "export"))
    assert (tmp_path / "export" / "config.json").exists()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_ddp_over_nccl_equals_one_gpu(tmp_path):
    config = tiny_config(make_dataset(tmp_path / "ds"), steps=6, device="cuda")
    one = _losses(list(train(config, tmp_path / "one")))
    config.replace(distributed={"strategy": "ddp"}).save(tmp_path / "run.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "desktop_app",
           "train", "--config", str(tmp_path / "run.json"), "--out", str(tmp_path / "two"), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    two = [json.loads(line)["loss"] for line in proc.stdout.splitlines() if '"type": "step"' in line]
    assert len(two) == len(one) and all(abs(a - b) < 1e-4 for a, b in zip(one, two, strict=True))
