"""fused_loss: the chunked output projection + cross-entropy / log-probabilities equal the full-logits computations
(loss, entropy and every gradient), in fp32 and under bf16 autocast, for every chunking."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from desktop_app.engine.model.fused_loss import chunk_rows, linear_cross_entropy, linear_token_logps


def _inputs(rows: int = 13, d: int = 8, vocab: int = 30, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, d, generator=gen)
    weight = torch.randn(vocab, d, generator=gen)
    targets = torch.randint(0, vocab, (rows,), generator=gen)
    return hidden, weight, targets


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("chunk", [1, 5, 1000])
def test_cross_entropy_and_its_gradients_equal_the_full_logits_ones(chunk, reduction):
    hidden, weight, targets = _inputs()
    h1, w1, h2, w2 = _leaf(hidden), _leaf(weight), _leaf(hidden), _leaf(weight)
    expected = F.cross_entropy(h1 @ w1.t(), targets, reduction=reduction)
    (expected * 3.0).backward()  # a non-unit upstream gradient (accumulation scales each micro-batch's loss)
    loss = linear_cross_entropy(h2, w2, targets, reduction=reduction, chunk=chunk)
    (loss * 3.0).backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(h2.grad, h1.grad)
    torch.testing.assert_close(w2.grad, w1.grad)


def test_the_compiled_chunk_kernel_computes_the_same():
    # With Dynamo switched off, torch.compile returns the function itself: this checks the maths of the kernel the
    # GPU compiles (one logsumexp reduction and one pointwise gradient pass) against the eager chunk. The config's
    # own patch restores it afterwards (monkeypatching the alias left Dynamo broken for later tests).
    import torch._dynamo

    with torch._dynamo.config.patch(disable=True):
        hidden, weight, targets = _inputs(rows=37, vocab=50)
        h1, w1, h2, w2 = _leaf(hidden), _leaf(weight), _leaf(hidden), _leaf(weight)
        eager = linear_cross_entropy(h1, w1, targets, chunk=8)
        eager.backward()
        fused = linear_cross_entropy(h2, w2, targets, chunk=8, chunk_kernel="compiled")
        fused.backward()
    torch.testing.assert_close(fused, eager)
    torch.testing.assert_close(h2.grad, h1.grad)
    torch.testing.assert_close(w2.grad, w1.grad)


def test_under_bf16_autocast_it_matches_the_autocast_logits_path_within_bf16_tolerance():
    hidden, weight, targets = _inputs(rows=64, d=32, vocab=200)
    h1, w1, h2, w2 = _leaf(hidden), _leaf(weight), _leaf(hidden), _leaf(weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.cross_entropy((h1 @ w1.t()).float(), targets)  # the module path: bf16 matmul, fp32 softmax
        loss = linear_cross_entropy(h2, w2, targets, chunk=16)
    expected.backward()
    loss.backward()
    assert loss.dtype == torch.float32 and h2.grad.dtype == w2.grad.dtype == torch.float32
    torch.testing.assert_close(loss, expected, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(h2.grad, h1.grad, rtol=5e-2, atol=2e-3)
    torch.testing.assert_close(w2.grad, w1.grad, rtol=5e-2, atol=2e-3)


@pytest.mark.parametrize("chunk", [1, 6, 1000])
def test_token_logps_entropy_and_gradients_equal_log_softmax(chunk):
    hidden, weight, targets = _inputs(rows=17)
    h1, w1, h2, w2 = _leaf(hidden), _leaf(weight), _leaf(hidden), _leaf(weight)
    log_probs = torch.log_softmax(h1 @ w1.t(), dim=-1)
    expected = log_probs.gather(1, targets[:, None])[:, 0]
    expected_entropy = -(log_probs.exp() * log_probs).sum(-1)
    upstream = torch.linspace(-2.0, 3.0, 17)  # a vector gradient: DPO's sums, the RL ratios
    (expected * upstream).sum().backward()
    logps, entropy = linear_token_logps(h2, w2, targets, with_entropy=True, chunk=chunk)
    (logps * upstream).sum().backward()
    torch.testing.assert_close(logps, expected)
    torch.testing.assert_close(entropy, expected_entropy.detach())
    assert not entropy.requires_grad
    torch.testing.assert_close(h2.grad, h1.grad)
    torch.testing.assert_close(w2.grad, w1.grad)


def test_no_grad_and_empty_inputs():
    hidden, weight, targets = _inputs()
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets, chunk=4)
        logps, entropy = linear_token_logps(hidden, weight, targets)
    torch.testing.assert_close(loss, F.cross_entropy(hidden @ weight.t(), targets))
    assert entropy is None and logps.shape == (13,)
    h, w = _leaf(hidden[:0]), _leaf(weight)
    empty = linear_cross_entropy(h, w, targets[:0])
    empty.backward()
    assert empty.item() == 0.0 and w.grad is not None and not w.grad.any()
    lp, ent = linear_token_logps(_leaf(hidden[:0]), weight, targets[:0], with_entropy=True)
    assert lp.shape == ent.shape == (0,)


def test_bad_reduction_is_refused():
    hidden, weight, targets = _inputs()
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(hidden, weight, targets, reduction="none")
    with pytest.raises(ValueError, match="chunk_kernel"):
        linear_cross_entropy(hidden, weight, targets, chunk_kernel="triton")


def test_chunks_stay_within_their_memory_budget():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert chunk_rows(32000, cpu) * 32000 * 4 <= 64 << 20  # ~64 MB of fp32 logits on the CPU
    assert chunk_rows(32000, gpu) == 4194  # ~128M logits on a GPU: 256 MiB in bf16
    assert chunk_rows(10**9, cpu) == 1
