"""Helpers for the server tests: a tiny model folder built from a spec (nothing downloaded), a server in a
thread on a free 127.0.0.1 port, and the engine's own generation to compare against."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.specs import GenerateSpec, ModelSpec

CORPUS = ["hello world, the cat sat on the mat and the dog ran in the park."] * 20


def make_model_dir(folder: Path, *, family: str = "llama", context: int = 64) -> Path:
    """A tiny random model + tokenizer (with chat tokens and template). init_std 0.2 gives peaked
    distributions, so greedy decoding never hinges on a near-tie between two tokens."""
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
    from desktop_app.engine.model.architecture import build_model

    heads = (2, 2) if family == "gpt2" else (4, 2)
    spec = ModelSpec(family, 320, 64, 2, heads[0], heads[1], 96, context, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=2).save_pretrained(folder)
    hf_tokenizer(train_tokenizer(CORPUS, "byte-bpe", 320)).save_pretrained(folder)
    return folder


def engine_text(loaded: Any, prompt: str, **settings: Any) -> Any:
    """The GenerationStats of `generate` (the engine's stream_text) for one sample."""
    from desktop_app.engine.generate.decode import stream_text

    spec = GenerateSpec(**{"top_k": 0, **settings})
    return next(e for e in stream_text(loaded, prompt, spec) if e.type == "generation")


@contextlib.contextmanager
def running_server(workspace_root: Path, model_dir: Path | None = None, **settings: Any) -> Iterator[Any]:
    """(url, app state) of a server in a background thread; stopped (and its batcher closed) on exit."""
    from desktop_app.engine.workspace import Workspace
    from desktop_app.server.app import create_app
    from desktop_app.server.serving import ServerThread, load_served
    from desktop_app.server.state import ServerSettings

    served = load_served(str(model_dir), max_batch=settings.pop("max_batch", 32)) if model_dir else None
    app = create_app(ServerSettings(**settings), Workspace.open(workspace_root), served)
    server = ServerThread(app)
    server.start()
    try:
        yield server.url, app.state.azr
    finally:
        server.stop()
