"""Judge many sources at once: documents are extracted in parallel, with progress per file.

pypdf, python-docx and trafilatura are pure Python, so threads would share one core: document files (PDF, EPUB,
DOCX, HTML) are read in a process pool (spawned, never forked: the window and the tokenizers run threads), each
reporting its pages or chapters as they are read. Text, JSON Lines and tables are read here, in order, while the
pool works (the decoder and pyarrow are fast). Verdicts come back in discovery order, duplicates marked as `scan`
marks them. The extracted text lands in documents.py's cache, so the passes after the scan do not extract again.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from desktop_app.engine.data.documents import document_kind
from desktop_app.engine.data.ingest import FileProblem, SourceInfo, discover, inspect_file, mark_duplicate
from desktop_app.engine.data.items import FileProgress
from desktop_app.engine.events import Controls

MAX_WORKERS = 8
__all__ = ["FileProgress", "default_workers", "inspect_job", "scan_sources"]
_PROGRESS: Any = None  # the queue a pool worker reports progress to (set once per worker process)


def default_workers() -> int:
    """Processes for extraction: one per core, at most MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def _init_worker(progress: Any) -> None:
    global _PROGRESS
    _PROGRESS = progress


def inspect_job(path: str, problem: FileProblem | None, columns: dict[str, str] | None) -> SourceInfo:
    """One source judged in a worker, its progress sent to the pool's queue."""
    sink = _PROGRESS
    last = [0]

    def report(done: int, total: int) -> None:  # at most ~50 reports per file, the last one always
        if sink is not None and (done == total or done - last[0] >= max(1, total // 50)):
            last[0] = done
            sink.put((path, done, total))

    return inspect_file(Path(path), problem, columns=columns, progress=report)


def _pool(workers: int) -> tuple[Executor, Any]:
    """A process pool (several workers) or one thread, and the queue its workers report progress to."""
    if workers >= 2:
        ctx = multiprocessing.get_context("spawn")
        progress = ctx.Queue()
        return ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(progress,)), progress
    progress = queue.Queue()
    return ThreadPoolExecutor(1, initializer=_init_worker, initargs=(progress,)), progress


def _drain(progress: Any, wait: float, judged: set[str]) -> Iterator[FileProgress]:
    """The progress reports waiting in the queue (a process pool's arrive late: those of files already judged are
    dropped, so no bar comes back after a verdict)."""
    with contextlib.suppress(queue.Empty, OSError, EOFError, ValueError):
        item = progress.get(timeout=wait)
        while True:
            if item[0] not in judged:
                yield FileProgress(*item)
            item = progress.get_nowait()


def _result(future: Future, path: Path) -> SourceInfo:
    try:
        return future.result()
    except Exception as exc:  # a worker that died (out of memory, killed): that file's verdict, the rest goes on
        info = SourceInfo(path=str(path), verdict="unreadable")
        info.reason = f"extraction stopped ({type(exc).__name__}: {exc}); try the file alone"
        return info


def scan_sources(paths: Iterable[str | Path], *, known_sha256: dict[str, str] | None = None,
                 columns: dict[str, str] | None = None, workers: int | None = None,
                 controls: Controls | None = None) -> Iterator[SourceInfo | FileProgress]:
    """Every source under `paths` judged (as ingest.scan judges it), documents in parallel: FileProgress while a
    document is read, then each SourceInfo in discovery order. controls.stop ends it at the next file."""
    found = list(discover(paths))  # stat only: cheap
    heavy = [i for i, (p, problem) in enumerate(found) if problem is None and document_kind(p)]
    n = max(1, min(workers or default_workers(), len(heavy)))
    seen: dict[str, str] = dict(known_sha256 or {})
    judged: set[str] = set()
    stop = controls.stop if controls is not None else None
    executor, progress = _pool(n) if heavy else (None, None)
    try:
        futures: dict[int, Future] = {}
        if executor is not None:
            futures = {i: executor.submit(inspect_job, str(found[i][0]), found[i][1], columns) for i in heavy}
        for i, (path, problem) in enumerate(found):
            if stop is not None and stop.is_set():
                return
            if i in futures:
                while not futures[i].done():
                    yield from _drain(progress, 0.1, judged)
                    if stop is not None and stop.is_set():
                        return
                info = _result(futures[i], path)
            else:
                info = inspect_file(path, problem, columns=columns)
            if progress is not None:
                yield from _drain(progress, 0.0, judged)
            judged.add(str(path))
            mark_duplicate(info, seen)
            yield info
    finally:
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)  # a cancelled scan does not wait for a long book
