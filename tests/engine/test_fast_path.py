"""fast_path: which kernels a run trains with on each device, and the reason it logs (the table of measurements, the
overrides, the fallbacks when a piece is missing); where compiled kernels are cached; a true precision message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from desktop_app.engine.model import fast_path
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.fast_path import (
    MIN_STEPS_TO_COMPILE,
    KernelRequest,
    choose_kernels,
    compile_cache_dir,
)
from desktop_app.engine.model.training_forward import EAGER, TrainingModel
from desktop_app.engine.specs import ModelSpec, TrainSpec

CUDA = torch.device("cuda")  # a device object needs no GPU: the choice is made from the model and the spec
CPU = torch.device("cpu")
LLAMA = ModelSpec("llama", 128, 32, 2, 4, 2, 80, 24)
GPT2 = ModelSpec("gpt2", 128, 32, 2, 4, 4, 80, 24)


@pytest.fixture
def gpu_tools(monkeypatch):
    """As on a GPU machine with Triton (torch.compile works) and, when asked, Liger Kernel installed."""
    monkeypatch.setattr(fast_path, "compile_unavailable", lambda device: "")

    def with_liger(present: bool) -> None:
        monkeypatch.setattr(fast_path, "liger_available", lambda: present)

    with_liger(False)
    return with_liger


@pytest.mark.parametrize("spec, family", [(LLAMA, "llama"), (GPT2, "gpt2")])
def test_auto_on_cuda_compiles_the_fused_forward_as_measured(gpu_tools, spec, family):
    choice = choose_kernels(build_model(spec, seed=0), CUDA, KernelRequest(steps=1000))
    assert choice.name == "compile" and not choice.warning
    k = choice.kernels
    assert k.fused_forward and k.loss == "compiled" and k.flex
    assert f"torch.compile of the fused {family} forward" in choice.reason and "measured: H100" in choice.reason
    assert "no full logits" in choice.reason and "FlexAttention" in choice.reason


def test_the_table_covers_every_family_the_app_builds():
    for family in ("llama", "gpt2"):
        for params in (1e6, 1.1e8, 1.1e9):
            assert fast_path._measured(family, int(params)) is not None
    assert fast_path._measured("phi3", 1000) is None


def test_short_runs_do_not_pay_for_compiling(gpu_tools):
    model = build_model(LLAMA, seed=0)
    choice = choose_kernels(model, CUDA, KernelRequest(steps=MIN_STEPS_TO_COMPILE - 1))
    assert choice.kernels == EAGER and f"a run of {MIN_STEPS_TO_COMPILE - 1} steps" in choice.reason
    gpu_tools(True)  # with Liger installed, short runs take its kernels instead
    choice = choose_kernels(model, CUDA, KernelRequest(steps=20))
    assert choice.name == "liger" and choice.kernels.loss == "liger" and "Liger's RMSNorm" in choice.reason
    # and a compiled run's loss (outside the compiled graph) takes Liger's fused cross-entropy
    choice = choose_kernels(model, CUDA, KernelRequest(steps=1000))
    assert choice.name == "compile" and choice.kernels.loss == "liger" and "Liger's fused output" in choice.reason


def test_an_explicit_choice_wins_and_a_missing_piece_is_a_warning(gpu_tools):
    model = build_model(LLAMA, seed=0)
    assert choose_kernels(model, CUDA, KernelRequest(requested="eager", steps=1000)).kernels == EAGER
    assert choose_kernels(model, CUDA, KernelRequest(requested="compile", steps=5)).name == "compile"
    assert choose_kernels(model, CUDA, KernelRequest(compile_flag=True, steps=5)).name == "compile"  # TrainSpec.compile
    choice = choose_kernels(model, CUDA, KernelRequest(requested="liger", steps=1000))
    assert choice.kernels == EAGER and choice.warning and "Liger Kernel is not installed" in choice.reason
    assert "pip install 'azr-model-trainer[gpu]'" in choice.reason


def test_without_triton_compile_falls_back_with_the_reason(monkeypatch):
    monkeypatch.setattr(fast_path, "compile_unavailable", lambda device: "torch.compile needs Triton for CUDA")
    monkeypatch.setattr(fast_path, "liger_available", lambda: False)
    model = build_model(LLAMA, seed=0)
    auto = choose_kernels(model, CUDA, KernelRequest(steps=1000))
    assert auto.kernels == EAGER and not auto.warning and "needs Triton" in auto.reason
    asked = choose_kernels(model, CUDA, KernelRequest(requested="compile", steps=1000))
    assert asked.kernels == EAGER and asked.warning


def test_families_without_a_fused_forward_compile_their_own_decoder(gpu_tools):
    from transformers import MistralConfig, MistralForCausalLM

    model = MistralForCausalLM(MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    choice = choose_kernels(model, CUDA, KernelRequest(steps=1000))
    assert choice.name == "compile" and not choice.kernels.fused_forward and not choice.kernels.flex
    assert "transformers' modules" in choice.reason and "mistral was not measured" in choice.reason


def test_fsdp_quantized_and_the_cpu_keep_their_own_paths(gpu_tools):
    model = build_model(LLAMA, seed=0)
    assert choose_kernels(model, CUDA, KernelRequest(fsdp=True)).kernels is None
    quantized = choose_kernels(model, CUDA, KernelRequest(quantized=True, steps=1000))
    assert quantized.kernels == EAGER and "4-bit" in quantized.reason
    cpu = choose_kernels(model, CPU, KernelRequest(steps=1000))
    assert cpu.kernels is None and cpu.name == "default" and "fused fp32 llama" in cpu.reason
    liger = choose_kernels(model, CPU, KernelRequest(requested="liger"))
    assert liger.kernels is None and liger.warning and "need a CUDA GPU" in liger.reason
    compiled = choose_kernels(model, CPU, KernelRequest(requested="compile"))
    assert compiled.name == "compile" and compiled.kernels.loss == "chunked" and not compiled.kernels.flex


def test_prepare_wraps_only_when_kernels_were_chosen(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    model = build_model(LLAMA, seed=0)
    same, notes = fast_path.prepare(model, choose_kernels(model, CPU), tmp_path / "runs" / "r1")
    assert same is model and notes == []
    wrapped, notes = fast_path.prepare(model, choose_kernels(model, CPU, KernelRequest(requested="compile")),
                                       tmp_path / "runs" / "r1")
    assert isinstance(wrapped, TrainingModel) and wrapped.config is model.config
    assert list(wrapped.parameters()) == list(model.parameters())
    cache = tmp_path / "cache" / "torch-compile"
    assert notes == [f"compiled kernels cached in {cache}: later runs of the same shapes start in seconds"]
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache) and cache.is_dir()
    assert os.environ["TRITON_CACHE_DIR"] == str(cache / "triton")
    # a cache the user chose is kept
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/else")
    assert "(TORCHINDUCTOR_CACHE_DIR)" in fast_path.use_compile_cache(tmp_path / "x")


def test_compile_cache_lives_in_the_workspace(tmp_path, monkeypatch):
    monkeypatch.delenv("AZR_WORKSPACE", raising=False)
    assert compile_cache_dir(tmp_path / "ws" / "runs" / "run-1") == tmp_path / "ws" / "cache" / "torch-compile"
    assert compile_cache_dir(tmp_path / "elsewhere" / "run") == tmp_path / "elsewhere" / ".torch-compile-cache"
    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "w2"))
    assert compile_cache_dir(tmp_path / "elsewhere" / "run") == Path(tmp_path / "w2" / "cache" / "torch-compile")


def test_train_spec_kernels_field_is_checked():
    assert TrainSpec().kernels == "auto"
    assert any("kernels" in p for p in TrainSpec(kernels="turbo").validate())


def test_an_explicit_fp32_on_a_bf16_gpu_says_so_truthfully(monkeypatch):
    from desktop_app.engine.devices import choose_precision

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))
    fp32 = choose_precision(CUDA, "fp32")
    assert fp32.name == "fp32" and fp32.reason.startswith("fp32 as configured")
    assert "computes bf16 natively" in fp32.reason and "neither" not in fp32.reason
    assert choose_precision(CUDA, "auto").name == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (6, 1))  # a Pascal card
    assert choose_precision(CUDA, "fp32").reason == "fp32 as configured"
    assert "neither bf16 nor fast fp16" in choose_precision(CUDA, "auto").reason
