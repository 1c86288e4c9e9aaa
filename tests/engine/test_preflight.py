"""Preflight (engine/train/preflight.py): each setting that cannot work is found before Start, with what would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.model.sizing import TrainingShape, estimate_memory, estimate_training_memory
from desktop_app.engine.presets import preset
from desktop_app.engine.specs import DataSpec, RunConfig, TrainSpec
from desktop_app.engine.train import memory_plan as mp
from desktop_app.engine.train import preflight as pf
from desktop_app.engine.train.memory_plan import Machine
from desktop_app.engine.train.opening import method_defaults
from desktop_app.engine.train.preflight import ERROR, WARNING, preflight
from desktop_app.engine.train.request import RunRequest, preflight_request, prepare_run

GIB = 1 << 30
LAPTOP = Machine(ram_free=21 * GIB, ram_total=24 * GIB)  # no GPU, 21 GiB free


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


@pytest.fixture(scope="module")
def two_documents(tmp_path_factory) -> Path:
    """A dataset prepared from 2 documents with 5% held out for validation: its validation split is empty."""
    from desktop_app.engine.data.prepare import prepare_dataset

    root = tmp_path_factory.mktemp("two")
    text = root / "two.txt"
    words = ["the", "cat", "sat", "on", "the", "mat", "and", "a", "dog", "ran", "to", "the", "park"]
    text.write_text("\n\n".join(" ".join(words[(i + k) % len(words)] for k in range(200)) for i in range(2)),
                    encoding="utf-8")
    events = list(prepare_dataset([text], root / "ds", DataSpec(vocab_size=320, context_length=32, overlap=0,
                                                                val_fraction=0.05)))
    assert events[-1].reason == "completed", events[-1]
    return root / "ds"


def _llama_base(folder: Path, spec_name: str = "llama-1b") -> Path:
    """A Hugging Face model folder's config.json (all preflight reads of a base: nothing is loaded)."""
    s = preset(spec_name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": s.d_model, "num_attention_heads": s.n_heads,
        "num_key_value_heads": s.n_kv_heads, "num_hidden_layers": s.n_layers, "intermediate_size": s.ffn_dim,
        "vocab_size": s.vocab_size, "max_position_embeddings": s.context_length, "tie_word_embeddings": False,
        "hidden_act": "silu"}), encoding="utf-8")
    return folder


def _only(findings, field):
    found = [f for f in findings if f.field == field]
    assert len(found) == 1, findings
    return found[0]


def test_a_clean_run_has_no_findings(dataset):
    config = tiny_config(dataset, steps=200, warmup_steps=20, eval_every=50, lr=1e-3)
    assert config.validate() == []
    assert preflight(config, LAPTOP) == []


def test_warmup_as_long_as_the_run_is_a_warning_with_a_shorter_one(dataset):
    findings = preflight(tiny_config(dataset, steps=10, warmup_steps=20, lr=1e-3), LAPTOP)
    warmup = _only(findings, "warmup_steps")
    assert warmup.level == WARNING
    assert "20 steps" in warmup.message and "(10 steps)" in warmup.message and "about 1 step (a tenth" in warmup.message
    assert preflight(tiny_config(dataset, steps=10, warmup_steps=9, lr=1e-3), LAPTOP) == []


def test_a_model_far_beyond_free_memory_is_an_error_with_what_would_fit():
    config = RunConfig(model=preset("llama-1b").to_dict(), train=TrainSpec(batch_size=16).to_dict())
    assert estimate_memory(preset("llama-1b"), batch_size=16)["total"] > 120 * GIB  # the Model tab's ~126 GiB
    memory = _only(preflight(config, LAPTOP), "batch_size")
    assert memory.level == ERROR
    assert "126 GiB" in memory.message and "21 GiB free" in memory.message and "RAM" in memory.message
    assert "micro-batch of 1 with gradient checkpointing" in memory.message  # the least these settings get to


def test_a_smaller_micro_batch_or_checkpointing_is_offered_when_it_fits():
    config = RunConfig(model=preset("llama-316m").to_dict(), train=TrainSpec(batch_size=16).to_dict())
    memory = _only(preflight(config, LAPTOP), "batch_size")
    assert memory.level == ERROR and "Would fit: a micro-batch of " in memory.message
    assert "gradient checkpointing" in memory.message and "smaller model (Model tab)" in memory.message
    fitting = config.replace(train=TrainSpec(batch_size=16, micro_batch_size=1, gradient_checkpointing=True).to_dict())
    assert [f for f in preflight(fitting, LAPTOP) if f.field == "batch_size"] == []


