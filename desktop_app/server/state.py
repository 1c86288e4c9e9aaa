"""What the routes share: the settings, the served model and its batcher, the workspace, the runs."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request

from desktop_app.engine.model.hub_cache import cache_repo_of
from desktop_app.server.errors import ApiError

DEFAULT_JSON_LIMIT = 8 << 20  # chat histories can be long, but never megabytes of JSON
DEFAULT_UPLOAD_LIMIT = 256 << 20


@dataclass
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    json_limit: int = DEFAULT_JSON_LIMIT
    upload_limit: int = DEFAULT_UPLOAD_LIMIT
    cors_origins: list[str] = field(default_factory=list)


def model_id_for(path: str | Path) -> str:
    """The id clients pass as `model`: the folder's (or GGUF file's) name, reduced to URL-safe characters; a snapshot
    of the Hugging Face cache goes by its repository's name, not its commit hash (nor a blob's hash for a file)."""
    p = Path(path).expanduser()
    p = Path(os.path.abspath(p)) if p.is_file() else p.resolve()
    repo = cache_repo_of(p) if p.is_dir() else ""
    name = repo.rsplit("/", 1)[-1] if repo else p.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "model"


@dataclass
class ServedModel:
    """The model behind /v1: its id, the loaded model and the batcher decoding for it."""

    id: str
    loaded: Any
    batcher: Any
    created: int = field(default_factory=lambda: int(time.time()))

    def card(self) -> dict[str, Any]:
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": "azr-model-trainer",
                "root": str(self.loaded.path), "context_length": self.batcher.context}


@dataclass
class ServerState:
    settings: ServerSettings
    workspace: Any  # desktop_app.engine.workspace.Workspace
    served: ServedModel | None
    runs: Any  # desktop_app.server.runs.RunManager
    monitor: Any  # desktop_app.server.monitor.Monitor


def get_state(request: Request) -> ServerState:
    return request.app.state.azr


def served_model(request: Request, model: str) -> ServedModel:
    """The served model when `model` names it; 404 in OpenAI's words otherwise."""
    served = get_state(request).served
    if served is None:
        raise ApiError(404, "no model is being served: start the server with a MODEL folder", param="model",
                       code="model_not_found")
    if model != served.id:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves '{served.id}' "
                            "(see GET /v1/models)", param="model", code="model_not_found")
    return served
