"""Atomic checkpoints: commit marker, verification, fallback, retention, failures that lose nothing."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch

from desktop_app.engine import run_folder as rf
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.specs import ModelSpec, TrainSpec
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.optim import build_optimizer, optimizer_state_to_flat


def _payload(step: int, model=None) -> ckpt.CheckpointPayload:
    model = model or build_model(ModelSpec("llama", 64, 16, 1, 2, 2, 32, 16), seed=0)
    opt = build_optimizer(model, TrainSpec())
    model(input_ids=torch.zeros(1, 4, dtype=torch.long)).logits.sum().backward()
    opt.step()
    tensors, meta = optimizer_state_to_flat(opt)
    return ckpt.CheckpointPayload(step=step, model=model, optimizer_tensors=tensors, optimizer_meta=meta,
                                  trainer_state={"step": step, "last_val_loss": None}, run_config={"seed": 1},
                                  model_spec={"family": "llama"}, rng_tensors={"torch_cpu": torch.get_rng_state()})


def test_save_commits_a_loadable_hf_folder(tmp_path: Path):
    path = ckpt.save_checkpoint(tmp_path, _payload(3))
    assert path.name == "step-00000003"
    manifest = rf.verify_checkpoint(path)
    assert set(rf.REQUIRED_FILES) <= set(manifest["files"])
    assert "manifest.json" not in manifest["files"]
    assert rf.list_committed(tmp_path) == [path]
    assert not [p for p in rf.checkpoints_dir(tmp_path).iterdir() if p.name.startswith(".")]
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(str(path))
    assert loaded.config.model_type == "llama"
    data = ckpt.load_checkpoint(path)
    assert data.step == 3 and data.trainer_state["step"] == 3 and "torch_cpu" in data.rng_tensors


def test_folder_without_manifest_is_not_committed(tmp_path: Path):
    good = ckpt.save_checkpoint(tmp_path, _payload(1))
    half = rf.checkpoints_dir(tmp_path) / "step-00000002"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")
    assert rf.list_committed(tmp_path) == [good]
    assert rf.latest_checkpoint(tmp_path) == good


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "manifest"])
def test_corrupt_newest_falls_back_naming_the_bad_file(tmp_path: Path, damage: str):
    model = build_model(ModelSpec("llama", 64, 16, 1, 2, 2, 32, 16), seed=0)
    first = ckpt.save_checkpoint(tmp_path, _payload(1, model))
    second = ckpt.save_checkpoint(tmp_path, _payload(2, model))
    target = second / ("manifest.json" if damage == "manifest" else "optimizer.safetensors")
    if damage == "flip":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-10])
    elif damage == "delete":
        target.unlink()
    else:
        target.write_text("{not json", encoding="utf-8")
    with pytest.raises(rf.CheckpointError, match=str(target).replace("+", r"\+")):
        rf.verify_checkpoint(second)
    path, problems = rf.find_resumable(tmp_path)
    assert path == first
    assert len(problems) == 1 and str(target) in problems[0]


def test_retention_keeps_last_k_plus_best(tmp_path: Path):
    model = build_model(ModelSpec("llama", 64, 16, 1, 2, 2, 32, 16), seed=0)
    for step in range(1, 7):
        ckpt.save_checkpoint(tmp_path, _payload(step, model))
    removed = ckpt.apply_retention(tmp_path, keep_last=2, keep_steps={2})
    assert [rf.step_of(p) for p in rf.list_committed(tmp_path)] == [2, 5, 6]
    assert {rf.step_of(p) for p in removed} == {1, 3, 4}
    assert not [p for p in rf.checkpoints_dir(tmp_path).iterdir() if p.name.startswith(".")]


def test_disk_full_names_path_and_space_and_keeps_previous(tmp_path: Path, monkeypatch):
    model = build_model(ModelSpec("llama", 64, 16, 1, 2, 2, 32, 16), seed=0)
    first = ckpt.save_checkpoint(tmp_path, _payload(1, model))

    def full(path, tensors, metadata=None):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(ckpt, "_write_tensors", full)
    with pytest.raises(rf.CheckpointError) as info:
        ckpt.save_checkpoint(tmp_path, _payload(2, model))
    msg = str(info.value)
    assert "disk is full" in msg and str(rf.checkpoints_dir(tmp_path)) in msg
    assert "needs about" in msg and "MB" in msg and "free" in msg and first.name in msg
    assert rf.list_committed(tmp_path) == [first]
    rf.verify_checkpoint(first)
    assert not [p for p in rf.checkpoints_dir(tmp_path).iterdir() if p.name.startswith(".")]


def test_unwritable_location_is_a_clear_error(tmp_path: Path):
    (tmp_path / "checkpoints").write_text("a file where the folder should be")  # fails even as root
    with pytest.raises(rf.CheckpointError, match="could not save the step 1 checkpoint"):
        ckpt.save_checkpoint(tmp_path, _payload(1))


def test_crash_inside_save_leaves_only_a_hidden_staging_folder(tmp_path: Path, monkeypatch):
    seen = []

    def boom(staging: Path) -> None:
        seen.append(sorted(p.name for p in staging.iterdir()))
        raise KeyboardInterrupt  # like a kill in the window between staging and commit

    monkeypatch.setattr(ckpt, "save_pause_hook", boom)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, _payload(1))
    assert "model.safetensors" in seen[0] and "manifest.json" not in seen[0]
    assert rf.list_committed(tmp_path) == []
    assert rf.latest_checkpoint(tmp_path) is None


def test_saving_the_same_step_twice_replaces_it(tmp_path: Path):
    model = build_model(ModelSpec("llama", 64, 16, 1, 2, 2, 32, 16), seed=0)
    ckpt.save_checkpoint(tmp_path, _payload(4, model))
    path = ckpt.save_checkpoint(tmp_path, _payload(4, model))
    assert rf.list_committed(tmp_path) == [path]
    rf.verify_checkpoint(path)
    assert json.loads((path / "trainer_state.json").read_text())["step"] == 4
