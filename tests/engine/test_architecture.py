"""Built models: exact parameter counts, HF names, round trips, determinism, init."""

from __future__ import annotations

import json
import random

import pytest
import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.architecture import (
    build_model,
    hf_config,
    model_spec_from_folder,
    spec_from_hf_config,
)
from desktop_app.engine.model.sizing import count_parameters, layer_table
from desktop_app.engine.specs import ModelSpec, SpecError


def random_spec(rng: random.Random) -> ModelSpec:
    family = rng.choice(["llama", "gpt2"])
    n_heads = rng.choice([1, 2, 4, 8])
    head_dim = rng.choice([2, 4, 6, 8])
    n_kv = rng.choice([h for h in (1, 2, 4, 8) if n_heads % h == 0]) if family == "llama" else n_heads
    return ModelSpec(
        family=family, vocab_size=rng.randint(2, 300), d_model=n_heads * head_dim, n_layers=rng.randint(1, 3),
        n_heads=n_heads, n_kv_heads=n_kv, ffn_dim=rng.randint(1, 70), context_length=rng.randint(8, 40),
        dropout=rng.choice([0.0, 0.1]), rope_theta=rng.choice([10000.0, 500000.0]) if family == "llama" else 10000.0,
        tie_embeddings=rng.random() < 0.5, norm_eps=rng.choice([1e-5, 1e-6]), init_std=rng.choice([0.02, 0.05]))


SPECS = [random_spec(random.Random(i)) for i in range(48)]


def test_random_specs_cover_both_families_gqa_and_untied():
    assert {s.family for s in SPECS} == {"llama", "gpt2"}
    assert any(s.family == "llama" and s.n_kv_heads < s.n_heads for s in SPECS)
    assert any(not s.tie_embeddings for s in SPECS) and any(s.tie_embeddings for s in SPECS)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.family}-d{s.d_model}-h{s.n_heads}-kv{s.n_kv_heads}-"
                         f"f{s.ffn_dim}-L{s.n_layers}-{'tied' if s.tie_embeddings else 'untied'}")
def test_exact_count_names_and_shapes(spec):
    assert spec.validate() == []
    model = build_model(spec, seed=0)
    assert sum(p.numel() for p in model.parameters()) == count_parameters(spec)
    # layer_table names/shapes are the HF parameter names/shapes (tied lm_head listed once)
    params = {name: list(p.shape) for name, p in model.named_parameters()}
    assert params == {r["name"]: r["shape"] for r in layer_table(spec)}
    # state_dict keys are exactly those of the plain HF class built from the same config
    cls = type(model)
    reference = cls(hf_config(spec))
    assert set(model.state_dict()) == set(reference.state_dict())
    assert (model.lm_head.weight is model.get_input_embeddings().weight) == spec.tie_embeddings
    # the spec survives the trip through the HF config (object and config.json dict)
    assert spec_from_hf_config(model.config) == spec
    assert spec_from_hf_config(json.loads(model.config.to_json_string())) == spec


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_forward_shapes_and_loss(family):
    spec = ModelSpec(family, 97, 32, 2, 4, 2 if family == "llama" else 4, 64, 24)
    model = build_model(spec, seed=3)
    assert model.config._attn_implementation == "sdpa"
    ids = torch.randint(0, 97, (3, 24))
    out = model(ids, labels=ids)
    assert out.logits.shape == (3, 24, 97)
    # a fresh model predicts near-uniformly: loss close to ln(vocab)
    assert abs(out.loss.item() - torch.log(torch.tensor(97.0)).item()) < 0.5
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_seeded_build_is_deterministic_and_isolated(family):
    spec = ModelSpec(family, 50, 16, 2, 2, 2, 24, 16)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(spec, seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after), "a seeded build must not consume the caller's random stream"
    b = build_model(spec, seed=7)
    c = build_model(spec, seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_init_statistics():
    spec = ModelSpec("llama", 1000, 256, 8, 4, 4, 512, 16, init_std=0.02)
    model = build_model(spec, seed=0)
    sd = model.state_dict()
    assert abs(sd["model.embed_tokens.weight"].std().item() - 0.02) < 0.002
    assert abs(sd["model.layers.0.self_attn.q_proj.weight"].std().item() - 0.02) < 0.002
    scaled = 0.02 / 4  # std / sqrt(2 * 8 layers)
    assert abs(sd["model.layers.0.self_attn.o_proj.weight"].std().item() - scaled) < 0.001
    assert abs(sd["model.layers.0.mlp.down_proj.weight"].std().item() - scaled) < 0.001
    assert torch.all(sd["model.norm.weight"] == 1)
    g = build_model(ModelSpec("gpt2", 100, 64, 2, 4, 4, 128, 16), seed=0).state_dict()
    assert torch.all(g["transformer.h.0.attn.c_attn.bias"] == 0) and torch.all(g["transformer.ln_f.weight"] == 1)


def test_config_details():
    llama = hf_config(ModelSpec("llama", 300, 64, 2, 8, 2, 100, 64, rope_theta=5e5, dropout=0.1))
    assert llama.num_key_value_heads == 2 and llama.hidden_act == "silu"
    assert llama.rope_parameters["rope_theta"] == 5e5
    assert llama.attention_dropout == 0.1 and not llama.attention_bias and not llama.mlp_bias
    assert (llama.pad_token_id, llama.bos_token_id, llama.eos_token_id) == (0, 1, 2)
    gpt2 = hf_config(ModelSpec("gpt2", 300, 64, 2, 8, 8, 100, 64, dropout=0.2), eos_token_id=5)
    assert gpt2.n_inner == 100 and gpt2.n_positions == 64 and gpt2.activation_function == "gelu_new"
    assert gpt2.resid_pdrop == gpt2.embd_pdrop == gpt2.attn_pdrop == 0.2
    assert gpt2.eos_token_id == 5


def test_dropout_active_only_in_training():
    spec = ModelSpec("gpt2", 50, 16, 1, 2, 2, 24, 16, dropout=0.5)
    model = build_model(spec, seed=0)
    ids = torch.randint(0, 50, (1, 16))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids).logits)  # eval mode after build
        model.train()
        assert not torch.equal(model(ids).logits, model(ids).logits)


