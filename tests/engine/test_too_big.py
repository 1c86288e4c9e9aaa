"""Too big for this machine (engine/train/memory_faults.py): refused before anything is allocated, through the one
train() every front end runs, with the app's estimate, what the machine has and what would fit; an out-of-memory in
the first steps reported the same way, the last checkpoint intact and the run resumable bit-exactly."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch
from patching import patch_everywhere
from train_helpers import make_dataset, step_losses, tiny_config

from desktop_app.cli import main
from desktop_app.engine import run_folder as rf
from desktop_app.engine.errors import UserError
from desktop_app.engine.objectives.causal_lm import CausalLMObjective
from desktop_app.engine.presets import preset
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train import memory_faults as mf
from desktop_app.engine.train import memory_plan as mp
from desktop_app.engine.train import preflight as pf
from desktop_app.engine.train.loop import train

GIB = 1 << 30
SMALL_LAPTOP = mp.Machine(ram_free=14 * GIB, ram_total=16 * GIB)  # no GPU
CPU_ALLOC = ("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to "
             "allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


def _qwen_base(folder: Path) -> Path:
    """A Qwen2-7B-shaped model folder: config.json only (a family the model designer cannot describe; no weights,
    so anything that tried to load it would fail otherwise)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944,
        "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "attention_bias": True}), encoding="utf-8")
    return folder


def _sft_config(base: Path, data: Path, **adapter) -> RunConfig:
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
                    * 20, encoding="utf-8")
    return RunConfig(base_model=str(base), objective="sft", data=[str(data)], adapter=adapter,
                     train=TrainSpec(batch_size=4, lr=5e-5, steps=5, warmup_steps=0, device="cpu").to_dict())


def _on(machine: mp.Machine, monkeypatch) -> None:
    patched = patch_everywhere(monkeypatch, mp, "this_machine", lambda probe_gpu=None: machine)
    assert mf.__name__ in patched  # a module imported later binds the patched one


# --- refused before allocating ---------------------------------------------------------------------------------

def test_a_base_of_another_family_too_big_for_all_the_ram_is_refused_before_loading(tmp_path, monkeypatch):
    base = _qwen_base(tmp_path / "qwen2-7b")
    config = _sft_config(base, tmp_path / "chats.jsonl")
    _on(SMALL_LAPTOP, monkeypatch)
    with pytest.raises(mf.TooBigForMachine) as refused:
        next(iter(train(config, tmp_path / "run")))
    message = str(refused.value)
    assert message.startswith("This run cannot fit this machine's RAM: its weights, gradients and optimizer state "
                              "alone need about 1") and "GiB (whatever the batch)" in message
    assert "more than the 16 GiB it has in all (14 GiB free)" in message
    assert "Would fit: QLoRA (a 4-bit base)" in message and "LoRA instead of full weights" not in message
    assert not (tmp_path / "run").exists()  # nothing created, nothing loaded
    # the front ends' preflight now estimates such a base too (it used to say nothing for a qwen2 config)
    finding = next(f for f in pf.preflight(config, SMALL_LAPTOP) if f.field == "batch_size")
    assert finding.level == pf.ERROR and "It cannot work here." in finding.message and "QLoRA" in finding.message


def test_qlora_on_the_same_base_passes_the_gate(tmp_path):
    base = _qwen_base(tmp_path / "qwen2-7b")
    qlora = _sft_config(base, tmp_path / "chats.jsonl", kind="qlora", rank=8)
    big = mp.Machine(ram_free=14 * GIB, ram_total=16 * GIB)
    mf.check_fits(qlora, "cpu", big)  # a 4-bit base, adapters' state only: ~5 GiB, within 16 GiB
    with pytest.raises(mf.TooBigForMachine):
        mf.check_fits(_sft_config(base, tmp_path / "chats.jsonl"), "cpu", big)


