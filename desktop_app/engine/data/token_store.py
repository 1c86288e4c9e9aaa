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

import io
import json
import os
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.data.store_check import (
    StreamWatch,
    check_size,
    cut_short,
    file_entry,
    hash_prefix,
    new_hash,
    verify_files,
)
from desktop_app.engine.errors import UserError
from desktop_app.engine.fileio import atomic_write_bytes, atomic_write_text

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


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """manifest.json, atomically: the commit marker of a prepared (or appended) dataset."""

    atomic_write_text(folder / MANIFEST_NAME, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def load_manifest(folder: Path) -> dict[str, Any]:
    """A dataset's manifest.json, checked for this version's format (UserError otherwise)."""
    file = folder / MANIFEST_NAME
    if not file.is_file():
        raise UserError(f"{folder} is not a prepared dataset (no {MANIFEST_NAME})")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{file} is unreadable or corrupt: {exc}") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{folder} has dataset format {manifest.get('format_version')!r}; this version reads "
                        f"{FORMAT_VERSION}")
    return manifest


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
            # Only what the manifest committed counts (an interrupted append may have left a tail); a file cut
            # shorter than that is refused naming it (store_check), before numpy sees an odd size.
            committed = self.committed_tokens(split)
            size = check_size(file, committed * self.dtype.itemsize)
            count = committed if committed else size // self.dtype.itemsize
            self._cache[split] = (np.memmap(file, dtype=self.dtype, mode="r", shape=(count,)) if count
                                  else np.zeros(0, dtype=self.dtype))
        return self._cache[split]

    def committed_tokens(self, split: str) -> int:
        """Tokens of a split the manifest committed (0 when it does not say)."""
        committed = self.manifest.get("splits", {}).get(split, {}).get("tokens")
        return committed if isinstance(committed, int) and committed > 0 else 0

    def verify(self, *, remember: bool = True) -> None:
        """Sizes and checksums of the token files against the manifest (a training run's start): DamagedData or
        DiskFault naming the file. Unchanged files verified before are not hashed again (store_check)."""
        for split in SPLITS:
            self.tokens(split)  # sizes, also of a store prepared before checksums were recorded
        verify_files(self.path, self.manifest, remember=remember)

    def watch(self, split: str) -> StreamWatch:
        """A check, cheap enough for every batch, that `<split>.bin` is still the file this store reads."""
        self.tokens(split)
        return StreamWatch(self.path / f"{split}.bin", self.committed_tokens(split) * self.dtype.itemsize)

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

    def read_windows(self, split: str, starts: list[int], width: int) -> np.ndarray:
        """Windows of `width` tokens at the token offsets `starts`, shape (len(starts), width), int64: read with plain
        reads, not through the memory map, so a file cut short in place meanwhile is a short read (DamagedData
        naming it), never a SIGBUS that ends the process."""
        file = self.path / f"{split}.bin"
        size = self.dtype.itemsize
        raw = np.empty((len(starts), width), dtype=self.dtype)
        with open(file, "rb", buffering=0) as fh:
            for row, start in enumerate(starts):
                fh.seek(start * size)
                if fh.readinto(raw[row]) != width * size:
                    raise cut_short(file)
        return raw.astype(np.int64)

    def chunks(self, split: str, indices: np.ndarray | list[int]) -> np.ndarray:
        """Several windows stacked: shape (len(indices), context_length + 1), int64."""
        return np.stack([self.chunk(split, int(i)) for i in indices]) if len(indices) else np.zeros(
            (0, self.context_length + 1), dtype=np.int64)


