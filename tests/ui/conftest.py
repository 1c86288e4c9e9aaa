"""Fixtures for the UI tests: a tiny prepared dataset and a tiny trained run, made once per module."""

from __future__ import annotations

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
