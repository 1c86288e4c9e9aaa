"""Issue 51 item 2: one memory estimate (engine/train/memory_plan.py) for Get a model's verdicts, the Train tab's
preflight and the settings a base opens with; it uses the data's real example lengths once data files are chosen
and the precision the run will compute in, and the settings a model opens with fit the machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memory_cases import GIB, LAPTOP, LLAMA_8B, SMOLLM2_135M, chats, model_folder, word_tokenizer

from desktop_app.engine.methods import default_lr
from desktop_app.engine.model.sizing import count_parameters, spec_for_estimate
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train import memory_plan as mp
from desktop_app.engine.train.fit import training_plan
from desktop_app.engine.train.opening import opening_settings
from desktop_app.engine.train.preflight import preflight


def _run(base: Path, adapter: str = "lora", data: list[str] | None = None, **train) -> RunConfig:
    config = {"objective": "sft", "base_model": str(base), "data": data or [], "train": TrainSpec(**train).to_dict()}
    if adapter != "none":
        config["adapter"] = {"kind": adapter}
    return RunConfig(**config)


def _with(config: RunConfig, settings: dict) -> RunConfig:
    return RunConfig(**{**config.to_dict(), "train": {**config.train, **settings}})


def _memory_findings(config: RunConfig, machine: mp.Machine) -> list[str]:
    return [f.message for f in preflight(config, machine, records=100) if f.field == "batch_size"]


def test_get_a_model_and_the_train_tab_give_the_same_figure_for_the_same_run(tmp_path):
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    spec = spec_for_estimate(SMOLLM2_135M)
    for use, adapter in (("lora", "lora"), ("full", "none")):
        promised = training_plan(spec, use, LAPTOP)  # what Get a model says for this use
        config = _run(base, adapter)
        opened = _with(config, opening_settings(config, LAPTOP))  # what Fine-tune it opens the Train tab with
        plan = mp.memory_plan(opened, opened.train_spec(), False)
        assert plan.total() == promised.total(), use
        assert plan.micro_batch == promised.micro_batch and plan.shape == promised.shape
        assert plan.total() <= LAPTOP.ram_free * mp.FITS_SHARE and _memory_findings(opened, LAPTOP) == []


def test_a_base_opens_with_settings_that_fit_the_machine(tmp_path):
    """The issue's case: LoRA on SmolLM2-135M opened with batch 16 at once (26.3 GiB against 21.9 free); now the
    micro-batch that fits, and a full fine-tune its own learning rate for the model's size."""
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    whole = _run(base, "lora")
    assert _memory_findings(whole, LAPTOP)  # the batch of 16 at once at a guessed 1,024 tokens: too much
    settings = opening_settings(whole, LAPTOP)
    assert 1 <= settings["micro_batch_size"] < 16 and 16 % settings["micro_batch_size"] == 0
    assert settings["lr"] == 2e-4 and settings["steps"] == TrainSpec().steps
    assert _memory_findings(_with(whole, settings), LAPTOP) == []
    full = opening_settings(_run(base, "none"), LAPTOP)
    assert full["lr"] == 5e-5  # full SFT of a 135M model: never a pretraining rate
    roomy = mp.Machine(ram_free=200 * GIB, ram_total=256 * GIB)
    assert opening_settings(whole, roomy)["micro_batch_size"] == 0  # the whole batch fits: no accumulation


def test_the_learning_rate_a_run_starts_from_falls_with_the_models_size(tmp_path):
    big = model_folder(tmp_path / "llama8b", LLAMA_8B)
    assert count_parameters(spec_for_estimate(LLAMA_8B)) > 7e9
    assert opening_settings(_run(big, "none"), LAPTOP)["lr"] == pytest.approx(2e-5)
    assert opening_settings(_run(big, "lora"), LAPTOP)["lr"] == 2e-4
    assert default_lr("sft", "none", 70_000_000_000) == pytest.approx(1e-5)
    assert default_lr("causal_lm", "none", 70_000_000_000) == 1e-3  # pretraining keeps its own


