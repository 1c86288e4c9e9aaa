"""The on-disk token store of a prepared dataset, and its reader.

Layout of a dataset folder:
    manifest.json     sources (sha256, verdicts), token counts, tokenizer hash, chunking settings
    tokenizer.json    the tokenizer the ids belong to
    train.bin         flat token stream of the training documents (each followed by the EOS id)
    val.bin           the same for the validation documents
    train.docs.npy    int64 token length of every training document (statistics, histograms)
    val.docs.npy      the same for validation
    records/          chat / instruction / preference JSONL kept for later methods

Windows ("chunks") are views into the stream, so appending documents never rewrites old data:
chunk i of a split is tokens[i*stride : i*stride + context_length + 1] (inputs plus the shifted
target), stride = context_length - overlap. Only full windows count.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError

MANIFEST_NAME = "manifest.json"
TOKENIZER_NAME = "tokenizer.json"
SPLITS = ("train", "val")
FORMAT_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (half the disk and page cache of uint32)."""
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.uint32)


def num_windows(n_tokens: int, context_length: int, stride: int) -> int:
    if n_tokens < context_length + 1:
        return 0
    return (n_tokens - context_length - 1) // stride + 1


class TokenStore:
    """Read-only view of a prepared dataset folder (memory-mapped; cheap to open)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest_path = self.path / MANIFEST_NAME
        if not manifest_path.is_file():
            raise UserError(f"{self.path} is not a prepared dataset (no {MANIFEST_NAME}); run 'prepare' first")
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"{manifest_path} is unreadable or corrupt: {exc}") from None
        chunking = self.manifest.get("chunking", {})
        self.context_length: int = int(chunking["context_length"])
        self.overlap: int = int(chunking.get("overlap", 0))
        self.stride: int = self.context_length - self.overlap
        self.dtype = np.dtype(self.manifest["dtype"])
        self._cache: dict[str, np.ndarray] = {}

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER_NAME

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["tokenizer"]["vocab_size"])

    def tokens(self, split: str) -> np.ndarray:
        """The whole token stream of a split, memory-mapped (empty array if the split is empty)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}")
        if split not in self._cache:
            file = self.path / f"{split}.bin"
            if not file.exists() or file.stat().st_size == 0:
                self._cache[split] = np.zeros(0, dtype=self.dtype)
            else:
                self._cache[split] = np.memmap(file, dtype=self.dtype, mode="r")
        return self._cache[split]

    def doc_lengths(self, split: str) -> np.ndarray:
        file = self.path / f"{split}.docs.npy"
        return np.load(file, allow_pickle=False) if file.exists() else np.zeros(0, dtype=np.int64)

    def num_chunks(self, split: str) -> int:
        return num_windows(len(self.tokens(split)), self.context_length, self.stride)

    def chunk(self, split: str, index: int) -> np.ndarray:
        """Window `index` of a split as int64, length context_length + 1."""
        n = self.num_chunks(split)
        if not 0 <= index < n:
            raise IndexError(f"chunk {index} out of range for split {split!r} with {n} chunks")
        start = index * self.stride
        return np.asarray(self.tokens(split)[start:start + self.context_length + 1], dtype=np.int64)

    def chunks(self, split: str, indices: np.ndarray | list[int]) -> np.ndarray:
        """Several windows stacked: shape (len(indices), context_length + 1), int64."""
        return np.stack([self.chunk(split, int(i)) for i in indices]) if len(indices) else np.zeros(
            (0, self.context_length + 1), dtype=np.int64)
