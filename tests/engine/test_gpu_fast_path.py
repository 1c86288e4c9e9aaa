"""The CUDA fast path (issue 21): each kernel choice's numbers against transformers' eager model (loss and every
gradient within bf16 tolerance), packed rows through FlexAttention, the fused losses, the memory they save, the
fallback when compilation fails, and a whole run on the default path. Marked `gpu`; skipped without CUDA.

Run where a GPU is lent (docs/gpu.md, the training fast path):
`python -m pytest -m gpu tests/engine/test_gpu_fast_path.py`.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.fast_forward import block_causal_mask
from desktop_app.engine.model.fast_path import KernelRequest, choose_kernels
from desktop_app.engine.model.fused_loss import (
    liger_available,
    liger_cross_entropy,
    linear_cross_entropy,
    linear_token_logps,
)
from desktop_app.engine.model.training_forward import TrainingModel, next_token_logps, next_token_loss
from desktop_app.engine.specs import AdapterSpec, ModelSpec
from desktop_app.engine.train.loop import train

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")]

CUDA = torch.device("cuda")
LLAMA = ModelSpec("llama", 512, 128, 2, 4, 2, 256, 128, init_std=0.05, tie_embeddings=False)  # GQA, untied
GPT2 = ModelSpec("gpt2", 512, 128, 2, 4, 4, 512, 128, init_std=0.05)
MODES = ["compile", "liger", "eager"]


def _batch(vocab: int = 512, rows: int = 4, t: int = 128, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (rows, t + 1), generator=gen).to(CUDA)
    return ids[:, :-1], ids[:, 1:]


def _packed_positions() -> torch.Tensor:
    """Position ids of 4 packed rows of 128 tokens: examples of these lengths, each counting from 0."""
    rows = [[40, 88], [128], [5, 60, 63], [64, 64]]
    return torch.stack([torch.cat([torch.arange(n) for n in lengths]) for lengths in rows]).to(CUDA)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_close_in_bf16(ours: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], tol: float = 0.05) -> None:
    assert ours.keys() == ref.keys() and ours
    for name, g in ref.items():
        error = (ours[name] - g).norm() / g.norm().clamp(min=1e-12)
        assert error < tol, f"{name}: relative error {error:.3g}"


def _reference_step(model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor,
                    position_ids: torch.Tensor | None = None) -> tuple[float, dict[str, torch.Tensor]]:
    """transformers' eager forward under bf16 autocast, the softmax in fp32 (what the app ran before)."""
    model.zero_grad(set_to_none=True)
    kwargs = {} if position_ids is None else {"position_ids": position_ids,
                                              "attention_mask": block_causal_mask(position_ids)}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=ids, use_cache=False, **kwargs).logits
    loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def _fast_step(fast: TrainingModel, ids: torch.Tensor, targets: torch.Tensor,
               position_ids: torch.Tensor | None = None) -> tuple[float, dict[str, torch.Tensor]]:
    fast.model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = next_token_loss(fast, ids, targets, position_ids=position_ids)
    loss.backward()
    grads = _grads(fast.model)
    fast.model.zero_grad(set_to_none=True)
    return loss.item(), grads


def _skip_missing(mode: str) -> None:
    if mode == "liger" and not liger_available():
        pytest.skip("Liger Kernel is not installed (the optional gpu extra)")


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("mode", MODES)
def test_each_fast_path_matches_the_eager_model_in_bf16(mode, spec):
    _skip_missing(mode)
    model = build_model(spec, seed=0).to(CUDA).train()
    choice = choose_kernels(model, CUDA, KernelRequest(requested=mode, steps=1000))
    assert choice.name == mode, choice.reason
    ids, targets = _batch()
    ref_loss, ref_grads = _reference_step(model, ids, targets)
    fast = TrainingModel(model, choice.kernels)
    for _ in range(2):  # the second call runs the compiled graph from the cache
        loss, grads = _fast_step(fast, ids, targets)
        assert math.isclose(loss, ref_loss, rel_tol=1e-2), (loss, ref_loss)
        _assert_close_in_bf16(grads, ref_grads)