def test_nothing_that_fits_leaves_the_settings_and_preflight_says_so(tmp_path):
    big = model_folder(tmp_path / "llama8b", LLAMA_8B)
    config = _run(big, "none")
    settings = opening_settings(config, LAPTOP)
    assert settings["micro_batch_size"] == 0 and settings["gradient_checkpointing"] is False
    assert "It cannot work here" in _memory_findings(_with(config, settings), LAPTOP)[0]


def test_once_data_files_are_chosen_the_estimate_uses_their_longest_example(tmp_path):
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    word_tokenizer(base)
    data = chats(tmp_path / "short.jsonl", answer_words=30)
    guessed = mp.memory_plan(_run(base), TrainSpec(), False)
    assert guessed.guessed_length and guessed.shape.seq_len == mp.ASSUMED_EXAMPLE_TOKENS
    plan = mp.memory_plan(_run(base, data=[str(data)]), TrainSpec(), False)
    # 2 + 30 words and the template's tokens (8 a message): a few dozen tokens, as the data holds
    assert plan.length == "the longest example" and plan.shape.seq_len == 2 + 30 + 2 * 8
    assert plan.total() < guessed.total() / 4
    settings = opening_settings(_run(base, data=[str(data)]), LAPTOP)
    assert settings["micro_batch_size"] == 0  # short records: the batch of 16 fits at once
    longer = chats(tmp_path / "short.jsonl", answer_words=300)  # the file edited: measured again
    assert mp.memory_plan(_run(base, data=[str(longer)]), TrainSpec(), False).shape.seq_len == 2 + 300 + 16
    capped = RunConfig(**{**_run(base, data=[str(longer)]).to_dict(), "method_options": {"max_len": 100}})
    assert mp.memory_plan(capped, TrainSpec(), False).shape.seq_len == 100  # never beyond the longest allowed


def test_the_memory_finding_names_where_the_length_comes_from(tmp_path):
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    word_tokenizer(base)
    small = mp.Machine(ram_free=2 * GIB, ram_total=4 * GIB)
    guess = _memory_findings(_run(base, batch_size=64), small)[0]
    assert "(a guess until data files are chosen)" in guess
    data = chats(tmp_path / "d.jsonl", answer_words=200)
    real = _memory_findings(_run(base, data=[str(data)], batch_size=64), small)[0]
    assert "× 218 tokens (the longest example) at fp32" in real


def test_unreadable_data_or_tokenizer_falls_back_to_the_guess(tmp_path):
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    (base / "tokenizer.json").write_text("not json", encoding="utf-8")
    data = chats(tmp_path / "d.jsonl", answer_words=10)
    assert mp.memory_plan(_run(base, data=[str(data)]), TrainSpec(), False).guessed_length
    word_tokenizer(base)
    missing = mp.memory_plan(_run(base, data=[str(tmp_path / "gone.jsonl")]), TrainSpec(), False)
    assert missing.guessed_length


def test_auto_precision_on_a_cpu_is_the_engines_choice_once_torch_is_loaded(monkeypatch):
    monkeypatch.undo()  # the suite pins "auto" at fp32 (conftest): this test looks at the real choice
    import torch

    from desktop_app.engine.devices import choose_precision

    assert mp.run_precision("auto", False) == choose_precision(torch.device("cpu"), "auto").name
    assert mp.run_precision("auto", True) == "bf16" and mp.run_precision("fp16", False) == "fp16"
    monkeypatch.delitem(__import__("sys").modules, "torch")  # before the engine is loaded: fp32, nothing imported
    assert mp.run_precision("auto", False) == "fp32"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak memory is read from Linux's /proc")
@pytest.mark.parametrize("adapter", ["none", "lora"])
def test_the_estimate_holds_to_the_measured_peak_of_a_real_run(adapter):
    """The stated margin: a real run's peak memory (tests/memory_peak.py: full SFT and LoRA of a 20M llama, a
    micro-batch of 4 of 8, fp32) is between 0.8x and 1.5x the estimate the Train tab shows for it. Measured here:
    about 1.1x for full SFT and 1.3-1.4x for LoRA, whose first step holds buffers the estimate does not model."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "memory_peak.py"
    out = subprocess.run([sys.executable, str(script), adapter, "4"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["length"] == "the longest example" and 150 < found["seq_len"] < 250
    assert 0.8 <= found["measured"] / found["estimated"] <= 1.5, found
