"""One parse of a GGUF file per model load.

transformers' GGUF loader builds a `gguf.GGUFReader` three times for one model (tokenizer, config, weights), each
walking every metadata field (SmolLM2-135M's 49k-token vocabulary: ~5 s on a 2-core CPU), and builds gguf's tensor
name map once per module of the model (397 times for SmolLM2, ~5 s). Inside `parse_once()` a file is parsed once and
a name map built once per architecture; outside it both libraries run unchanged. SmolLM2-135M's Q4_1 file: 23 s ->
10 s to load here.

The libraries look both names up on the `gguf` module at each call (`from gguf import GGUFReader` inside
transformers' functions), so swapping the module's attributes reaches them. Loads may overlap (the window can load
a model for chat while an evaluation loads another): the first to enter swaps, the last to leave restores.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_depth = 0
_originals: tuple[Any, Any] | None = None
_readers: dict[tuple[str, int, int, str], Any] = {}


def _shared_reader(original: Any) -> Any:
    def reader(path: Any, mode: str = "r") -> Any:
        file = Path(path).resolve()
        stat = file.stat()
        key = (str(file), stat.st_size, stat.st_mtime_ns, mode)  # a rewritten file is parsed again
        with _lock:
            hit = _readers.get(key)
        if hit is None:
            hit = original(path, mode)
            with _lock:
                _readers[key] = hit
        return hit

    return reader


@contextlib.contextmanager
def parse_once() -> Iterator[None]:
    """While inside: every GGUFReader of the same unchanged file is the same parsed reader, and gguf's tensor name
    map is built once per (architecture, block count)."""
    global _depth, _originals
    import gguf

    with _lock:
        if _depth == 0:
            _originals = (gguf.GGUFReader, gguf.get_tensor_name_map)
            gguf.GGUFReader = _shared_reader(_originals[0])
            gguf.get_tensor_name_map = functools.lru_cache(maxsize=16)(_originals[1])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _originals is not None:
                gguf.GGUFReader, gguf.get_tensor_name_map = _originals
                _originals = None
                _readers.clear()  # the memory maps close with their readers
