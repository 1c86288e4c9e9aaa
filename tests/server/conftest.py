"""Fixtures for the server tests (helpers in server_helpers.py, a module name no other conftest shadows)."""

from __future__ import annotations

import pytest
from server_helpers import make_model_dir, running_server


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("served") / "tiny-llama")


@pytest.fixture(scope="session")
def loaded(model_dir):
    from desktop_app.engine.model.loading import load_model

    return load_model(model_dir)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """(base url, server state) of a server on 127.0.0.1 serving the tiny model, shared by a module."""
    with running_server(tmp_path_factory.mktemp("ws"), model_dir) as handle:
        yield handle


@pytest.fixture
def openai_client(server):
    import openai

    url, _ = server
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        yield client