@pytest.mark.parametrize("mode", MODES)
def test_lora_on_the_fast_path_matches_peft_in_bf16(mode):
    _skip_missing(mode)
    from desktop_app.engine.finetune.adapters import apply_adapter

    model, _ = apply_adapter(build_model(LLAMA, seed=0), AdapterSpec(kind="lora", rank=8), seed=0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    model = model.to(CUDA).train()
    ids, targets = _batch()
    ref_loss, ref_grads = _reference_step(model, ids, targets)
    assert ref_grads and all("lora_" in n for n in ref_grads)
    choice = choose_kernels(model, CUDA, KernelRequest(requested=mode, steps=1000))
    loss, grads = _fast_step(TrainingModel(model, choice.kernels), ids, targets)
    assert math.isclose(loss, ref_loss, rel_tol=1e-2)
    _assert_close_in_bf16(grads, ref_grads)


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("mode", ["compile", "liger"])
def test_packed_rows_through_flex_attention_match_the_dense_mask(mode, spec):
    _skip_missing(mode)
    model = build_model(spec, seed=0).to(CUDA).train()
    choice = choose_kernels(model, CUDA, KernelRequest(requested=mode, steps=1000))
    assert choice.kernels.flex
    ids, targets = _batch()
    pos = _packed_positions()
    ref_loss, ref_grads = _reference_step(model, ids, targets, pos)
    loss, grads = _fast_step(TrainingModel(model, choice.kernels), ids, targets, pos)
    assert math.isclose(loss, ref_loss, rel_tol=1e-2)
    _assert_close_in_bf16(grads, ref_grads)


def test_packed_batches_of_other_layouts_do_not_recompile(monkeypatch):
    import torch._dynamo

    model = build_model(LLAMA, seed=0).to(CUDA).train()
    fast = TrainingModel(model, choose_kernels(model, CUDA, KernelRequest(requested="compile", steps=1000)).kernels)
    ids, targets = _batch()
    pos = _packed_positions()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        next_token_loss(fast, ids, targets, position_ids=pos).backward()
        monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
        # every step packs other examples: a new block mask, the same graph
        next_token_loss(fast, ids, targets, position_ids=pos.flip(0)).backward()
        one_each = torch.arange(128, device=CUDA).expand(4, 128).contiguous()
        next_token_loss(fast, ids, targets, position_ids=one_each).backward()


@pytest.mark.parametrize("kernel", ["eager", "compiled", "liger"])
def test_fused_cross_entropy_on_cuda(kernel):
    if kernel == "liger" and not liger_available():
        pytest.skip("Liger Kernel is not installed")
    gen = torch.Generator(device=CUDA).manual_seed(0)
    hidden = torch.randn(3000, 256, device=CUDA, generator=gen, requires_grad=True)
    weight = (0.05 * torch.randn(32000, 256, device=CUDA, generator=gen)).requires_grad_()
    targets = torch.randint(0, 32000, (3000,), device=CUDA, generator=gen)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        expected = F.cross_entropy((hidden @ weight.t()).float(), targets)
    expected.backward()
    ref = (hidden.grad.clone(), weight.grad.clone())
    hidden.grad = weight.grad = None
    with torch.autocast("cuda", dtype=torch.bfloat16):
        if kernel == "liger":
            loss = liger_cross_entropy(hidden, weight, targets)
        else:
            loss = linear_cross_entropy(hidden, weight, targets, chunk=1024, chunk_kernel=kernel)
    loss.backward()
    assert loss.dtype == torch.float32 and math.isclose(loss.item(), expected.item(), rel_tol=1e-2)
    _assert_close_in_bf16({"h": hidden.grad, "w": weight.grad}, {"h": ref[0], "w": ref[1]})


def test_token_logps_on_cuda_match_log_softmax():
    model = build_model(LLAMA, seed=0).to(CUDA).train()
    ids, targets = _batch()
    mask = torch.rand(ids.shape, device=CUDA) > 0.5
    with torch.autocast("cuda", dtype=torch.bfloat16):
        log_probs = torch.log_softmax(model(input_ids=ids).logits[mask].float(), dim=-1)
        ours, entropy = next_token_logps(model, ids, targets, mask, with_entropy=True)
    expected = log_probs.gather(1, targets[mask][:, None])[:, 0]
    assert (ours - expected).abs().max() < 5e-2
    assert (entropy - -(log_probs.exp() * log_probs).sum(-1)).abs().max() < 5e-2


def test_the_fused_loss_never_holds_the_full_logits():
    vocab, rows = 32000, 16 * 1024
    hidden = torch.randn(rows, 768, device=CUDA, requires_grad=True)
    weight = (0.02 * torch.randn(vocab, 768, device=CUDA)).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), device=CUDA)

    def peak_of(fn) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fn()
        loss.backward()
        hidden.grad = weight.grad = None
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    full = peak_of(lambda: F.cross_entropy((hidden @ weight.t()).float(), targets))
    fused = peak_of(lambda: linear_cross_entropy(hidden, weight, targets))
    token = peak_of(lambda: -linear_token_logps(hidden, weight, targets)[0].mean())
    assert full > rows * vocab * 4  # at least the fp32 logits (2 GiB)
    assert fused < full / 3 and token < full / 3, (full, fused, token)


