"""The GPU fast path's pieces, run on the CPU: the fused forward (fast_forward.py) equals transformers' own forward
(hidden states, loss and every gradient) for llama, gpt2 and LoRA; packed rows stay apart; the objectives' losses
through a TrainingModel equal their CPU paths; and a failed compilation falls back to transformers' modules."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.fast_forward import (
    FastForward,
    block_causal_mask,
    document_block_mask,
    projection_kind,
    unsupported_reason,
)
from desktop_app.engine.model.training_forward import (
    EAGER,
    Kernels,
    TrainingModel,
    next_token_logps,
    next_token_loss,
    output_weight,
)
from desktop_app.engine.specs import AdapterSpec, ModelSpec

LLAMA = ModelSpec("llama", 96, 32, 2, 4, 2, 80, 24, init_std=0.1, tie_embeddings=False)  # GQA, untied
GPT2 = ModelSpec("gpt2", 96, 32, 2, 4, 4, 80, 24, init_std=0.1)  # tied
FUSED = Kernels("eager", fused_forward=True, loss="chunked", flex=False)  # the fused forward, uncompiled
PACKED = torch.tensor([[*range(10), *range(14)], [*range(24)], [*range(5), *range(7), *range(12)]])


def _batch(vocab: int = 96, rows: int = 3, t: int = 24, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (rows, t), generator=gen), torch.randint(0, vocab, (rows, t), generator=gen)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _assert_same_grads(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-5) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=atol, msg=name)


def _lora(model: torch.nn.Module, **adapter):
    from desktop_app.engine.finetune.adapters import apply_adapter

    peft_model, _ = apply_adapter(model, AdapterSpec(kind="lora", rank=4, **adapter), seed=0)
    for name, p in peft_model.named_parameters():  # LoRA's B starts at zero: give the adapters something to do
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(len(name)))
    return peft_model


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_fused_forward_hidden_states_equal_transformers(spec):
    model = build_model(spec, seed=0).train()
    ids, _ = _batch()
    expected = model.base_model(input_ids=ids, use_cache=False).last_hidden_state
    torch.testing.assert_close(FastForward(model)(ids), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_loss_and_every_gradient_equal_the_module_forward(spec):
    model = build_model(spec, seed=0).train()
    ids, targets = _batch()
    F.cross_entropy(model(input_ids=ids).logits.reshape(-1, spec.vocab_size), targets.reshape(-1)).backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    loss = next_token_loss(TrainingModel(model, FUSED), ids, targets)
    loss.backward()
    _assert_same_grads(_grads(model), expected)


def test_lora_layers_run_as_plain_matmuls_with_the_same_numbers():
    model = _lora(build_model(LLAMA, seed=0).train())
    assert unsupported_reason(model) is None
    q_proj = model.get_base_model().model.layers[0].self_attn.q_proj
    assert projection_kind(q_proj) == "lora"
    ids, targets = _batch()
    F.cross_entropy(model(input_ids=ids).logits.reshape(-1, 96), targets.reshape(-1)).backward()
    expected = _grads(model)
    assert all("lora_" in n for n in expected)  # the base is frozen
    model.zero_grad(set_to_none=True)
    next_token_loss(TrainingModel(model, FUSED), ids, targets).backward()
    _assert_same_grads(_grads(model), expected)
    # the adapters switched off (the RL methods' reference) give the base model's numbers
    base_hidden = FastForward(model)(ids)
    with model.disable_adapter(), torch.no_grad():
        off = FastForward(model)(ids)
        expected_off = model.get_base_model().model(input_ids=ids, use_cache=False).last_hidden_state
    torch.testing.assert_close(off, expected_off, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(off, base_hidden.detach())


def test_lora_on_gpt2_conv1d_layers():
    model = _lora(build_model(GPT2, seed=0).train())
    assert unsupported_reason(model) is None
    ids, targets = _batch()
    expected = model(input_ids=ids).logits
    hidden = FastForward(model)(ids)
    torch.testing.assert_close(hidden @ output_weight(model).t(), expected, rtol=1e-4, atol=1e-4)
    next_token_loss(TrainingModel(model, FUSED), ids, targets).backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if "lora_" in n)


def test_variants_it_does_not_cover_are_named():
    dora = _lora(build_model(LLAMA, seed=0), target_modules=["q_proj"])
    dora.get_base_model().model.layers[0].self_attn.q_proj.lora_variant["default"] = object()  # like DoRA
    assert "projection layers" in unsupported_reason(dora)
    from transformers import MistralConfig, MistralForCausalLM

    mistral = MistralForCausalLM(MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    assert "no fused forward for mistral" in unsupported_reason(mistral)
    with pytest.raises(ValueError, match="mistral"):
        FastForward(mistral)


def test_other_families_train_through_their_own_decoder_and_the_chunked_loss():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=4, num_key_value_heads=2)).train()
    ids, targets = _batch()
    F.cross_entropy(model(input_ids=ids).logits.reshape(-1, 96), targets.reshape(-1)).backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    next_token_loss(TrainingModel(model, EAGER), ids, targets).backward()
    _assert_same_grads(_grads(model), expected)


@pytest.mark.parametrize("spec", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_packed_rows_never_attend_across_examples(spec):
    model = build_model(spec, seed=0).train()
    ids, _ = _batch()
    expected = model.base_model(input_ids=ids, position_ids=PACKED, attention_mask=block_causal_mask(PACKED),
                                use_cache=False).last_hidden_state
    # the dense mask (CPU) and FlexAttention's block mask (what CUDA uses; no backward on the CPU) agree
    torch.testing.assert_close(TrainingModel(model, FUSED).hidden(ids, PACKED), expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        flex = FastForward(model)(ids, PACKED, block_mask=document_block_mask(PACKED))
    torch.testing.assert_close(flex, expected, rtol=1e-5, atol=1e-5)
    # the second example of row 0 computes as if it were alone
    alone = model.base_model(input_ids=ids[:1, 10:], use_cache=False).last_hidden_state
    torch.testing.assert_close(flex[:1, 10:], alone, rtol=1e-5, atol=1e-5)


def test_gradient_checkpointing_recomputes_to_the_same_gradients():
    model = build_model(LLAMA, seed=0).train()
    ids, targets = _batch()
    next_token_loss(TrainingModel(model, FUSED), ids, targets).backward()
    expected = _grads(model)
    model.zero_grad(set_to_none=True)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    next_token_loss(TrainingModel(model, FUSED), ids, targets).backward()
    _assert_same_grads(_grads(model), expected)


def test_token_logps_and_entropy_through_the_fast_path():
    model = build_model(LLAMA, seed=0).train()
    ids, targets = _batch()
    mask = torch.rand(ids.shape, generator=torch.Generator().manual_seed(3)) > 0.4
    log_probs = torch.log_softmax(model(input_ids=ids).logits[mask], dim=-1)
    expected = log_probs.gather(1, targets[mask][:, None])[:, 0]
    expected.sum().backward()
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    logps, entropy = next_token_logps(TrainingModel(model, FUSED), ids, targets, mask, with_entropy=True)
    logps.sum().backward()
    torch.testing.assert_close(logps, expected.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, -(log_probs.exp() * log_probs).sum(-1).detach(), rtol=1e-5, atol=1e-5)
    _assert_same_grads(_grads(model), grads)


def test_an_output_layer_with_its_own_maths_keeps_the_full_forward():
    model = build_model(LLAMA, seed=0).train()
    model.config.final_logit_softcapping = 30.0  # as gemma2 sets it: logits are not hidden @ W.T
    assert output_weight(model) is None
    ids, targets = _batch()
    loss = next_token_loss(TrainingModel(model, FUSED), ids, targets)
    expected = F.cross_entropy(model(input_ids=ids).logits.reshape(-1, 96), targets.reshape(-1))
    torch.testing.assert_close(loss, expected)


def test_the_objectives_through_a_training_model_equal_their_cpu_paths():
    from desktop_app.engine.objectives.dpo import sequence_logps
    from desktop_app.engine.objectives.sft import TokenBatch, masked_ce_sum
    from desktop_app.engine.selfplay.policy import Episode, completion_logps

    model = build_model(LLAMA, seed=0).train()
    fast = TrainingModel(model, FUSED)
    ids, _ = _batch()
    labels = torch.where(torch.rand(ids.shape, generator=torch.Generator().manual_seed(2)) > 0.5, ids, -100)
    for pos in (None, PACKED):
        batch = TokenBatch(ids, labels, pos, [24, 24, 24])
        (expected, n), (got, m) = masked_ce_sum(model, batch), masked_ce_sum(fast, batch)
        assert n == m and torch.allclose(got, expected, rtol=1e-5, atol=1e-5)
    plain = TokenBatch(ids, labels, None, [24, 24, 24])
    for a, b in zip(sequence_logps(model, plain), sequence_logps(fast, plain), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    episodes = [Episode([5, 6, 7], [8, 9], 1.0, "solve", "deduction"),
                Episode([5], [11, 12, 13, 14], -1.0, "solve", "deduction"),
                Episode([3, 4, 5, 6, 7, 8], [], 0.0, "propose", "induction")]
    (lp, ent), mask = completion_logps(model, episodes, with_entropy=True)
    (lp2, ent2), mask2 = completion_logps(fast, episodes, with_entropy=True)
    torch.testing.assert_close(mask2, mask)
    torch.testing.assert_close(lp2, lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent2, ent, rtol=1e-5, atol=1e-5)


def test_a_failed_fast_path_falls_back_to_transformers_modules():
    model = build_model(LLAMA, seed=0).train()
    fast = TrainingModel(model, Kernels("compile", fused_forward=True, loss="compiled", flex=True))

    def broken(*args, **kwargs):
        raise RuntimeError("inductor: a kernel failed to compile\nmore details")

    object.__setattr__(fast, "_run", broken)
    ids, targets = _batch()
    with pytest.raises(RuntimeError, match="failed to compile"):
        next_token_loss(fast, ids, targets)
    from desktop_app.engine.errors import UserError

    assert fast.fall_back(UserError("a bad setting")) == "" and fast.kernels.mode == "compile"  # the user's to fix
    message = fast.fall_back(RuntimeError("inductor: a kernel failed to compile\nmore details"))
    assert "compile fast path failed" in message and "more details" not in message and "eager" in message
    assert fast.kernels == EAGER
    expected = F.cross_entropy(model(input_ids=ids).logits.reshape(-1, 96), targets.reshape(-1))
    torch.testing.assert_close(next_token_loss(fast, ids, targets), expected)
    assert fast.fall_back(RuntimeError("again")) == ""  # nothing left to fall back to


def test_training_falls_back_and_completes_when_compilation_fails(tmp_path, monkeypatch):
    from desktop_app.engine.train.loop import train

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # restored afterwards (a compiled run sets them)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    dataset = make_dataset(tmp_path / "ds")
    eager = [e.metrics["loss"] for e in train(tiny_config(dataset, steps=3, kernels="eager", device="cpu"),
                                                tmp_path / "eager") if e.type == "step"]

    def failing_compile(module, *args, **kwargs):
        def run(*a, **k):
            raise RuntimeError("BackendCompilerFailed: simulated")
        return run

    monkeypatch.setattr(torch, "compile", failing_compile)
    events = list(train(tiny_config(dataset, steps=3, kernels="compile", device="cpu"), tmp_path / "run"))
    logs = [e.message for e in events if e.type == "log"]
    assert any(m.startswith("kernels compile:") and "as configured" in m for m in logs)
    assert any("step 1: the compile fast path failed (RuntimeError: BackendCompilerFailed: simulated)" in m
               for m in logs)
    assert events[-1].reason == "completed"
    losses = [e.metrics["loss"] for e in events if e.type == "step"]
    # the same steps as a run with transformers' modules from the start (kernels eager on the CPU: its own path)
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(losses, eager, strict=True))
