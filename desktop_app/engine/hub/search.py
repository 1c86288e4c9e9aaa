"""Search the Hugging Face Hub for text-generation models, sorted and filtered as a person chooses a model: by
downloads, recency or likes; by size (parameter count); by format (safetensors weights or GGUF files).

One request (list_models with `expand`, so each result carries its downloads, likes, date, gating and parameter
count without a request per model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.hub.details import iso_date
from desktop_app.engine.hub.errors import hub_error
from desktop_app.engine.hub.network import hub_api, online

SORTS = ("downloads", "recent", "likes")
SIZES = ("any", "under 1B", "1B-3B", "3B-8B", "over 8B")
FORMATS = ("any", "safetensors", "gguf")
_SORT_PARAM = {"downloads": "downloads", "recent": "last_modified", "likes": "likes"}
_SIZE_PARAM = {"any": None, "under 1B": "max:1B", "1B-3B": "min:1B,max:3B", "3B-8B": "min:3B,max:8B",
               "over 8B": "min:8B"}
_EXPAND = ["downloads", "likes", "lastModified", "gated", "pipeline_tag", "safetensors", "gguf", "tags"]
MAX_LIMIT = 200


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    downloads: int
    likes: int
    last_modified: str  # ISO date, or ""
    parameters: int  # 0: unknown
    gated: bool
    has_gguf: bool
    pipeline_tag: str


def search_models(query: str, *, sort: str = "downloads", size: str = "any", file_format: str = "any",
                  limit: int = 30) -> list[HubModel]:
    """Text-generation models matching `query` (words of their names; empty: all), best first by `sort`."""
    for value, choices, name in ((sort, SORTS, "sort"), (size, SIZES, "size"), (file_format, FORMATS, "format")):
        if value not in choices:
            raise UserError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    if not 1 <= int(limit) <= MAX_LIMIT:
        raise UserError(f"the number of results must be between 1 and {MAX_LIMIT}, got {limit}")
    try:
        with online():
            found = list(hub_api().list_models(
                search=query.strip() or None, pipeline_tag="text-generation", sort=_SORT_PARAM[sort],
                num_parameters=_SIZE_PARAM[size], filter=None if file_format == "any" else file_format,
                limit=int(limit), expand=_EXPAND))
    except Exception as exc:
        raise hub_error(exc, f"the search for {query!r}") from None
    return [hub_model(info) for info in found]


def hub_model(info: Any) -> HubModel:
    """A search result of huggingface_hub's ModelInfo."""
    tags = info.tags or []
    gguf = info.gguf or {}
    parameters = (info.safetensors.total if info.safetensors else 0) or gguf.get("total") or 0
    return HubModel(repo_id=info.id, downloads=int(info.downloads or 0), likes=int(info.likes or 0),
                    last_modified=iso_date(info.last_modified), parameters=int(parameters),
                    gated=bool(info.gated), has_gguf="gguf" in tags or bool(info.gguf),
                    pipeline_tag=str(info.pipeline_tag or ""))
