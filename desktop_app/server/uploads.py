"""Uploaded text files -> a dataset in the workspace, with the window's per-file verdicts.

Files are stored under `uploads/<dataset>-<time>/` in the workspace with sanitised names (never
overwriting anything), then the engine's `prepare_dataset` (or `append_to_dataset`) judges and
tokenizes them exactly as the Data tab does. The upload folder stays: the dataset's manifest names
its sources, and appending the same file later is recognised by its checksum.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from desktop_app.engine.events import FileVerdict
from desktop_app.engine.workspace import slugify
from desktop_app.server.errors import ApiError
from desktop_app.server.security import safe_upload_name, unique_child

UPLOADS = "uploads"
MAX_FILES = 200


def store_uploads(workspace: Any, dataset_name: str, files: list[tuple[str | None, Any]]) -> list[tuple[str, Path]]:
    """Copy (original name, binary file object) pairs into a fresh upload folder. Every name is checked
    before anything is written; returns (original name, stored path) pairs."""
    if not files:
        raise ApiError(400, "no files in the upload: send one or more 'files' parts", param="files")
    if len(files) > MAX_FILES:
        raise ApiError(400, f"too many files in one upload ({len(files)}; at most {MAX_FILES})", param="files")
    names = [safe_upload_name(name) for name, _ in files]
    base = workspace.root / UPLOADS / f"{slugify(dataset_name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    folder, n = base, 2
    while folder.exists():
        folder, n = base.with_name(f"{base.name}-{n}"), n + 1
    folder.mkdir(parents=True)
    stored = []
    for (original, fileobj), name in zip(files, names, strict=True):
        target = unique_child(folder, name)
        with open(target, "xb") as out:  # "x": never replace an existing file
            shutil.copyfileobj(fileobj, out, 1 << 20)
        stored.append((original or name, target))
    return stored


def prepare_uploads(workspace: Any, dataset_name: str, stored: list[tuple[str, Path]], spec: Any,
                    append_to: Path | None) -> dict[str, Any]:
    """Build (or extend) the dataset; returns its name, state and one verdict per uploaded file."""
    from desktop_app.engine.data.prepare import append_to_dataset, prepare_dataset  # lazy: numpy

    paths = [p for _, p in stored]
    if append_to is not None:
        out = append_to
        events = append_to_dataset(out, paths)
    else:
        out = workspace.new_path("datasets", dataset_name)
        events = prepare_dataset(paths, out, spec)
    verdicts: dict[str, FileVerdict] = {}
    finished = None
    for event in events:
        if isinstance(event, FileVerdict):
            verdicts[str(Path(event.path))] = event  # the last verdict of a file carries its token count
        elif event.type == "finished":
            finished = event
    originals = {str(p): original for original, p in stored}
    files = []
    for path in paths:
        v = verdicts.get(str(path))
        entry = {"filename": originals[str(path)], "stored_as": path.name}
        if v is None:
            entry.update(verdict="not-checked", reason="the file was not reached")
        else:
            entry.update(verdict=v.verdict, reason=v.reason, format=v.format, encoding=v.encoding, size=v.size,
                         documents=v.documents, tokens=v.tokens)
        files.append(entry)
    state = finished.reason if finished is not None else "failed"
    return {"dataset": out.name, "path": str(out), "state": state,
            "message": finished.message if finished is not None else "", "files": files,
            "summary": finished.result if finished is not None else {}}
