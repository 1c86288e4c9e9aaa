"""The training loop: learning, exact resume, accumulation, controls, failure handling."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from train_helpers import PoisonedObjective, final_weights, make_dataset, metrics_losses, step_losses, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.engine.objectives.causal_lm import CausalLMObjective
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.loop import train
from desktop_app.engine.train.optim import lr_at


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


def _weights_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_tiny_model_overfits_tiny_corpus(dataset, tmp_path):
    # 8 template sentences: a 1-layer model must get well below the ~5.7 nats of a uniform guess.
    config = tiny_config(dataset, steps=120, lr=1e-2, warmup_steps=5, eval_every=60, sample_tokens=12)
    events = list(train(config, tmp_path / "run"))
    losses = step_losses(events)
    assert events[-1].type == "finished" and events[-1].reason == "completed"
    assert losses[1] > 5.0
    assert min(losses[s] for s in range(110, 121)) < 1.5, losses[120]
    evals = [e for e in events if e.type == "eval"]
    assert evals[-1].metrics["val_loss"] < 1.8
    assert evals[-1].metrics["val_bpb"] > 0 and math.isclose(evals[-1].metrics["val_ppl"],
                                                              math.exp(evals[-1].metrics["val_loss"]))
    samples = [e for e in events if e.type == "sample"]
    assert samples and isinstance(samples[-1].text, str)
    recorded = read_metrics(tmp_path / "run")
    assert [r["step"] for r in recorded if r["type"] == "step"] == list(range(1, 121))
    assert recorded[-1]["type"] == "finished"
    step = next(r for r in recorded if r["type"] == "step")
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "elapsed_s", "eta_s", "progress"} <= set(step)


@pytest.mark.parametrize("precision, extra", [
    ("fp32", {}),
    ("bf16", {}),
    # evaluation + sampling between steps, accumulation, sparse logging: none may disturb the RNG or data order
    ("fp32", {"eval_every": 4, "sample_tokens": 4, "micro_batch_size": 4, "log_every": 2}),
])
def test_exact_resume_in_process_after_abandoned_steps(dataset, tmp_path, precision, extra):
    # dropout > 0: resume must also restore the dropout RNG to be bit-identical. bf16: CPU autocast.
    config = tiny_config(dataset, steps=12, save_every=6, model={"dropout": 0.1}, precision=precision, **extra)
    ref = list(train(config, tmp_path / "ref"))
    assert ref[-1].reason == "completed"

    run_dir = tmp_path / "run"
    gen = train(config, run_dir)
    for event in gen:  # run past the step-6 checkpoint, then vanish like a crash
        if event.type == "step" and event.step >= 9:
            break
    gen.close()
    assert [rf.step_of(p) for p in rf.list_committed(run_dir)] == [6]
    assert max(metrics_losses(run_dir)) > 6  # steps after the checkpoint were recorded before the "crash"

    resumed = list(train(config, run_dir, resume=True))
    assert resumed[-1].reason == "completed"
    assert min(step_losses(resumed)) in (7, 8)
    assert metrics_losses(run_dir) == metrics_losses(tmp_path / "ref")  # bit-identical, history consistent
    assert _weights_equal(final_weights(run_dir), final_weights(tmp_path / "ref"))


def test_accumulation_4x4_equals_batch_16(dataset, tmp_path):
    # The gradient of 4 micro-batches x 4 accumulated must equal the gradient of one batch of 16.
    import contextlib
    from types import SimpleNamespace

    from desktop_app.engine.data.batches import WindowBatchSource
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.train.distributed import wrap
    from desktop_app.engine.train.loop import accumulate

    config = tiny_config(dataset)
    batch, _ = WindowBatchSource(TokenStore(dataset), seed=0).take(16)
    grads, losses = [], []
    for micro in (16, 4):
        model = build_model(config.model_spec(), seed=0)
        model.train()
        objective = CausalLMObjective()
        wrapped = wrap(model, model, objective.loss, None, torch.device("cpu"))  # one process: the loss as is
        parts = SimpleNamespace(objective=objective, wrapped=wrapped, scaler=None,
                                ctx=SimpleNamespace(device=torch.device("cpu"), autocast=contextlib.nullcontext))
        loss, _, tokens = accumulate(parts, batch, micro)
        losses.append(loss.item())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        assert tokens == 16 * 32
    assert abs(losses[0] - losses[1]) < 1e-5
    assert max((grads[0][n] - grads[1][n]).abs().max().item() for n in grads[0]) < 1e-5

    # ...and the loop gives the same losses. (Only the first steps: Adam divides by sqrt(v), which turns
    # 1e-9 rounding differences in near-zero gradient entries into visible ones after a few updates.)
    a = tiny_config(dataset, steps=2, batch_size=16, micro_batch_size=0)
    b = tiny_config(dataset, steps=2, batch_size=16, micro_batch_size=4)
    la = step_losses(list(train(a, tmp_path / "a")))
    lb = step_losses(list(train(b, tmp_path / "b")))
    assert all(abs(la[s] - lb[s]) < 1e-5 for s in la)


def test_nonfinite_loss_is_skipped_and_never_applied(dataset, tmp_path):
    config = tiny_config(dataset, steps=6, nonfinite_policy="skip")
    events = list(train(config, tmp_path / "run", objective=PoisonedObjective({3})))
    warnings = [e.message for e in events if e.type == "log" and "non-finite" in e.message]
    assert len(warnings) == 1 and "step 3" in warnings[0] and "epoch 0 position 16" in warnings[0]
    assert events[-1].reason == "completed" and events[-1].result["nonfinite_steps"] == 1
    assert all(math.isfinite(v.float().sum().item()) for v in final_weights(tmp_path / "run").values())
    assert sorted(step_losses(events)) == list(range(1, 7))


def test_nonfinite_rollback_reloads_lowers_lr_and_skips_batch(dataset, tmp_path):
    config = tiny_config(dataset, steps=8, save_every=3, nonfinite_policy="rollback", schedule="constant",
                         warmup_steps=0)
    # call 5 = step 5 (batch 8, no accumulation): after the step-3 checkpoint.
    events = list(train(config, tmp_path / "run", objective=PoisonedObjective({5})))
    msg = next(e.message for e in events if e.type == "log" and "rolled back" in e.message)
    assert "step 5" in msg and "step-00000003" in msg and "0.5x" in msg
    assert events[-1].reason == "completed"
    recorded = [r for r in read_metrics(tmp_path / "run") if r["type"] == "step"]
    assert [r["step"] for r in recorded] == list(range(1, 9))  # history rewound: no duplicate steps
    assert recorded[2]["lr"] == pytest.approx(3e-3) and recorded[-1]["lr"] == pytest.approx(1.5e-3)
    state = json.loads((rf.list_committed(tmp_path / "run")[-1] / "trainer_state.json").read_text())
    assert state["lr_scale"] == 0.5 and state["data"]["skipped"] == [[0, 32]]


def test_too_many_nonfinite_steps_stop_the_run_with_a_report(dataset, tmp_path):
    config = tiny_config(dataset, steps=10, max_nonfinite=3)
    events = list(train(config, tmp_path / "run", objective=PoisonedObjective(always=True)))
    final = events[-1]
    assert final.reason == "failed" and "3 non-finite steps" in final.message and "step 1 batch" in final.message


def test_out_of_memory_halves_micro_batch_keeping_the_batch(dataset, tmp_path):
    class OOMOnce(CausalLMObjective):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def loss(self, model, micro):
            self.sizes.append(len(micro))
            if len(micro) > 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB (simulated)")
            return super().loss(model, micro)

    obj = OOMOnce()
    config = tiny_config(dataset, steps=2, batch_size=8)
    events = list(train(config, tmp_path / "run", objective=obj))
    logs = [e.message for e in events if e.type == "log" and "out of memory" in e.message]
    assert len(logs) == 2 and "retrying with 4 x 2" in logs[0] and "retrying with 2 x 4" in logs[1]
    assert events[-1].reason == "completed"
    ref = list(train(tiny_config(dataset, steps=2, batch_size=8, micro_batch_size=2), tmp_path / "ref"))
    assert step_losses(events) == pytest.approx(step_losses(ref), abs=1e-6)


def test_stop_ends_within_one_step_and_saves(dataset, tmp_path):
    controls = Controls()
    events = []
    for event in train(tiny_config(dataset, steps=50), tmp_path / "run", controls):
        events.append(event)
        if event.type == "step" and event.step == 4:
            controls.stop.set()
    steps = [e.step for e in events if e.type == "step"]
    assert max(steps) == 4
    assert [e.type for e in events[-2:]] == ["checkpoint", "finished"]
    assert events[-1].reason == "stopped" and events[-1].step == 4
    rf.verify_checkpoint(rf.latest_checkpoint(tmp_path / "run"))


def test_save_now_and_pause(dataset, tmp_path):
    controls = Controls()
    events = []
    for event in train(tiny_config(dataset, steps=6), tmp_path / "run", controls):
        events.append(event)
        if event.type == "step" and event.step == 2:
            controls.save_now.set()
        if event.type == "step" and event.step == 4:
            controls.pause.set()
            threading.Timer(0.3, controls.pause.clear).start()
    saved = [e.step for e in events if e.type == "checkpoint"]
    assert saved == [2, 6]
    messages = [e.message for e in events if e.type == "log"]
    assert "paused at step 4" in messages and "resumed" in messages
    assert events[-1].reason == "completed"


def test_early_stopping(dataset, tmp_path):
    # lr 0: validation loss never improves after the first evaluation.
    config = tiny_config(dataset, steps=50, lr=0.0, eval_every=2, early_stopping_patience=2)
    events = list(train(config, tmp_path / "run"))
    assert events[-1].reason == "early_stopped" and events[-1].step == 6
    assert events[-2].type == "log" and "early stopping" in events[-2].message


def test_retention_keeps_last_k_plus_best_in_a_run(dataset, tmp_path):
    config = tiny_config(dataset, steps=12, save_every=2, eval_every=2, keep_last=2, lr=3e-2)
    events = list(train(config, tmp_path / "run"))
    evals = {e.step: e.metrics["val_loss"] for e in events if e.type == "eval"}
    best = min(evals, key=evals.get)
    kept = [rf.step_of(p) for p in rf.list_committed(tmp_path / "run")]
    assert kept[-2:] == [10, 12] and best in kept and len(kept) <= 3
    assert events[-1].result["best_checkpoint"].endswith(rf.checkpoint_name(best))


def test_resume_with_changed_config_is_refused_with_a_diff(dataset, tmp_path):
    config = tiny_config(dataset, steps=4)
    list(train(config, tmp_path / "run"))
    changed = config.replace(train={**config.train, "steps": 6, "lr": 1e-3})
    with pytest.raises(UserError) as info:
        list(train(changed, tmp_path / "run", resume=True))
    assert "train.lr: 0.003 -> 0.001" in str(info.value) and "train.steps: 4 -> 6" in str(info.value)
    events = list(train(changed, tmp_path / "run", resume=True, accept_config_change=True))
    assert events[-1].reason == "completed" and sorted(step_losses(events)) == [5, 6]
    other_model = changed.replace(model={**changed.model, "d_model": 64})
    with pytest.raises(UserError, match="model differs"):
        list(train(other_model, tmp_path / "run", resume=True, accept_config_change=True))


def test_new_run_refuses_a_folder_with_checkpoints(dataset, tmp_path):
    config = tiny_config(dataset, steps=2)
    list(train(config, tmp_path / "run"))
    with pytest.raises(UserError, match="already holds checkpoints"):
        list(train(config, tmp_path / "run"))


def test_corrupt_newest_checkpoint_falls_back_on_resume(dataset, tmp_path):
    config = tiny_config(dataset, steps=8, save_every=3)
    gen = train(config, tmp_path / "run")
    for event in gen:
        if event.type == "checkpoint" and event.step == 6:
            break
    gen.close()
    bad = tmp_path / "run" / "checkpoints" / "step-00000006" / "model.safetensors"
    data = bytearray(bad.read_bytes())
    data[-5] ^= 0x01
    bad.write_bytes(bytes(data))
    events = list(train(config, tmp_path / "run", resume=True))
    warning = next(e.message for e in events if e.type == "log" and e.level == "warning")
    assert str(bad) in warning and "falling back" in warning
    assert min(step_losses(events)) == 4 and events[-1].reason == "completed"
    ref = list(train(config, tmp_path / "ref"))
    assert metrics_losses(tmp_path / "run") == step_losses(ref)


def test_disk_full_during_training_fails_cleanly(dataset, tmp_path, monkeypatch):
    import errno

    calls = {"n": 0}
    real = ckpt._write_tensors

    def flaky(path, tensors, metadata=None):
        calls["n"] += 1
        if calls["n"] > 3:  # first checkpoint (model, optimizer, rng) fine, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, tensors, metadata)

    monkeypatch.setattr(ckpt, "_write_tensors", flaky)
    events = list(train(tiny_config(dataset, steps=6, save_every=2), tmp_path / "run"))
    final = events[-1]
    assert final.reason == "failed" and final.step == 4
    assert "disk is full" in final.message and "needs about" in final.message
    assert "step-00000002" in final.message  # the previous checkpoint is named as intact
    assert [rf.step_of(p) for p in rf.list_committed(tmp_path / "run")] == [2]
    rf.verify_checkpoint(rf.list_committed(tmp_path / "run")[0])


def test_model_too_small_for_dataset_is_refused(dataset, tmp_path):
    config = tiny_config(dataset, model={"vocab_size": 100})
    with pytest.raises(UserError, match="vocab_size 100 is smaller"):
        list(train(config, tmp_path / "run"))
    config = tiny_config(dataset, model={"context_length": 16})
    with pytest.raises(UserError, match="context_length 16 is shorter"):
        list(train(config, tmp_path / "run"))


def test_preset_is_adapted_to_the_dataset(dataset):
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.train.request import config_from_preset

    config, notes = config_from_preset(dataset, "tiny", steps=3)
    store = TokenStore(dataset)
    # the tokenizer's 300 tokens, rounded up to a multiple of 64 (fast GPU matmuls); the tokenizer keeps its size
    assert store.vocab_size == 300 and config.model_spec().vocab_size == 320
    assert config.model_spec().context_length == store.context_length
    assert any("vocab_size set to 320" in n and "300 tokens" in n and "multiple of 64" in n for n in notes)
    assert any("context_length" in n for n in notes)


def test_setup_logs_say_why_precision_and_threads(dataset, tmp_path):
    events = list(train(tiny_config(dataset, steps=1, threads=0, precision="auto"), tmp_path / "run",
                        interactive=True))
    logs = [e.message for e in events if e.type == "log"]
    assert any("precision fp32" in m and "bf16" in m for m in logs) or any("precision bf16" in m for m in logs)
    assert any("CPU thread" in m and ("window" in m or "configured" in m) for m in logs)


def test_schedule_reaches_the_loop(dataset, tmp_path):
    config = tiny_config(dataset, steps=6, warmup_steps=2, schedule="linear")
    events = list(train(config, tmp_path / "run"))
    spec = config.train_spec()
    for e in events:
        if e.type == "step":
            assert e.metrics["lr"] == pytest.approx(lr_at(e.step, spec))


def test_gradient_checkpointing_and_compile_options(dataset, tmp_path, monkeypatch):
    plain = step_losses(list(train(tiny_config(dataset, steps=3), tmp_path / "a")))
    events = list(train(tiny_config(dataset, steps=3, gradient_checkpointing=True), tmp_path / "b"))
    assert any("gradient checkpointing on" in e.message for e in events if e.type == "log")
    assert step_losses(events) == pytest.approx(plain, abs=1e-5)  # recomputation, same maths
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or model)  # compiling costs ~1 min
    events = list(train(tiny_config(dataset, steps=2, compile=True), tmp_path / "c"))
    assert compiled and events[-1].reason == "completed"


def test_denormal_flush_and_threads_are_restored_after_training(dataset, tmp_path):
    before = torch.get_num_threads()
    gen = train(tiny_config(dataset, steps=3, threads=1), tmp_path / "run")
    next(event for event in gen if event.type == "step")
    assert (torch.tensor([1e-40]) * 1.0).item() == 0.0  # flushed while training on CPU
    assert torch.get_num_threads() == 1
    list(gen)
    assert (torch.tensor([1e-40]) * 1.0).item() != 0.0  # process default again
    assert torch.get_num_threads() == before


def test_read_metrics_ignores_a_torn_last_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"type": "step", "step": 1, "loss": 2.0}\n{"type": "st', encoding="utf-8")
    assert read_metrics(tmp_path) == [{"type": "step", "step": 1, "loss": 2.0}]
    assert read_metrics(tmp_path / "missing") == []


def test_training_module_does_not_import_qt():
    code = ("import sys; import desktop_app.engine.train.loop, desktop_app.engine.train.checkpoints; "
            "assert not any(m.startswith(('PySide6', 'pyqtgraph')) for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_time_limited_run_reports_progress_by_the_clock_and_completes(tmp_path: Path) -> None:
    """A run with a time limit (the self-play demo's phases) shows progress and ETA by the clock, not by a step count
    it will never reach, and ends as completed, saved, at the step the limit found it."""
    dataset = make_dataset(tmp_path / "ds")
    config = tiny_config(dataset, steps=100_000, time_budget_s=1.5, schedule="cosine", min_lr_ratio=0.0,
                         warmup_steps=0)
    events = list(train(config, tmp_path / "run"))
    finished = events[-1]
    assert finished.reason == "completed" and 0 < finished.step < 100_000, finished
    assert "time limit" in finished.message
    steps = [e for e in events if e.type == "step"]
    assert steps[-1].metrics["progress"] > 0.5 and steps[-1].eta_s < 1.5  # by the clock: most of the way there
    assert steps[0].metrics["progress"] >= steps[0].step / 100_000
    lrs = [e.metrics["lr"] for e in steps]  # the cosine decays over the 1.5 s, not the 100,000 steps
    assert lrs[-1] < 0.3 * lrs[0] and all(a >= b for a, b in itertools.pairwise(lrs))
    assert rf.list_committed(tmp_path / "run") and rf.step_of(rf.list_committed(tmp_path / "run")[-1]) == finished.step


def test_a_slow_first_step_does_not_spend_a_time_limited_decay(tmp_path, monkeypatch):
    """The first step holds the one-off costs (compilation and graph capture on a GPU: 147 s of a 4-minute self-play
    run on an H100); a time-limited run's decay starts after it. A first step that takes half the limit leaves the
    second at nearly the full learning rate, and the run still anneals to its floor by the end, and completes."""
    real_clip, calls = torch.nn.utils.clip_grad_norm_, []

    def slow_first_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(1.5)
        return real_clip(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", slow_first_step)
    dataset = make_dataset(tmp_path / "ds")
    config = tiny_config(dataset, steps=100_000, time_budget_s=3.0, schedule="cosine", min_lr_ratio=0.0,
                         warmup_steps=0, lr=1e-3)
    events = list(train(config, tmp_path / "run"))
    assert events[-1].reason == "completed", events[-1]
    lrs = [e.metrics["lr"] for e in events if e.type == "step"]
    assert len(lrs) > 3
    assert lrs[0] == pytest.approx(1e-3) and lrs[1] > 0.6e-3  # by the clock alone the second step would be < 0.5e-3
    assert lrs[-1] < 0.3e-3 and all(a >= b for a, b in itertools.pairwise(lrs))
    saved = json.loads(next((tmp_path / "run" / "checkpoints").glob("step-*/trainer_state.json")).read_text())
    assert 1.5 <= saved["first_step_s"] < 3.0  # kept for a resume: the decay goes on from where it was


# --- the pace figures: MFU, ETA, the window's progress (issue 36) -----------------------------------------------

def test_mfu_of_a_tiny_cpu_run_is_a_share_of_the_peak(dataset, tmp_path):
    events = list(train(tiny_config(dataset, steps=4, threads=0), tmp_path / "run"))
    mfus = [e.metrics["mfu"] for e in events if e.type == "step"]
    assert len(mfus) == 4 and all(0.0 < m < 1.0 for m in mfus), mfus


def _sft_per_token_flops(config, run_dir: Path, monkeypatch) -> float:
    """Training FLOPs per token a run's first step reports: its MFU times the (fixed) peak over its tokens/s."""
    from desktop_app.engine.train import build

    monkeypatch.setattr(build, "measure_matmul_peak", lambda *a, **k: 1e12)
    step = next(e for e in train(config, run_dir) if e.type == "step")
    return step.metrics["mfu"] * 1e12 / step.metrics["tokens_per_s"]


def test_lora_mfu_counts_no_weight_gradients_of_the_frozen_base(tmp_path, monkeypatch):
    """A LoRA run's MFU counts forward and input gradients of the frozen weights (4 FLOPs per weight and token), not
    their weight gradients (2 more); attention is counted at the length of the chats trained, not the base's context
    (the LoRA run on SmolLM2 counted 8,192 tokens of attention for 40-token chats: 3x its real FLOPs)."""
    from finetune.ft_helpers import ft_config, make_base, write_jsonl
    from transformers import AutoConfig

    from desktop_app.engine.model.architecture import spec_from_hf_config
    from desktop_app.engine.model.sizing import flops_per_token

    base = make_base(tmp_path / "base", context=128)
    chat = {"messages": [{"role": "user", "content": "repeat red cat"}, {"role": "assistant", "content": "red cat"}]}
    data = write_jsonl(tmp_path / "chats.jsonl", [chat] * 16)  # one length: every batch trains the same tokens
    full = _sft_per_token_flops(ft_config(base, [data], steps=1), tmp_path / "full", monkeypatch)
    lora = _sft_per_token_flops(ft_config(base, [data], steps=1, adapter={"kind": "lora", "rank": 4}),
                                tmp_path / "lora", monkeypatch)
    spec = spec_from_hf_config(AutoConfig.from_pretrained(base))
    weight_gradients = flops_per_token(spec, 0, training=False)  # 2 FLOPs per matmul weight
    assert full - lora == pytest.approx(weight_gradients, rel=1e-6)
    length = (full - 3 * weight_gradients) / (12 * spec.n_layers * spec.d_model)  # the attention term's length
    assert 4 <= length < 32 < spec.context_length, length  # the chat's tokens, not the context's 128


def test_the_cpu_peak_of_several_threads_is_never_measured_below_one_threads(monkeypatch):
    """On a machine whose other programs keep a core busy, a 2-thread matmul runs slower than a 1-thread one: a peak
    measured then, low, made a later MFU read 1.0. The 1-thread figure bounds it, and the threads are set back."""
    from desktop_app.engine import devices

    measured = {1: 100e9, 2: 20e9}  # FLOP/s by thread count, as a busy 2-core machine measured them
    monkeypatch.setattr(devices, "_PEAK_CACHE", {})
    monkeypatch.setattr(devices, "_time_matmuls", lambda *a: measured[torch.get_num_threads()])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert devices.measure_matmul_peak(torch.device("cpu")) == 100e9
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert devices.measure_matmul_peak(torch.device("cpu")) == 100e9
    finally:
        torch.set_num_threads(before)


def test_the_eta_waits_for_a_few_steps_and_ignores_a_slow_one():
    from desktop_app.engine.train.figures import ETA_AFTER_STEPS, StepClock

    clock = StepClock()
    for _ in range(ETA_AFTER_STEPS - 1):
        clock.step_done(5.0)  # the first steps: compilation, allocation
        assert clock.eta(100) == 0.0  # not known yet
    for _ in range(10):
        clock.step_done(1.0)
    assert clock.eta(100) == pytest.approx(100.0)  # 1 s a step: the slow first ones do not count
    clock.step_done(30.0)  # one step that waited for a busy machine
    assert clock.eta(99) == pytest.approx(99.0)  # no jump
    clock.add_between(13.0)  # an evaluation: spread over the steps done
    assert clock.eta(99) == pytest.approx(99 * (1.0 + 13.0 / 13))
    assert clock.eta(0) == 0.0


def test_a_run_reports_no_eta_before_a_few_steps_then_a_steady_one(dataset, tmp_path):
    from desktop_app.engine.train.figures import ETA_AFTER_STEPS

    steps = [e for e in train(tiny_config(dataset, steps=8), tmp_path / "run") if e.type == "step"]
    assert [s.eta_s for s in steps[:ETA_AFTER_STEPS - 1]] == [0.0] * (ETA_AFTER_STEPS - 1)
    assert all(s.eta_s > 0 for s in steps[ETA_AFTER_STEPS - 1:-1]) and steps[-1].eta_s == 0.0


def test_a_window_sees_the_setup_and_the_first_step_coming(dataset, tmp_path):
    """interactive (the window): the setup's phases come as Progress before Started, and a Progress says which step
    runs before the first one is done; the CLI's run (not interactive) starts with Started and has none of them."""
    events = list(train(tiny_config(dataset, steps=2), tmp_path / "a", interactive=True))
    started = next(i for i, e in enumerate(events) if e.type == "start")
    setup_phases = [e.message for e in events[:started]]
    assert setup_phases and all(e.type == "progress" and e.stage == "setup" for e in events[:started])
    assert "building the model and preparing the data" in setup_phases
    first_step = next(i for i, e in enumerate(events) if e.type == "step")
    assert events[first_step - 1].type == "progress" and events[first_step - 1].message == "step 1 of 2 running"
    plain = list(train(tiny_config(dataset, steps=2), tmp_path / "b"))
    assert plain[0].type == "start" and not any(e.type == "progress" for e in plain)


def test_the_samples_at_evaluation_take_their_settings_from_the_run_config(dataset, tmp_path):
    """Sampling at each evaluation follows TrainSpec's sample_temperature and sample_top_k (0.8 and 50 by default);
    temperature 0 samples greedily: the text is the trained model's own greedy continuation."""
    import torch

    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import TrainSpec

    assert (TrainSpec().sample_temperature, TrainSpec().sample_top_k) == (0.8, 50)
    config = tiny_config(dataset, steps=4, eval_every=4, save_every=4, sample_tokens=8, sample_temperature=0.0)
    events = list(train(config, tmp_path / "greedy"))
    sample = [e.text for e in events if e.type == "sample"][-1]
    loaded = load_model(tmp_path / "greedy", device="cpu")
    eos = loaded.tokenizer.eos_token_id
    start = torch.tensor([[eos if eos is not None else 0]])
    greedy = loaded.model.generate(input_ids=start, attention_mask=torch.ones_like(start), max_new_tokens=8,
                                   do_sample=False, pad_token_id=eos or 0, eos_token_id=eos)
    assert sample == loaded.tokenizer.decode(greedy[0, 1:].tolist(), skip_special_tokens=True)
