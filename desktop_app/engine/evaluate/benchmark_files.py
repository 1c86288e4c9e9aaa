"""Local data files of a harness task YAML (torch-free, harness-free): where they are on disk.

A task of a benchmark folder reads its items with `dataset_path: json` (or csv, parquet, text) and
`dataset_kwargs: {data_files: ...}`. The harness hands those paths to `datasets.load_dataset` unchanged, which
reads a relative path from the current directory: a folder of tasks would work only when started from inside
it. We read a relative path from the YAML's own folder instead, the way the YAML's `include:` lines are read.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow")


def _resolved(path: Any, folder: Path) -> Any:
    """A path (or glob) joined to `folder` when relative; absolute paths and URLs as they are."""
    if not isinstance(path, str) or "://" in path or Path(path).expanduser().is_absolute():
        return path
    return str(folder / path)


def resolve_data_files(dataset_kwargs: dict[str, Any] | None, folder: Path) -> dict[str, Any]:
    """A copy of a task's `dataset_kwargs` whose relative `data_files` (a path, a list, or a split -> path(s) map)
    and `data_dir` are read from `folder` (the YAML's folder); the rest unchanged."""
    kwargs = copy.deepcopy(dict(dataset_kwargs or {}))
    files = kwargs.get("data_files")
    if isinstance(files, dict):
        kwargs["data_files"] = {split: [_resolved(p, folder) for p in value] if isinstance(value, list)
                                else _resolved(value, folder) for split, value in files.items()}
    elif isinstance(files, list):
        kwargs["data_files"] = [_resolved(p, folder) for p in files]
    elif files is not None:
        kwargs["data_files"] = _resolved(files, folder)
    if "data_dir" in kwargs:
        kwargs["data_dir"] = _resolved(kwargs["data_dir"], folder)
    return kwargs


def has_relative_files(config: dict[str, Any]) -> bool:
    """Whether a task config reads local files by a path relative to its YAML (what resolve_data_files changes)."""
    kwargs = config.get("dataset_kwargs")
    if not isinstance(kwargs, dict) or str(config.get("dataset_path", "")) not in LOCAL_BUILDERS:
        return False
    return resolve_data_files(kwargs, Path("/")) != kwargs
