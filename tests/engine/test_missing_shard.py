"""A model folder missing a weight shard that its model.safetensors.index.json names (issue 41): every loader and
the fine-tune setup refuse it with one line naming the shard, before anything is loaded; back in place, it loads."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from desktop_app.cli import main
from desktop_app.engine.errors import UserError
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.folders import missing_shards, resolve_base
from desktop_app.engine.model.loading import load_model
from desktop_app.engine.specs import ModelSpec


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer

    folder = tmp_path_factory.mktemp("sharded") / "model"
    spec = ModelSpec("llama", 320, 64, 2, 4, 2, 96, 64, tie_embeddings=False)
    build_model(spec, seed=2).save_pretrained(folder, max_shard_size="60KB")
    texts = ["the cat sat on the mat", "a dog ran to the park", "birds sang about the sun"] * 20
    hf_tokenizer(train_tokenizer(texts, "byte-bpe", 320)).save_pretrained(folder)
    return folder


def _shards(folder: Path) -> list[str]:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    return sorted(set(index["weight_map"].values()))


def test_the_fixture_is_sharded_and_whole(sharded):
    assert len(_shards(sharded)) >= 3
    assert missing_shards(sharded) == ("model.safetensors.index.json", [])
    assert load_model(sharded, device="cpu").model is not None


def test_missing_shard_is_named_then_loads_once_back(sharded, tmp_path, capsys):
    shard = _shards(sharded)[1]
    os.replace(sharded / shard, tmp_path / shard)
    try:
        with pytest.raises(UserError) as err:
            load_model(sharded, device="cpu")
        message = str(err.value)
        assert shard in message and "model.safetensors.index.json" in message and "\n" not in message
        assert "copy the shard back or download the model again" in message
        with pytest.raises(UserError, match=shard):
            resolve_base(sharded)  # a fine-tune refuses it at setup, before loading a byte
        code = main(["generate", str(sharded), "--prompt", "the cat", "--max-new-tokens", "2"])
        err_text = capsys.readouterr().err.strip().splitlines()[-1]
        assert code == 2 and shard in err_text and "bug" not in err_text
    finally:
        os.replace(tmp_path / shard, sharded / shard)
    loaded = load_model(sharded, device="cpu")
    assert all(torch.isfinite(p).all() for p in loaded.model.parameters())


def test_several_missing_shards_are_counted(sharded, tmp_path):
    shards = _shards(sharded)[:2]
    for name in shards:
        os.replace(sharded / name, tmp_path / name)
    try:
        with pytest.raises(UserError, match=r"and 1 more"):
            load_model(sharded, device="cpu")
    finally:
        for name in shards:
            os.replace(tmp_path / name, sharded / name)
