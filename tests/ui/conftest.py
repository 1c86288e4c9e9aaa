"""Fixtures for the UI tests: a tiny prepared dataset and a tiny trained run, made once per module."""

from __future__ import annotations

import json

import pytest
from ui_helpers import prepare, train_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(dataset dir, run dir) of a tiny finished run, outside any test workspace."""
    root = tmp_path_factory.mktemp("trained")
    dataset = prepare(root / "corpus", root / "dataset")
    return dataset, train_run(dataset, root / "run")


@pytest.fixture
def populated_workspace(workspace, trained):
    """A workspace holding a copy of the tiny dataset and run."""
    import shutil

    dataset, run = trained
    shutil.copytree(dataset, workspace.folder("datasets") / "tiny-data")
    shutil.copytree(run, workspace.folder("runs") / "tiny-run")
    return workspace


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A tiny random llama with a chat template and a 128-token context (room for a few turns; its replies vary
    with the seed)."""
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec

    folder = tmp_path_factory.mktemp("chat") / "chatty"
    spec = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 128, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=3).save_pretrained(folder)
    hf_tokenizer(train_tokenizer(["the cat sat on the mat. hello, and then?"] * 30, "byte-bpe", 320)).save_pretrained(
        folder)
    return folder


@pytest.fixture
def base(tmp_path):
    """A folder standing in for a base model (the form only needs it to exist; nothing loads it here)."""
    folder = tmp_path / "base-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return str(folder)