@pytest.mark.parametrize("auto_micro_batch", [False, True])
def test_a_failed_compilation_falls_back_to_eager_and_the_run_completes(tmp_path, monkeypatch, auto_micro_batch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # restored afterwards (the run sets it)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    dataset = make_dataset(tmp_path / "ds")

    def failing_compile(module, *args, **kwargs):
        def run(*a, **k):
            raise RuntimeError("BackendCompilerFailed: simulated")
        return run

    monkeypatch.setattr(torch, "compile", failing_compile)
    events = list(train(tiny_config(dataset, steps=4, device="cuda", precision="bf16", kernels="compile",
                                    auto_micro_batch=auto_micro_batch), tmp_path / "run"))
    logs = [e.message for e in events if e.type == "log"]
    failed = [m for m in logs if "the compile fast path failed" in m and "kernels eager" in m]
    assert len(failed) == 1  # the micro-batch search's trial step finds it first when there is one
    assert failed[0].startswith("auto micro-batch" if auto_micro_batch else "step 1:"), failed
    assert events[-1].reason == "completed"
    assert all(math.isfinite(e.metrics["loss"]) for e in events if e.type == "step")


def test_the_default_run_on_cuda_takes_the_compiled_fast_path(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    config = tiny_config(make_dataset(tmp_path / "ds", n_docs=200), steps=120, device="cuda", precision="auto",
                         log_every=10)
    events = list(train(config, tmp_path / "runs" / "r1"))
    logs = [e.message for e in events if e.type == "log"]
    assert any(m.startswith("kernels compile: torch.compile of the fused llama forward") for m in logs), logs
    assert any("compiled kernels cached in" in m for m in logs)
    assert not any("fast path failed" in m for m in logs), logs
    losses = [e.metrics["loss"] for e in events if e.type == "step"]
    assert events[-1].reason == "completed" and all(math.isfinite(v) for v in losses)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3


def test_packed_lora_sft_trains_on_cuda_and_matches_eager(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "finetune"))
    from ft_helpers import ft_config, make_base, repeat_chats, write_jsonl

    base = make_base(tmp_path / "base", "llama", layers=2, width=64)
    data = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(64))
    losses = {}
    for kernels in ("compile", "eager"):
        config = ft_config(base, [data], adapter={"kind": "lora", "rank": 8}, steps=4, batch_size=8, device="cuda",
                           precision="bf16", kernels=kernels, options={"packing": True, "max_len": 128})
        events = list(train(config, tmp_path / f"run-{kernels}"))
        logs = [e.message for e in events if e.type == "log"]
        assert any(m.startswith(f"kernels {kernels}:") for m in logs)
        assert events[-1].reason == "completed"
        losses[kernels] = [e.metrics["loss"] for e in events if e.type == "step"]
    assert all(math.isclose(a, b, rel_tol=3e-2) for a, b in zip(losses["compile"], losses["eager"], strict=True))


def test_explicit_fp32_on_this_gpu_is_reported_truthfully():
    from desktop_app.engine.devices import choose_precision

    choice = choose_precision(CUDA, "fp32")
    assert choice.name == "fp32" and choice.reason.startswith("fp32 as configured")
    if torch.cuda.is_bf16_supported():
        assert "computes bf16 natively" in choice.reason and "neither" not in choice.reason
