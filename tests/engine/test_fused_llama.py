"""fused_llama: the training forward equals transformers' llama forward (loss and every gradient)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from desktop_app.engine.model import fused_llama
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.fused_loss import linear_cross_entropy
from desktop_app.engine.specs import ModelSpec

# Grouped-query attention (4 heads, 2 kv heads), untied embeddings, a larger init so activations vary.
SPEC = ModelSpec("llama", 96, 32, 2, 4, 2, 80, 24, init_std=0.1, tie_embeddings=False)


def _pair(spec: ModelSpec = SPEC) -> tuple[torch.nn.Module, torch.nn.Module]:
    a, b = build_model(spec, seed=0), build_model(spec, seed=0)
    a.train()
    b.train()
    return a, b


def _batch(spec: ModelSpec = SPEC, rows: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, spec.vocab_size, (rows, spec.context_length + 1), generator=torch.Generator().manual_seed(1))
    return ids[:, :-1], ids[:, 1:]


def _reference_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _assert_same_grads(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pb.grad, pa.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("tied", [False, True])
def test_loss_and_gradients_equal_transformers(tied):
    spec = SPEC.replace(tie_embeddings=tied)
    ref, ours = _pair(spec)
    x, y = _batch(spec)
    expected = _reference_loss(ref, x, y)
    expected.backward()
    loss = fused_llama.causal_lm_loss(ours, x, y)
    loss.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    _assert_same_grads(ref, ours)


def test_gradient_checkpointing_gives_the_same_gradients():
    ref, ours = _pair()
    ours.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert fused_llama._checkpointing(ours)
    x, y = _batch()
    _reference_loss(ref, x, y).backward()
    fused_llama.causal_lm_loss(ours, x, y).backward()
    _assert_same_grads(ref, ours)


def test_no_grad_evaluation_gives_the_loss_only():
    ref, ours = _pair()
    x, y = _batch()
    with torch.no_grad():
        expected = _reference_loss(ref, x, y)
        loss = fused_llama.causal_lm_loss(ours, x, y)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 5, 1000])
def test_chunked_linear_cross_entropy_equals_the_full_one(chunk):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(13, 8, generator=gen, requires_grad=True)
    weight = torch.randn(30, 8, generator=gen, requires_grad=True)
    targets = torch.randint(0, 30, (13,), generator=gen)
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    expected = F.cross_entropy(hidden @ weight.t(), targets)
    (expected * 3.0).backward()  # a non-unit upstream gradient (gradient accumulation scales the loss)
    loss = linear_cross_entropy(h2, w2, targets, chunk=chunk)
    (loss * 3.0).backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(h2.grad, hidden.grad)
    torch.testing.assert_close(w2.grad, weight.grad)


def test_rms_norm_and_rotary_match_autograd_of_the_plain_formulas():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 3, 8, generator=gen, requires_grad=True)
    w = torch.randn(8, generator=gen, requires_grad=True)
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    plain = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    plain.sum().backward()
    fused_llama.rms_norm(x2, w2, 1e-6).sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)
    torch.testing.assert_close(w2.grad, w.grad)

    cos, sin = torch.rand(5, 1, 4, generator=gen), torch.rand(5, 1, 4, generator=gen)
    q = torch.randn(2, 5, 3, 8, generator=gen, requires_grad=True)
    q2 = q.detach().clone().requires_grad_()
    c, s = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    expected = q * c + torch.cat([-q[..., 4:], q[..., :4]], -1) * s
    upstream = torch.randn(expected.shape, generator=gen)
    expected.backward(upstream)
    out = fused_llama.apply_rotary(q2, cos, sin)
    out.backward(upstream)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(q2.grad, q.grad)


def test_only_plain_fp32_llama_on_cpu_uses_it():
    cpu = torch.device("cpu")
    llama = build_model(SPEC, seed=0)
    assert fused_llama.usable(llama, cpu)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fused_llama.usable(llama, cpu)  # mixed precision keeps transformers' casting rules
    assert not fused_llama.usable(llama, torch.device("cuda"))
    gpt2 = build_model(ModelSpec("gpt2", 96, 32, 2, 4, 4, 64, 24), seed=0)
    assert not fused_llama.usable(gpt2, cpu)

    class Wrapped(torch.nn.Linear):  # what a LoRA or quantisation wrapper looks like to the check
        pass

    layer = llama.model.layers[0].self_attn
    old = layer.q_proj
    layer.q_proj = Wrapped(old.in_features, old.out_features, bias=False)
    assert not fused_llama.usable(llama, cpu)
