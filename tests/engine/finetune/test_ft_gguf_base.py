"""A GGUF file as a fine-tuning base: LoRA trains on it (dequantized), run.json records the file and its sha256,
resume continues on the same file and refuses another one at the same path; the file is never modified."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from ft_helpers import ft_config, repeat_chats, write_jsonl
from gguf_helpers import byte_bpe, trained_folder

from desktop_app.engine.errors import UserError


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from desktop_app.engine.export.hf import export_model

    root = tmp_path_factory.mktemp("gguf-base")
    src = trained_folder(root, "llama", byte_bpe(), steps=5)
    out = {}
    for gguf_type in ("f32", "q8_0"):
        out[gguf_type] = root / f"llama-{gguf_type}.gguf"
        assert list(export_model(src, "gguf", out[gguf_type], gguf_type=gguf_type))[-1].reason == "completed"
    return out


def test_a_gguf_base_records_the_file_checksum_and_resume_refuses_another_file(exported, tmp_path):
    from desktop_app.engine.model.folders import resolve_base, weights_sha256
    from desktop_app.engine.train.loop import train

    base = tmp_path / "base.gguf"
    shutil.copy(exported["f32"], base)
    info = resolve_base(base)
    assert (info.kind, info.model_type, info.folder) == ("gguf", "llama", base.resolve())
    assert weights_sha256(info) == hashlib.sha256(base.read_bytes()).hexdigest()
    chats = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(12))
    config = ft_config(base, [chats], steps=4, save_every=2, adapter={"kind": "lora", "rank": 4, "alpha": 8},
                       options={"max_len": 64})
    run = tmp_path / "lora"
    gen = train(config, run)
    for event in gen:
        if event.type == "checkpoint":
            break
    gen.close()
    recorded = json.loads((run / "run.json").read_text())
    assert recorded["base_model"] == str(base.resolve())
    assert recorded["base_model_sha256"] == hashlib.sha256(base.read_bytes()).hexdigest()
    before = base.read_bytes()
    events = list(train(config, run, resume=True))
    assert events[-1].reason == "completed" and base.read_bytes() == before  # resumed; base untouched
    shutil.copy(exported["q8_0"], base)  # another file at the same path
    with pytest.raises(UserError, match="has changed since"):
        list(train(config, run, resume=True))
    from desktop_app.engine.specs import RunConfig

    with pytest.raises(UserError, match="has changed"):  # the recorded config, on a new run, too
        list(train(RunConfig.load(run / "run.json"), tmp_path / "lora2"))
