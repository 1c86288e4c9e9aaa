"""Learning-rate schedules, AdamW parameter groups, pickle-free optimizer state, device policies."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from desktop_app.engine.devices import choose_precision, choose_threads, is_out_of_memory, resolve_device
from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import TrainSpec
from desktop_app.engine.train.loop import next_micro_batch
from desktop_app.engine.train.optim import (
    build_optimizer,
    lr_at,
    optimizer_state_from_flat,
    optimizer_state_to_flat,
    param_groups,
)


def test_warmup_then_cosine_values():
    spec = TrainSpec(steps=110, lr=1e-3, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_at(1, spec) == pytest.approx(1e-4)
    assert lr_at(5, spec) == pytest.approx(5e-4)
    assert lr_at(10, spec) == pytest.approx(1e-3)
    assert lr_at(60, spec) == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way: midpoint of peak and floor
    assert lr_at(110, spec) == pytest.approx(1e-4)
    values = [lr_at(s, spec) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(values))


def test_linear_and_constant_schedules():
    lin = TrainSpec(steps=20, lr=2e-3, warmup_steps=0, schedule="linear", min_lr_ratio=0.0)
    assert lr_at(0, lin) == pytest.approx(2e-3)
    assert lr_at(10, lin) == pytest.approx(1e-3)
    assert lr_at(20, lin) == pytest.approx(0.0)
    const = TrainSpec(steps=20, lr=2e-3, warmup_steps=4, schedule="constant")
    assert lr_at(2, const) == pytest.approx(1e-3)
    assert [lr_at(s, const) for s in (4, 10, 20)] == [pytest.approx(2e-3)] * 3
    assert lr_at(10, const, scale=0.5) == pytest.approx(1e-3)  # rollback scale


def test_a_time_limit_that_comes_first_sets_the_decay():
    """A time-limited run decays over its time (the share spent) when that is further on than its steps: a run
    of 100,000 steps stopped by a 15-minute limit still anneals to its floor by the end."""
    spec = TrainSpec(steps=100_000, lr=1e-3, warmup_steps=10, schedule="cosine", min_lr_ratio=0.0)
    assert lr_at(50, spec, time_share=0.5) == pytest.approx(0.5e-3)
    assert lr_at(50, spec, time_share=1.0) == pytest.approx(0.0)
    assert lr_at(5, spec, time_share=0.9) == pytest.approx(0.5e-3)  # warm-up is by steps
    few = TrainSpec(steps=110, lr=1e-3, warmup_steps=10, schedule="linear", min_lr_ratio=0.0)
    assert lr_at(60, few, time_share=0.1) == pytest.approx(0.5e-3)  # the steps are further on: they decide
    const = TrainSpec(steps=100, lr=1e-3, warmup_steps=0, schedule="constant")
    assert lr_at(50, const, time_share=0.99) == pytest.approx(1e-3)


def test_no_weight_decay_on_norms_biases_embeddings():
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec

    model = build_model(ModelSpec("gpt2", 64, 32, 1, 2, 2, 64, 16), seed=0)
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert not any("ln_" in n or n.endswith(".bias") or "wte" in n or "wpe" in n for n in decay["names"])
    assert any("wte" in n for n in no_decay["names"]) and any("ln_" in n for n in no_decay["names"])
    assert any("c_attn.weight" in n for n in decay["names"])
    n_params = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == n_params


def test_optimizer_state_round_trips_bit_exact_without_pickle():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = build_optimizer(model, TrainSpec())
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    tensors, meta = optimizer_state_to_flat(opt)
    assert all(isinstance(v, torch.Tensor) for v in tensors.values())
    import json

    meta = json.loads(json.dumps(meta))  # must be plain JSON
    other = build_optimizer(model, TrainSpec())
    other.load_state_dict(optimizer_state_from_flat(tensors, meta))
    a, b = opt.state_dict(), other.state_dict()
    for idx in a["state"]:
        for key in a["state"][idx]:
            assert torch.equal(a["state"][idx][key], b["state"][idx][key])
    assert a["param_groups"][0]["betas"] == b["param_groups"][0]["betas"]


def test_oom_policy_halves_micro_batch_and_keeps_batch():
    assert next_micro_batch(16, 16) == 8
    assert next_micro_batch(8, 16) == 4
    assert next_micro_batch(12, 12) == 6
    assert next_micro_batch(3, 12) == 1
    assert next_micro_batch(1, 16) is None
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_out_of_memory(oom)
    assert is_out_of_memory(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_precision_on_cpu_is_fp32_with_a_reason():
    choice = choose_precision(torch.device("cpu"), "auto")
    if choice.name == "fp32":
        assert "bf16" in choice.reason and choice.autocast_dtype is None
    fp16 = choose_precision(torch.device("cpu"), "fp16")
    assert fp16.name == "fp32" and fp16.warning


def test_thread_policy():
    assert choose_threads(0, interactive=False, cores=4)[0] == 4
    n, why = choose_threads(0, interactive=True, cores=4)
    assert n == 4 and "window" in why  # the GUI thread is mostly idle: it needs no core of its own
    n, why = choose_threads(0, interactive=True, cores=16)
    assert n == 15 and "leaving 1 of 16 cores to the window" in why
    assert choose_threads(0, interactive=True, cores=1)[0] == 1
    assert choose_threads(2, interactive=True, cores=4)[0] == 2


def test_missing_device_is_a_user_error():
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="cuda"):
            resolve_device("cuda")
    assert resolve_device("cpu").type == "cpu"
    assert math.isfinite(1.0)
