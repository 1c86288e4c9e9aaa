"""Sizing without torch: exact counts (checked against built models in test_architecture), memory, FLOPs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from desktop_app.engine.model.sizing import (
    compute_optimal_tokens,
    count_parameters,
    estimate_memory,
    flops_per_token,
    layer_table,
    parameter_breakdown,
)
from desktop_app.engine.presets import PRESETS
from desktop_app.engine.specs import ModelSpec


def test_sizing_imports_no_torch():
    code = ("import sys; import desktop_app.engine.model.sizing, desktop_app.engine.presets; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_known_counts():
    # GPT-2 small is famously 124,439,808 parameters (tied embeddings) with its 50257 tokens; the preset pads them to
    # 50304 (a multiple of 64: fast GPU matmuls), 47 more rows of 768.
    assert count_parameters(PRESETS["gpt2-small"][1].replace(vocab_size=50257)) == 124_439_808
    assert count_parameters(PRESETS["gpt2-small"][1]) == 124_439_808 + 47 * 768
    # TinyLlama-1.1B: 1,100,048,384 parameters.
    assert count_parameters(PRESETS["llama-1b"][1]) == 1_100_048_384


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_match_their_description(name):
    desc, spec = PRESETS[name]
    assert spec.validate() == []
    n = count_parameters(spec)
    # each description starts with "~X.YM" / "124M" / "~1.1B": the exact count must round to it
    head = desc.split()[0].lstrip("~").rstrip(",")
    value, unit = float(head[:-1]), head[-1]
    scale = {"M": 1e6, "B": 1e9}[unit]
    assert abs(n / scale - value) / value < 0.06, (name, n)


def test_breakdown_and_table_add_up():
    for tie in (True, False):
        for family, kv in (("llama", 2), ("gpt2", 4)):
            spec = ModelSpec(family, 500, 64, 3, 4, kv, 100, 32, tie_embeddings=tie)
            b = parameter_breakdown(spec)
            rows = layer_table(spec)
            assert b["total"] == count_parameters(spec) == sum(r["params"] for r in rows)
            assert (b["lm_head"] == 0) == tie
            assert all(r["params"] == _prod(r["shape"]) for r in rows)
            assert len({r["name"] for r in rows}) == len(rows)
            assert b["non_embedding"] == b["attention"] + b["mlp"] + b["norms"]


def _prod(shape):
    out = 1
    for s in shape:
        out *= s
    return out


def test_gqa_shrinks_attention():
    full = ModelSpec("llama", 500, 64, 2, 8, 8, 100, 32)
    gqa = full.replace(n_kv_heads=2)
    diff = parameter_breakdown(full)["attention"] - parameter_breakdown(gqa)["attention"]
    # k and v projections shrink from 64x64 to 16x64 in each of 2 layers
    assert diff == 2 * 2 * (64 * 64 - 16 * 64)


def test_memory_estimate():
    spec = PRESETS["tiny"][1]
    n = count_parameters(spec)
    m = estimate_memory(spec)
    assert m["weights"] == 4 * n and m["gradients"] == 4 * n and m["optimizer"] == 8 * n
    assert m["total"] == sum(m[k] for k in ("weights", "gradients", "optimizer", "activations"))
    # activations scale linearly with batch and sequence length
    m4 = estimate_memory(spec, batch_size=4)
    assert m4["activations"] == 4 * m["activations"]
    half = estimate_memory(spec, seq_len=spec.context_length // 2)
    assert half["activations"] * 2 == m["activations"]
    # bf16 halves stored activations (not the fp32 logits), weights stay fp32 under autocast
    bf = estimate_memory(spec, precision="bf16")
    assert bf["weights"] == m["weights"] and m["activations"] / 2 < bf["activations"] < m["activations"]
    inf = estimate_memory(spec, training=False, precision="bf16")
    assert inf["weights"] == 2 * n and inf["gradients"] == inf["optimizer"] == 0
    assert inf["total"] < bf["total"]
    with pytest.raises(ValueError, match="precision"):
        estimate_memory(spec, precision="int3")


def test_memory_estimate_in_right_ballpark_for_gpt2_small():
    # GPT-2 small, batch 8 x 1024, fp32 training without checkpointing: known to need ~15-30 GB.
    m = estimate_memory(PRESETS["gpt2-small"][1], batch_size=8)
    assert 10e9 < m["total"] < 40e9


def test_flops():
    spec = PRESETS["gpt2-small"][1]
    train = flops_per_token(spec)
    fwd = flops_per_token(spec, training=False)
    assert train == 3 * fwd
    # 6N rule of thumb: within 20% of 6 x 124M plus the attention term
    approx = 6 * 124_439_808 + 12 * 12 * 1024 * 768
    assert abs(train - approx) / approx < 0.2
    assert flops_per_token(spec, seq_len=2048) > train


def test_compute_optimal():
    spec = PRESETS["tiny"][1]
    assert compute_optimal_tokens(spec) == 20 * count_parameters(spec)