class TokenWriter:
    """Appends documents to the token streams of a dataset folder (the writer side of TokenStore).

    Tokens go straight to `<split>.bin` (opened for append, so memory stays bounded); document
    lengths are kept and written to `<split>.docs.npy` atomically on close(). Call rollback() to cut
    the streams back to where they were when the writer opened (cancel / failure): the files then
    match the last committed manifest again. The manifest itself is the caller's to commit, last.
    """

    def __init__(self, path: str | Path, dtype: np.dtype | str, eos_id: int):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.eos = np.array([eos_id], dtype=self.dtype)
        self.start_tokens: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        self.documents: dict[str, int] = {}
        self._old_docs: dict[str, np.ndarray] = {}
        self._new_docs: dict[str, array] = {}  # int64 array: 8 bytes per document, not a list of ints
        self._open_doc: dict[str, int] = {}
        self._files: dict[str, Any] = {}
        self._hash: dict[str, Any] = {}
        for split in SPLITS:
            file = self.path / f"{split}.bin"
            n = file.stat().st_size // self.dtype.itemsize if file.exists() else 0
            self.start_tokens[split] = self.tokens[split] = n
            # The manifest's checksum covers the whole committed stream: the old part once, then every write.
            self._hash[split] = hash_prefix(file, n * self.dtype.itemsize) if n else new_hash()
            docs_file = self.path / f"{split}.docs.npy"
            self._old_docs[split] = (np.load(docs_file, allow_pickle=False) if docs_file.exists()
                                     else np.zeros(0, dtype=np.int64))
            self.documents[split] = len(self._old_docs[split])
            self._new_docs[split] = array("q")
            self._open_doc[split] = 0
            self._files[split] = open(file, "ab")  # noqa: SIM115 - closed in close()/rollback()

    def write(self, split: str, ids: np.ndarray | list[int], *, end_of_document: bool = True) -> int:
        """Append the ids of one document (or one piece of it); EOS follows the last piece."""
        arr = np.asarray(ids, dtype=self.dtype)
        self._append(split, arr.tobytes())
        n = len(arr)
        if end_of_document:
            self._append(split, self.eos.tobytes())
            n += 1
            self._new_docs[split].append(self._open_doc[split] + n)
            self._open_doc[split] = 0
            self.documents[split] += 1
        else:
            self._open_doc[split] += n
        self.tokens[split] += n
        return n

    def write_batch(self, split: str, docs: list[list[int]], ends: list[bool]) -> int:
        """Append many documents (or pieces) in one write; ends[i] marks where EOS follows docs[i].

        One numpy conversion and one write per batch instead of per document (this is the hot path).
        """
        flat: list[int] = []
        eos = int(self.eos[0])
        open_doc = self._open_doc[split]
        new_docs = self._new_docs[split]
        for ids, end in zip(docs, ends, strict=True):
            flat.extend(ids)
            open_doc += len(ids)
            if end:
                flat.append(eos)
                new_docs.append(open_doc + 1)
                open_doc = 0
        self.documents[split] += sum(ends)
        self._open_doc[split] = open_doc
        arr = np.array(flat, dtype=self.dtype)
        self._append(split, arr.tobytes())
        self.tokens[split] += len(arr)
        return len(arr)

    def _append(self, split: str, data: bytes) -> None:
        self._files[split].write(data)
        self._hash[split].update(data)

    def file_entries(self) -> dict[str, dict[str, Any]]:
        """The manifest's "files": size and checksum of each token stream as written (store_check verifies them)."""
        return {f"{split}.bin": file_entry(self.tokens[split] * self.dtype.itemsize, self._hash[split].hexdigest())
                for split in SPLITS}

    def doc_lengths(self, split: str) -> np.ndarray:
        return np.concatenate([self._old_docs[split], np.frombuffer(self._new_docs[split], dtype=np.int64)])

    def close(self) -> None:
        for split in SPLITS:
            fh = self._files.pop(split, None)
            if fh is None:
                continue
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
            buf = io.BytesIO()
            np.save(buf, self.doc_lengths(split), allow_pickle=False)
            atomic_write_bytes(self.path / f"{split}.docs.npy", buf.getvalue())

    def rollback(self) -> None:
        for split in SPLITS:
            fh = self._files.pop(split, None)
            if fh is not None:
                fh.close()
            truncate_stream(self.path, split, self.start_tokens[split], self.dtype)


def truncate_stream(path: Path, split: str, n_tokens: int, dtype: np.dtype | str) -> None:
    """Cut `<split>.bin` back to n_tokens (drops the tail of an interrupted append)."""
    file = Path(path) / f"{split}.bin"
    size = n_tokens * np.dtype(dtype).itemsize
    if file.exists() and file.stat().st_size > size:
        with open(file, "r+b") as fh:
            fh.truncate(size)