def test_precision_auto_on_a_cpu_is_refused_only_where_bf16_would_not_fit_either():
    machine = Machine(ram_free=30 * GIB, ram_total=32 * GIB)
    auto = RunConfig(model=preset("llama-316m").to_dict(), train=TrainSpec(batch_size=16).to_dict())
    fp32 = auto.replace(train=TrainSpec(batch_size=16, precision="fp32").to_dict())
    # ~71 GiB at fp32 (shown), ~38 GiB at bf16: a CPU that runs bf16 might train it, so auto is only warned about
    assert _only(preflight(auto, machine), "batch_size").level == WARNING
    assert _only(preflight(fp32, machine), "batch_size").level == ERROR


def test_memory_is_checked_against_the_gpu_that_trains_it():
    config = RunConfig(model=preset("llama-1b").to_dict(), train=TrainSpec(batch_size=16).to_dict())
    gpu = Machine(ram_free=21 * GIB, ram_total=24 * GIB, gpu_free=79 * GIB, gpu_total=80 * GIB, gpu_name="H100")
    memory = _only(preflight(config, gpu), "batch_size")
    # bf16 activations on a GPU: ~75 GiB, more than 80% of 79 GiB free but within the estimate's spread
    assert memory.level == WARNING and "the GPU (H100)" in memory.message and "bf16" in memory.message
    on_cpu = config.replace(train=TrainSpec(batch_size=16, device="cpu").to_dict())
    assert _only(preflight(on_cpu, gpu), "batch_size").level == ERROR  # device cpu: the RAM decides
    unknown = Machine(ram_free=21 * GIB, ram_total=24 * GIB, gpu_known=False)
    assert preflight(config, unknown) == []  # a GPU may train it: no verdict until torch has looked


def test_full_fine_tuning_beyond_memory_offers_lora_and_qlora(tmp_path):
    base = _llama_base(tmp_path / "base")
    data = tmp_path / "chats.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n' * 40, encoding="utf-8")
    config = RunConfig(base_model=str(base), objective="sft", data=[str(data)],
                       train=TrainSpec(batch_size=4, lr=5e-5).to_dict())
    memory = _only(preflight(config, Machine(ram_free=12 * GIB, ram_total=16 * GIB)), "batch_size")
    assert memory.level == ERROR  # weights, gradients and AdamW state alone: 16 GiB
    assert "LoRA instead of full weights, a micro-batch of 1 with gradient checkpointing: about" in memory.message
    assert "QLoRA (a 4-bit base), a micro-batch of 1" in memory.message
    assert "Would fit: a micro-batch" not in memory.message  # full weights never fit, whatever the batch
    assert "a guess" in memory.message  # no max_len: the examples' length is assumed


def test_empty_validation_split_of_a_prepared_dataset_is_a_warning(two_documents):
    manifest = json.loads((two_documents / "manifest.json").read_text())
    assert manifest["splits"]["val"]["documents"] == 0 and manifest["splits"]["train"]["documents"] == 2
    spec = preset("tiny").replace(vocab_size=320, context_length=32)
    config = RunConfig(model=spec.to_dict(), dataset=str(two_documents), train=TrainSpec().to_dict())
    val = _only(preflight(config, LAPTOP), "dataset")
    assert val.level == WARNING and "No validation curve" in val.message
    assert "5% of its 2 documents" in val.message and "about 20 documents" in val.message
    no_evals = config.replace(train=TrainSpec(eval_every=0).to_dict())
    assert preflight(no_evals, LAPTOP) == []  # no evaluations asked for: nothing missing


def test_fine_tuning_records_too_few_to_hold_any_out(tmp_path):
    data = tmp_path / "two.jsonl"
    data.write_text('{"messages": []}\n\n{"messages": []}\n', encoding="utf-8")
    config = RunConfig(base_model=str(tmp_path / "no-base"), objective="sft", data=[str(data)],
                       method_options={"val_fraction": 0.05}, train=TrainSpec(lr=5e-5).to_dict())
    val = _only(preflight(config, LAPTOP), "val_fraction")
    assert val.level == WARNING and "5% of about 2 records" in val.message and "at least 26%" in val.message
    held = config.replace(method_options={"val_fraction": 0.26})
    assert preflight(held, LAPTOP) == []
    assert preflight(config, LAPTOP, records=100) == []  # counted by the caller
    given = config.replace(method_options={"val_fraction": 0.05, "val_data": [str(data)]})
    assert preflight(given, LAPTOP) == []  # validation files given: nothing is split off


def test_lora_with_the_pretraining_learning_rate_is_a_warning(tmp_path):
    config = RunConfig(base_model=str(tmp_path / "base"), objective="sft", adapter={"kind": "lora"},
                       train=TrainSpec(lr=0.002, steps=300).to_dict())
    lr = _only(preflight(config, LAPTOP), "lr")
    assert lr.level == WARNING and "10× what LoRA usually starts from (0.0002)" in lr.message
    assert preflight(config.replace(train=TrainSpec(lr=2e-4).to_dict()), LAPTOP) == []
    assert method_defaults("sft", "lora") == {"lr": 2e-4, "steps": TrainSpec().steps}
    assert method_defaults("causal_lm")["lr"] == 1e-3 and method_defaults("dpo", "none")["lr"] == 5e-6