def test_the_gpu_that_trains_it_decides_and_8_bit_adam_counts_a_quarter():
    config = RunConfig(model=preset("llama-1b").to_dict(), train=TrainSpec(batch_size=1, device="cuda").to_dict())
    gpu = mp.Machine(ram_free=100 * GIB, ram_total=128 * GIB, gpu_free=11 * GIB, gpu_total=12 * GIB,
                     gpu_name="RTX 3060")
    with pytest.raises(mf.TooBigForMachine, match=r"cannot fit the GPU \(RTX 3060\).* more than the 12 GiB"):
        mf.check_fits(config, "cuda", gpu)
    mf.check_fits(config, "cpu", gpu)  # the same run on the 128 GiB of RAM: not refused here
    plan = mp.memory_plan(config, config.train_spec(), True)
    assert mf.fixed_bytes(plan, "adamw8bit") < mf.fixed_bytes(plan, "adamw")
    unknown = mp.Machine(ram_free=0, ram_total=0, gpu_known=False)
    mf.check_fits(config, "cpu", unknown)  # the machine does not say: no verdict, never a guess


def test_force_in_the_cli_cannot_start_what_exceeds_all_memory(dataset, tmp_path, monkeypatch, capsys):
    _on(mp.Machine(ram_free=2 * GIB, ram_total=4 * GIB), monkeypatch)
    argv = ["train", "--dataset", str(dataset), "--preset", "llama-1b", "--steps", "2", "--batch-size", "2",
            "--eval-every", "0", "--save-every", "0", "--threads", "1", "--out", str(tmp_path / "run"), "--force"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()  # the check before start, logged as --force asks; then the engine's refusal
    forced, refused = lines[0], lines[-1]
    assert forced.startswith("[error] check before start: Memory:")
    assert refused.startswith("error: This run cannot fit this machine's RAM")
    assert "4 GiB it has in all" in refused
    assert refused.endswith("Only a smaller model (Model tab), or a machine with more memory, would fit: a smaller "
                            "batch does not.")
    assert "Traceback" not in err and "bug" not in err
    assert not (tmp_path / "run" / "run.json").exists() and not rf.list_committed(tmp_path / "run")


def test_the_server_refuses_it_in_its_response(dataset, tmp_path, monkeypatch):
    import shutil

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "server"))
    from server_helpers import running_server

    _on(mp.Machine(ram_free=2 * GIB, ram_total=4 * GIB), monkeypatch)
    with running_server(tmp_path / "ws") as (url, state), httpx.Client(base_url=url, timeout=60) as client:
        shutil.copytree(dataset, state.workspace.folder("datasets") / "ds")
        response = client.post("/api/runs", json={"dataset": "ds", "preset": "llama-1b",
                                                  "train": {"steps": 2, "batch_size": 2, "threads": 1}})
        # the check before start (the engine's session, as for the window and the CLI) refuses it, unless forced
        assert response.status_code == 422, response.text
        assert "cannot work on this machine" in response.text and "2 GiB free" in response.text
        assert '\\"force\\": true' in response.text
        forced = client.post("/api/runs", json={"dataset": "ds", "preset": "llama-1b", "force": True,
                                                "train": {"steps": 2, "batch_size": 2, "threads": 1}})
        assert forced.status_code == 400, forced.text  # then the engine's own refusal before allocating
        assert "cannot fit this machine's RAM" in forced.text and "4 GiB it has in all" in forced.text
        listed = client.get("/api/runs").json()["runs"]
        assert all(r.get("state") != "running" for r in listed)


# --- out of memory in the first steps -------------------------------------------------------------------------

