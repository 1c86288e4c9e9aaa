"""GGUF models other apps already keep on this computer: Ollama's store and LM Studio's models folder.

Ollama (OLLAMA_MODELS, else ~/.ollama/models, else the Linux service's /usr/share/ollama/.ollama/models):
`manifests/<registry>/<namespace>/<model>/<tag>` are small JSON files whose layers name blobs by digest; the
layer of media type `application/vnd.ollama.image.model` is the GGUF file (`blobs/sha256-<hex>`), the
`...image.template` layer its Go chat template. LM Studio (LMSTUDIO_MODELS, else ~/.lmstudio/models, else the
older ~/.cache/lm-studio/models): `<publisher>/<repository>/<file>.gguf`.

Listing reads only manifests and GGUF headers (model/gguf_file.py, bounds-checked), never weights: each model
comes with its size, architecture, weight type and, when this app cannot use it, the reason. Nothing here is
written; a store that does not exist is simply not listed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.gguf_file import check_loadable, read_header

MODEL_LAYER = "application/vnd.ollama.image.model"
TEMPLATE_LAYER = "application/vnd.ollama.image.template"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
_MAX_MANIFEST = 1 << 20
_MAX_FILES = 2000  # per store: a models folder is not a whole disk
_DEFAULT_REGISTRY = "registry.ollama.ai"


@dataclass(frozen=True)
class StoreModel:
    """A GGUF model found in another app's store."""

    source: str  # "ollama" | "lmstudio"
    name: str  # Ollama's model:tag, or LM Studio's publisher/repository/file
    path: Path  # the GGUF file (Ollama: its blob)
    size: int  # bytes
    architecture: str = ""
    quantization: str = ""
    parameters: int = 0
    template: Path | None = None  # Ollama's Go template blob, when the manifest names one
    problem: str | None = None  # why this app cannot use it; None when it can

    @property
    def usable(self) -> bool:
        return self.problem is None


def ollama_root(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path | None:
    """Ollama's models folder, when one exists."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    candidates = [Path(env["OLLAMA_MODELS"]).expanduser()] if env.get("OLLAMA_MODELS") else []
    candidates += [home / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    return next((c for c in candidates if (c / "manifests").is_dir()), None)


def lmstudio_root(env: Mapping[str, str] | None = None, home: Path | None = None) -> Path | None:
    """LM Studio's models folder, when one exists."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    candidates = [Path(env["LMSTUDIO_MODELS"]).expanduser()] if env.get("LMSTUDIO_MODELS") else []
    candidates += [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    return next((c for c in candidates if c.is_dir()), None)


def _blob(root: Path, digest: object) -> Path | None:
    """The blob file of a digest; None for anything that is not a plain sha256 digest (no path tricks)."""
    match = _DIGEST.match(digest) if isinstance(digest, str) else None
    if match is None:
        return None
    path = root / "blobs" / f"sha256-{match.group(1)}"
    return path if path.is_file() else None


def _describe(source: str, name: str, path: Path, template: Path | None = None) -> StoreModel:
    try:
        size = path.stat().st_size
    except OSError:
        size = 0
    try:
        header = read_header(path)
    except UserError as exc:
        return StoreModel(source, name, path, size, template=template, problem=str(exc))
    problem = None
    try:
        check_loadable(header)
    except UserError as exc:
        problem = str(exc)
    return StoreModel(source, name, path, size, header.architecture, header.quantization, header.parameters,
                      template, problem)


def _ollama_name(relative: Path) -> str:
    parts = relative.parts  # registry / namespace / model / tag
    if len(parts) < 4:
        return relative.as_posix()
    registry, namespace, model, tag = parts[-4], parts[-3], parts[-2], parts[-1]
    prefix = "" if registry == _DEFAULT_REGISTRY else f"{registry}/"
    prefix += "" if namespace == "library" and not prefix else f"{namespace}/"
    return f"{prefix}{model}:{tag}"


def ollama_models(root: Path) -> list[StoreModel]:
    """The models of an Ollama store, by manifest; manifests that are not JSON or name no GGUF layer are skipped."""
    found: list[StoreModel] = []
    manifests = root / "manifests"
    files = sorted(p for p in manifests.rglob("*") if p.is_file())[:_MAX_FILES]
    for manifest in files:
        try:
            if manifest.stat().st_size > _MAX_MANIFEST:
                continue
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        layers = data.get("layers") if isinstance(data, dict) else None
        if not isinstance(layers, list):
            continue
        model = template = None
        for layer in layers:
            if not isinstance(layer, dict):
                continue
            if layer.get("mediaType") == MODEL_LAYER and model is None:
                model = _blob(root, layer.get("digest"))
            elif layer.get("mediaType") == TEMPLATE_LAYER and template is None:
                template = _blob(root, layer.get("digest"))
        if model is not None:
            found.append(_describe("ollama", _ollama_name(manifest.relative_to(manifests)), model, template))
    return found


def lmstudio_models(root: Path) -> list[StoreModel]:
    """The .gguf files of an LM Studio models folder (vision projectors, mmproj-*.gguf, are not language models)."""
    found: list[StoreModel] = []
    for path in sorted(root.rglob("*.gguf"))[:_MAX_FILES]:
        if path.is_file() and not path.name.lower().startswith("mmproj"):
            found.append(_describe("lmstudio", path.relative_to(root).as_posix(), path))
    return found


def find_store_models(env: Mapping[str, str] | None = None, home: Path | None = None) -> list[StoreModel]:
    """Every GGUF model in Ollama's and LM Studio's stores that exist here (Ollama's first), usable or not."""
    found: list[StoreModel] = []
    root = ollama_root(env, home)
    if root is not None:
        found += ollama_models(root)
    root = lmstudio_root(env, home)
    if root is not None:
        found += lmstudio_models(root)
    return found