def test_settings_invalid_on_their_own_are_left_to_validate():
    broken = RunConfig(model={"family": "nope"}, objective="sft", adapter={"kind": "sideways"},
                       method_options={"val_fraction": "lots"}, train={"steps": 0, "warmup_steps": 0})
    assert broken.validate()  # validate names them ...
    assert all(f.level == WARNING for f in preflight(broken, LAPTOP))  # ... preflight neither raises nor blocks
    assert preflight(RunConfig(train={"steps": "many"}), LAPTOP) == []


def test_the_request_path_fits_the_model_to_its_dataset_first(dataset):
    # llama-1b at the dataset's 32-token windows: the fitted model's estimate, not the preset's 2048-token one
    request = RunRequest(dataset=str(dataset), preset="llama-1b", train={"batch_size": 2})
    assert [f.field for f in preflight_request(request, LAPTOP)] == []
    small = Machine(ram_free=8 * GIB, ram_total=16 * GIB)
    assert _only(preflight_request(request, small), "batch_size").level == ERROR
    prepared = prepare_run(RunRequest(dataset=str(dataset), preset="tiny", train={"steps": 5, "warmup_steps": 5}))
    assert [f.field for f in prepared.findings] == ["warmup_steps"]  # the CLI and the server get them too


def test_this_machine_reads_free_memory_without_loading_torch(monkeypatch):
    machine = mp.this_machine(probe_gpu=False)
    assert machine.ram_total > 0 and 0 < machine.ram_free <= machine.ram_total and not machine.gpu_known
    if Path("/proc/meminfo").is_file():
        monkeypatch.setitem(sys.modules, "psutil", None)  # psutil absent: the kernel's figures
        free, total = mp.ram_memory()
        assert abs(total - machine.ram_total) < GIB and free > 0


def test_training_memory_with_checkpointing_and_adapters_is_smaller():
    spec = preset("llama-1b")
    full = estimate_training_memory(spec, TrainingShape(batch_size=4))
    assert full == estimate_memory(spec, batch_size=4)
    checkpointed = estimate_training_memory(spec, TrainingShape(batch_size=4, gradient_checkpointing=True))
    assert checkpointed["activations"] < full["activations"] / 5 and checkpointed["weights"] == full["weights"]
    lora = estimate_training_memory(spec, TrainingShape(batch_size=4, adapter="lora"))
    qlora = estimate_training_memory(spec, TrainingShape(batch_size=4, adapter="qlora"))
    assert lora["optimizer"] < full["optimizer"] / 50 and qlora["weights"] < lora["weights"] / 3


def test_the_gpu_is_looked_at_only_where_torch_already_runs_cuda(monkeypatch):
    from types import SimpleNamespace

    calls = []
    cuda = SimpleNamespace(is_initialized=lambda: False, is_available=lambda: True, current_device=lambda: 0,
                           mem_get_info=lambda i: calls.append(i) or (70 * GIB, 80 * GIB),
                           get_device_name=lambda i: "Test GPU")
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    assert not mp.this_machine().gpu_known and calls == []  # CUDA not started: no context opened by looking
    seen = mp.this_machine(probe_gpu=True)
    assert (seen.gpu_free, seen.gpu_total, seen.gpu_name, seen.gpu_known) == (70 * GIB, 80 * GIB, "Test GPU", True)
    cuda.is_initialized = lambda: True
    assert mp.this_machine().gpu_total == 80 * GIB
    cuda.is_available = lambda: False
    none = mp.this_machine(probe_gpu=True)
    assert none.gpu_known and none.gpu_total == 0  # looked: no GPU, so the RAM decides


def test_records_of_a_table_are_its_rows_not_its_bytes(tmp_path):
    """A Parquet file's records are counted from its rows (a line count of its bytes would be nonsense)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = tmp_path / "qa.parquet"
    pq.write_table(pa.table({"ask": [f"q{i}" for i in range(7)], "reply": [f"a{i}" for i in range(7)]}), table)
    lines = tmp_path / "more.jsonl"
    lines.write_text('{"instruction": "x", "output": "y"}\n' * 3)
    assert pf.count_records([str(table)], 100) == 7
    assert pf.count_records([str(table), str(lines)], 100) == 10
    assert pf.count_records([str(table)], 5) >= 5  # enough for the check (whole batches are counted)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(table.read_bytes()[:40])
    assert pf.count_records([str(broken)], 100) is None  # damaged: the run's own checks name it