class OutOfMemoryAt(CausalLMObjective):
    """The allocator fails in every forward after the first `after` ones (of `kind`: the CPU allocator's error,
    Python's MemoryError or CUDA's)."""

    def __init__(self, after: int, kind: str = "cpu") -> None:
        super().__init__()
        self.after, self.kind, self.calls = after, kind, 0

    def loss(self, model, micro):
        self.calls += 1
        if self.calls > self.after:
            raise {"cpu": RuntimeError(CPU_ALLOC), "python": MemoryError(),
                   "cuda": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")}[self.kind]
        return super().loss(model, micro)


def test_an_out_of_memory_in_the_first_steps_is_reported_and_the_checkpoint_resumes_exactly(dataset, tmp_path):
    config = tiny_config(dataset, steps=6, batch_size=2, micro_batch_size=2, save_every=2)
    run_dir = tmp_path / "run"
    events = list(train(config, run_dir, objective=OutOfMemoryAt(2, "cpu")))  # steps 1-2, then none
    final = events[-1]
    assert final.type == "finished" and final.reason == "failed" and final.step == 2
    message = final.message
    assert message.startswith("Out of memory at step 3 on this machine's RAM (micro-batch 1).")
    assert "The app's estimate for it is about " in message and " is free now." in message
    assert "The last checkpoint (step-" in message and "step 2) is intact" in message
    assert f"train --resume {run_dir}" in message and "bug" not in message and "Traceback" not in message
    assert any(e.type == "log" and e.level == "error" and e.message == message for e in events)
    committed = rf.list_committed(run_dir)
    assert [rf.step_of(p) for p in committed] == [2]
    rf.verify_checkpoint(committed[-1])
    resumed = list(train(config, run_dir, resume=True))
    assert resumed[-1].reason == "completed"
    reference = list(train(config, tmp_path / "reference"))
    assert step_losses(resumed) == {s: v for s, v in step_losses(reference).items() if s > 2}


def test_memory_error_and_cuda_out_of_memory_read_the_same(dataset, tmp_path):
    for kind in ("python", "cuda"):
        events = list(train(tiny_config(dataset, steps=3, batch_size=2), tmp_path / kind,
                            objective=OutOfMemoryAt(0, kind)))
        assert events[-1].reason == "failed" and events[-1].message.startswith("Out of memory at step 1 on ")
        assert "No checkpoint had been saved yet" in events[-1].message


def test_out_of_memory_while_building_is_a_user_error_naming_the_checkpoint(dataset, tmp_path, monkeypatch):
    config = tiny_config(dataset, steps=2, batch_size=2, save_every=2)
    run_dir = tmp_path / "run"
    assert list(train(config, run_dir))[-1].reason == "completed"
    before = {p.name: p.stat().st_mtime_ns for p in (rf.list_committed(run_dir)[-1]).iterdir()}

    def no_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr("desktop_app.engine.train.loop.build_parts", no_memory)
    longer = config.replace(train={**config.train, "steps": 4})
    with pytest.raises(UserError) as failed:
        list(train(longer, run_dir, resume=True, accept_config_change=True))
    text = str(failed.value)
    assert text.startswith("Out of memory while building the model and optimizer on this machine's RAM")
    assert "The last checkpoint (step-" in text and "is intact" in text
    assert {p.name: p.stat().st_mtime_ns for p in (rf.list_committed(run_dir)[-1]).iterdir()} == before


def test_is_out_of_memory_knows_the_allocators_and_nothing_else():
    assert mf.is_out_of_memory(RuntimeError(CPU_ALLOC)) and mf.is_out_of_memory(MemoryError())
    assert mf.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    gave_up = UserError("out of memory even with a micro-batch of 1")
    gave_up.__cause__ = RuntimeError(CPU_ALLOC)
    assert mf.is_out_of_memory(gave_up)
    assert not mf.is_out_of_memory(RuntimeError("shape mismatch")) and not mf.is_out_of_memory(None)
    assert not mf.is_out_of_memory(OSError(28, "No space left on device"))


def test_where_the_estimate_said_it_fits_lighter_settings_are_offered(dataset):
    config = tiny_config(dataset, batch_size=8)
    moment = mf.OomMoment(step=4, device="cpu", micro_batch=8)
    text = str(mf.out_of_memory_error(config, moment, mp.Machine(ram_free=64 * GIB, ram_total=64 * GIB)))
    assert "Settings that need less: a micro-batch of " in text and "gradient checkpointing" in text
    tight = mp.Machine(ram_free=1 << 20, ram_total=64 * GIB)  # 1 MiB free: the estimate's own verdict
    assert "Would fit" in str(mf.out_of_memory_error(config, moment, tight)) or \
        "The least these settings get to" in str(mf.out_of_memory_error(config, moment, tight))