def test_validation_lists_every_problem():
    bad = ModelSpec("llama", 1, 100, 0, 8, 3, 10, 4, dropout=1.5)
    problems = bad.validate()
    text = " | ".join(problems)
    assert "n_layers" in text and len(problems) >= 1
    bad2 = ModelSpec("llama", 100, 100, 2, 8, 3, 10, 4, dropout=1.5)
    text2 = " | ".join(bad2.validate())
    for needle in ("d_model 100 is not divisible by 8 heads", "n_kv_heads", "dropout", "context_length 4"):
        assert needle in text2, text2
    with pytest.raises(SpecError) as exc:
        build_model(bad2)
    assert len(exc.value.problems) >= 4


def test_spec_json_round_trip():
    spec = ModelSpec("llama", 1234, 96, 3, 6, 2, 256, 128, dropout=0.1, rope_theta=1e6, tie_embeddings=False)
    assert ModelSpec.from_json(spec.to_json()) == spec
    with pytest.raises(SpecError, match="unknown ModelSpec field"):
        ModelSpec.from_dict({**spec.to_dict(), "d_modle": 3})


def test_model_spec_from_folder(tmp_path):
    spec = ModelSpec("llama", 64, 16, 1, 2, 1, 24, 16, tie_embeddings=False)
    model = build_model(spec, seed=0)
    model.save_pretrained(tmp_path / "m")
    assert model_spec_from_folder(tmp_path / "m") == spec
    with pytest.raises(UserError, match=r"no config\.json"):
        model_spec_from_folder(tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{nope")
    with pytest.raises(UserError, match="not a readable JSON"):
        model_spec_from_folder(tmp_path / "bad")
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(UserError, match="not supported"):
        model_spec_from_folder(tmp_path / "bert")


def test_unrepresentable_llama_variants_are_named():
    cfg = hf_config(ModelSpec("llama", 64, 16, 1, 2, 1, 24, 16)).to_dict()
    cfg["attention_bias"] = True
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(UserError) as exc:
        spec_from_hf_config(cfg)
    assert "biases" in str(exc.value) and "linear" in str(exc.value)


def test_transformers_4x_config_json_is_understood():
    # config.json of TinyLlama-1.1B as transformers 4.x wrote it (top-level rope_theta, rope_scaling null)
    tinyllama = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
        "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 32000,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "transformers_version": "4.35.0",
    }
    from desktop_app.engine.model.sizing import count_parameters as count
    from desktop_app.engine.presets import preset

    spec = spec_from_hf_config(tinyllama)
    assert spec == preset("llama-1b")
    assert count(spec) == 1_100_048_384
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "n_inner": None,
            "vocab_size": 50257, "activation_function": "gelu_new", "resid_pdrop": 0.1}
    spec = spec_from_hf_config(gpt2)
    assert spec.ffn_dim == 3072 and spec.tie_embeddings and spec.dropout == 0.1
    assert count(spec) == 124_439_808
