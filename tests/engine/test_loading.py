"""load_model from runs, checkpoints, exports and HF folders; every refusal case gives a clear UserError."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import load_model
from desktop_app.engine.specs import GenerateSpec, ModelSpec
from desktop_app.engine.workspace import Workspace, list_generatable

SPEC = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 32, init_std=0.2, tie_embeddings=False)


@pytest.fixture(scope="module")
def parts():
    tok = hf_tokenizer(train_tokenizer(["hello world, the cat sat on the mat"] * 20, "byte-bpe", 320))
    return build_model(SPEC, seed=1), tok


def _greedy_ids(loaded, prompt="hello"):
    events = stream_text(loaded, prompt, GenerateSpec(max_new_tokens=8, temperature=0.0))
    return next(e for e in events if e.type == "generation").token_ids


def _hf_folder(parts, path: Path) -> Path:
    model, tok = parts
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def reference_ids(parts, tmp_path_factory):
    return _greedy_ids(load_model(_hf_folder(parts, tmp_path_factory.mktemp("ref") / "m")))


def _save_run(parts, run_dir: Path, step: int = 5) -> Path:
    from desktop_app.engine.train.checkpoints import CheckpointPayload, save_checkpoint

    model, tok = parts
    payload = CheckpointPayload(step=step, model=model, optimizer_tensors={}, optimizer_meta={},
                                trainer_state={"step": step}, run_config={}, model_spec=SPEC.to_dict(),
                                write_tokenizer=tok.save_pretrained)
    return save_checkpoint(run_dir, payload)


def test_hf_folder_loads_and_generates(parts, tmp_path, reference_ids):
    loaded = load_model(_hf_folder(parts, tmp_path / "m"))
    assert loaded.kind == "hf" and loaded.name == "m" and not loaded.warnings
    assert loaded.spec == SPEC.replace(dropout=0.0)
    assert loaded.tokenizer.is_fast and loaded.tokenizer.eos_token == "<|endoftext|>"
    assert loaded.tokenizer.chat_template  # survives save/load, so chat mode works on exports
    assert not loaded.model.training
    assert len(reference_ids) == 8


def test_export_folder_is_recognised(parts, tmp_path, reference_ids):
    folder = _hf_folder(parts, tmp_path / "export")
    (folder / "model_spec.json").write_text(json.dumps(SPEC.to_dict()))
    loaded = load_model(folder)
    assert loaded.kind == "export" and loaded.spec == SPEC
    assert _greedy_ids(loaded) == reference_ids


def test_run_and_checkpoint_folders(parts, tmp_path, reference_ids):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="no committed checkpoint"):
        (run / "checkpoints").mkdir(parents=True)
        load_model(run)
    _save_run(parts, run, 5)
    newest = _save_run(parts, run, 9)
    loaded = load_model(run)
    assert loaded.kind == "run" and loaded.path == newest and "step 9" in loaded.name
    assert _greedy_ids(loaded) == reference_ids
    direct = load_model(newest)
    assert direct.kind == "checkpoint" and direct.path == newest


def test_damaged_checkpoint_is_refused_and_run_falls_back(parts, tmp_path):
    run = tmp_path / "run"
    older = _save_run(parts, run, 5)
    newest = _save_run(parts, run, 9)
    weights = newest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(UserError, match="damaged"):
        load_model(newest)
    assert load_model(run).path == older  # the newest checkpoint that verifies


def test_missing_things_give_clear_errors(parts, tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no config\.json"):
        load_model(tmp_path / "empty")
    folder = _hf_folder(parts, tmp_path / "no-tok")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    with pytest.raises(UserError, match="no tokenizer"):
        load_model(folder)
    folder = _hf_folder(parts, tmp_path / "no-weights")
    (folder / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weights"):
        load_model(folder)
    with pytest.raises(UserError, match="is a file"):
        load_model(folder / "config.json")
    (folder / "config.json").write_text("{not json")
    with pytest.raises(UserError, match="not readable JSON"):
        load_model(folder)


def test_remote_code_is_refused_and_never_run(parts, tmp_path):
    folder = _hf_folder(parts, tmp_path / "custom")
    marker = tmp_path / "ran"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="evil-net", auto_map={"AutoModelForCausalLM": "modeling_evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="trust_remote_code"):
        load_model(folder)
    assert not marker.exists()


def test_pickle_state_dict_loads_with_weights_only(parts, tmp_path, reference_ids):
    folder = _hf_folder(parts, tmp_path / "pickled")
    state = load_model(folder).model.state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    loaded = load_model(folder)
    assert _greedy_ids(loaded) == reference_ids


class _Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_not_executed(parts, tmp_path):
    folder = _hf_folder(parts, tmp_path / "evil")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    torch.save({"model.embed_tokens.weight": _Evil(str(marker))}, folder / "pytorch_model.bin")
    with pytest.raises(UserError, match="refused"):
        load_model(folder)
    assert not marker.exists()


def test_nonfinite_weights_are_reported(parts, tmp_path):
    _model, tok = parts
    folder = tmp_path / "nan"
    broken = build_model(SPEC, seed=1)
    with torch.no_grad():
        broken.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
        broken.lm_head.weight[1, 1] = float("inf")
    broken.save_pretrained(folder)
    tok.save_pretrained(folder)
    with pytest.raises(UserError, match="NaN or infinite") as info:
        load_model(folder)
    assert "down_proj" in str(info.value)
    loaded = load_model(folder, allow_nonfinite=True)
    assert len(loaded.warnings) == 1 and "lm_head" in loaded.warnings[0]


def test_list_generatable(parts, tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    _save_run(parts, ws.folder("runs") / "run-a", 3)
    (ws.folder("runs") / "run-empty" / "checkpoints").mkdir(parents=True)
    export = _hf_folder(parts, ws.folder("exports") / "exp")
    (export / "model_spec.json").write_text(json.dumps(SPEC.to_dict()))
    _hf_folder(parts, ws.folder("models") / "hfm")
    (ws.folder("models") / "junk").mkdir()
    found = {(c.path.name, c.kind) for c in list_generatable(ws)}
    assert found == {("run-a", "run"), ("exp", "export"), ("hfm", "hf")}
    assert {c.path.name for c in list_generatable(ws.root)} == {"run-a", "exp", "hfm"}
    shutil.rmtree(ws.root)
