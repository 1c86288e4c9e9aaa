"""`--file PATTERN` of the verbs that open one model (generate, serve, export; train's --base): which GGUF file of a Hub
repository pulled earlier, as `models pull --file` picks it, e.g. `generate ORG/NAME --file '*Q4_K_M.gguf'` (the
same as `ORG/NAME:Q4_K_M`). The engine finds the file in the Hugging Face cache (engine/model/hub_cache.py); this
module only adds the flag and hands the pair over.
"""

from __future__ import annotations

import argparse

from desktop_app.engine.model.hub_cache import resolve_model_reference


def add_file_argument(parser: argparse.ArgumentParser, model: str = "MODEL", default: str | None = "") -> None:
    """--file PATTERN, described for the argument that names the model (`model`: MODEL, --base)."""
    parser.add_argument("--file", default=default, metavar="PATTERN",
                        help=f"with {model} a Hub id pulled earlier (ORG/NAME): its GGUF file that this shell-style "
                        "pattern matches, as `models pull --file` takes it, e.g. '*Q4_K_M.gguf' (any case; the "
                        f"same as {model} ORG/NAME:Q4_K_M)")


def chosen_model(model: str, pattern: str | None) -> str:
    """The model as the engine opens it: as given (the engine resolves paths and Hub ids itself), or with a pattern
    the cached GGUF file it picks."""
    if not pattern:
        return model
    return str(resolve_model_reference(model, pattern))
