"""Files -> validated documents -> tokenizer -> token store (memmap streams) + manifest.

prepare_dataset() is a generator of events (Progress, FileVerdict, Log, then one Finished), so the CLI and the UI
drive the same code; controls.stop cancels at the next batch. The dataset is built in a hidden sibling folder and
renamed into place at the end, so a cancelled or crashed run never leaves a folder that looks complete. Later,
append_to_dataset() adds files (the manifest is committed last; an interrupted append is cut to the last commit).

Passes over the input (each streamed in blocks, memory bounded whatever the file sizes):
    1. scan: sha256, encoding, verdict, document counts (no tokenization; too few to hold one out: split_check)
    2. tokenizer training on a proportional sample of at most TOKENIZER_SAMPLE_CHARS characters
       (tokenizer_sample.py; skipped with an existing tokenizer)
    3. encode: batched encode_batch_fast (multi-threaded in Rust) while a reader thread decodes the
       next batch; ids appended to train.bin / val.bin with EOS after each document.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.data.encode_items import SPLIT_KEY_CHARS, batch_entry, source_items
from desktop_app.engine.data.encode_items import split_of as split_of  # where it was public before
from desktop_app.engine.data.extract import FileProgress, scan_sources
from desktop_app.engine.data.ingest import Doc, Record, SourceInfo, scan
from desktop_app.engine.data.split_check import empty_validation, validation_shortfall
from desktop_app.engine.data.store_space import APPEND_FAULTS, PREPARE_FAULTS, check_output_folder, check_rest_fits
from desktop_app.engine.data.token_store import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    SPLITS,
    TOKENIZER_NAME,
    TokenStore,
    TokenWriter,
    load_manifest,
    num_windows,
    token_dtype,
    truncate_stream,
    write_manifest,
)
from desktop_app.engine.data.tokenizer_sample import train_on_sample
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, FileVerdict, Finished, Log, Progress
from desktop_app.engine.fileio import fsync_dir
from desktop_app.engine.specs import DataSpec

BATCH_CHARS = 1 << 20  # text per encode_batch call: big enough to keep every core busy
DOCUMENT_BOUNDARY = "blank line (.txt/.md), one record per line (.jsonl)"


def _controls(controls: Controls | None) -> Controls:
    return controls if controls is not None else Controls()


def scan_paths(paths: Iterable[str | Path]) -> Iterator[FileVerdict]:
    """Judge every file under `paths` (recursively) without tokenizing: one FileVerdict per file."""
    for info in scan(paths):
        yield info.to_event()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------- encode

_END = object()


def _reader(sources: list[SourceInfo], spec: DataSpec, stop: threading.Event, q: queue.Queue) -> None:
    """Reader thread: decode files into batches of (source index, split, Doc | Record) and, for a table's text
    column, (source index, [split per document], [documents]); about BATCH_CHARS characters a batch."""
    try:
        batch: list[tuple] = []
        size = 0
        for index, src in enumerate(sources):
            split = "train"
            try:
                for item in source_items(src, spec):
                    if stop.is_set():
                        return
                    entry, split, chars = batch_entry(index, item, split, spec)
                    batch.append(entry)
                    size += chars
                    if size >= BATCH_CHARS:
                        q.put(batch)
                        batch, size = [], 0
            except Exception as exc:  # changed or vanished since the scan: report, keep the rest
                q.put(batch)
                batch, size = [], 0
                q.put(("error", index, exc))
        if batch:
            q.put(batch)
    finally:
        q.put(_END)


class _Records:
    """Normalised chat / instruction / preference JSONL under records/, appended in place."""

    def __init__(self, folder: Path, start_sizes: dict[str, int] | None = None):
        self.folder = folder / "records"
        self.counts: dict[str, int] = {}
        self.start_sizes = dict(start_sizes or {})
        self._files: dict[str, Any] = {}

    def add(self, rec: Record, split: str, source_sha: str) -> None:
        fh = self._files.get(rec.kind)
        if fh is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            file = self.folder / f"{rec.kind}.jsonl"
            self.start_sizes.setdefault(rec.kind, file.stat().st_size if file.exists() else 0)
            fh = self._files[rec.kind] = open(file, "a", encoding="utf-8", newline="\n")  # noqa: SIM115
        fh.write(json.dumps({**rec.data, "split": split, "source": source_sha[:16]}, ensure_ascii=False) + "\n")
        self.counts[rec.kind] = self.counts.get(rec.kind, 0) + 1

    def close(self) -> None:
        for fh in self._files.values():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        self._files.clear()

    def rollback(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()
        for kind, size in self.start_sizes.items():
            file = self.folder / f"{kind}.jsonl"
            if file.exists():
                with open(file, "r+b") as fh:
                    fh.truncate(size)

    def sizes(self) -> dict[str, int]:
        return {f.stem: f.stat().st_size for f in self.folder.glob("*.jsonl")} if self.folder.exists() else {}


@dataclass
class _Encoded:
    """Where the encode pass writes: the token streams, the records, and the text bytes of each split."""

    writer: TokenWriter
    records: _Records
    split_bytes: dict[str, int]

    def close(self) -> None:
        self.writer.close()
        self.records.close()

    def splits(self, spec: DataSpec) -> dict[str, dict[str, int]]:
        """The manifest's "splits": documents, tokens, bytes and windows of each split."""
        return {s: _split_summary(self.writer.tokens[s], self.writer.documents[s], self.split_bytes[s],
                                  spec.context_length, spec.stride) for s in SPLITS}


def _encode_sources(sources: list[SourceInfo], tok: Any, out: _Encoded, spec: DataSpec,
                    controls: Controls) -> Iterator[Event]:
    """Pass 3: tokenize every usable source into `out`. Returns normally when cancelled too."""
    total = float(sum(s.size for s in sources)) or 1.0
    chars_total = sum(s.chars for s in sources) or 1
    q: queue.Queue = queue.Queue(maxsize=3)  # bounded: at most ~3 batches of text wait in memory
    stop = threading.Event()
    thread = threading.Thread(target=_reader, args=(sources, spec, stop, q), name="dataset-reader", daemon=True)
    thread.start()
    done_chars = 0
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    try:
        while True:
            if controls.stop.is_set():
                return
            item = q.get()
            if item is _END:
                break
            if isinstance(item, tuple):  # ("error", index, exc) from the reader
                src = sources[item[1]]
                src.verdict, src.reason = "unreadable", f"changed or became unreadable while preparing: {item[2]}"
                yield Log("warning", f"{src.path}: {src.reason}")
                continue
            done_chars += _write_batch(item, sources, encode, out)
            check_rest_fits(out, done_chars, chars_total)  # a disk too small for the rest: said now, not when full
            yield Progress("encode", min(total, total * done_chars / chars_total), total, "bytes",
                           f"tokenizing ({out.writer.tokens['train'] + out.writer.tokens['val']:,} tokens)")
    finally:
        stop.set()
        # Unblock a reader waiting on a full queue, then let it end.
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                q.get(timeout=0.05)
        thread.join()


def _write_batch(batch: list[tuple], sources: list[SourceInfo], encode: Any, out: _Encoded) -> int:
    """One reader batch into `out`: records as they are, documents (Doc pieces and lists of whole documents)
    encoded in one call, EOS after each document's last piece; the characters encoded."""
    index: list[int] = []
    splits: list[str] = []
    texts: list[str] = []
    ends: list[bool] = []
    for i, split, item in batch:
        if isinstance(item, Record):
            out.records.add(item, split, sources[i].sha256)
        elif isinstance(item, Doc):
            index.append(i)
            splits.append(split)
            texts.append(item.text)
            ends.append(item.last)
        else:  # whole documents of a table's text column, one split each
            index += [i] * len(item)
            splits += split
            texts += item
            ends += [True] * len(item)
    if not texts:
        return 0
    encodings = encode(texts, add_special_tokens=False)
    per_split: dict[str, tuple[list[list[int]], list[bool]]] = {s: ([], []) for s in SPLITS}
    for i, split, text, last, enc in zip(index, splits, texts, ends, encodings, strict=True):
        ids = enc.ids
        sources[i].tokens += len(ids) + last
        out.split_bytes[split] += len(text.encode("utf-8", "surrogatepass"))
        per_split[split][0].append(ids)
        per_split[split][1].append(last)
    for split, (id_lists, lasts) in per_split.items():
        if id_lists:
            out.writer.write_batch(split, id_lists, lasts)
    return sum(map(len, texts))


def _encoder(tok: Any) -> Any:
    """A copy of the tokenizer that treats special-token strings in user text as plain text, so a
    document containing '<|endoftext|>' cannot inject a real end-of-text id."""
    from tokenizers import Tokenizer

    enc = Tokenizer.from_str(tok.to_str())
    with contextlib.suppress(AttributeError):
        enc.encode_special_tokens = True
    return enc


# ----------------------------------------------------------------------------------------- manifest

def _split_summary(tokens: int, documents: int, nbytes: int, context: int, stride: int) -> dict[str, int]:
    return {"documents": int(documents), "tokens": int(tokens), "bytes": int(nbytes),
            "chunks": num_windows(int(tokens), context, stride)}


def summary_of(manifest: dict[str, Any], dataset_dir: Path, files: list[SourceInfo]) -> dict[str, Any]:
    """The dict `prepare --json` prints and Finished.result carries."""
    splits = manifest.get("splits", {})
    return {
        "dataset": str(dataset_dir),
        "manifest": str(dataset_dir / MANIFEST_NAME),
        "tokenizer": str(dataset_dir / TOKENIZER_NAME),
        "files": [{"path": f.path, "verdict": f.verdict, "reason": f.reason, "tokens": f.tokens,
                   "format": f.format, "documents": f.documents, "records": dict(f.records),
                   **({"line": f.line} if f.line is not None else {}),
                   **({"offset": f.offset} if f.offset is not None else {})} for f in files],
        "usable_files": sum(1 for f in files if f.ok),
        "splits": splits,
        "tokens": {s: splits.get(s, {}).get("tokens", 0) for s in SPLITS},
        "chunks": {s: splits.get(s, {}).get("chunks", 0) for s in SPLITS},
        "documents": {s: splits.get(s, {}).get("documents", 0) for s in SPLITS},
        "records": {k: v.get("count", 0) for k, v in manifest.get("records", {}).items()},
        "vocab_size": manifest.get("tokenizer", {}).get("vocab_size", 0),
        "dtype": manifest.get("dtype", ""),
        "context_length": manifest.get("chunking", {}).get("context_length", 0),
        "overlap": manifest.get("chunking", {}).get("overlap", 0),
    }


def _record_summary(folder: Path, counts: dict[str, int]) -> dict[str, Any]:
    return {kind: {"file": f"records/{kind}.jsonl", "count": n,
                   "bytes": (folder / "records" / f"{kind}.jsonl").stat().st_size}
            for kind, n in sorted(counts.items())}


# ------------------------------------------------------------------------------------------ prepare

def _scan_with_events(paths: Iterable[str | Path], controls: Controls, files: list[SourceInfo],
                      known: dict[str, str] | None = None, columns: dict[str, str] | None = None) -> Iterator[Event]:
    for info in scan_sources(paths, known_sha256=known, columns=columns or None, controls=controls):
        if isinstance(info, FileProgress):  # documents are read in parallel: how far each one has got
            yield Progress("extract", float(info.done), float(info.total), "parts",
                           f"reading {Path(info.path).name}: {info.done} of {info.total}")
            continue
        files.append(info)
        yield info.to_event()
        yield Progress("scan", float(len(files)), 0.0, "files", f"checked {info.path}")
        if controls.stop.is_set():
            return


@dataclass
class _Tokenizer:
    """The dataset's tokenizer: a given one (kind "given", with the file or folder it came from) or a trained one."""

    tok: Any
    kind: str
    source: Path | None = None


def _scan_usable(paths: list[str | Path], controls: Controls, files: list[SourceInfo], known: dict[str, str] | None,
                 summary: Callable[[], dict[str, Any]], columns: dict[str, str] | None = None) -> Iterator[Event]:
    """Judge the files (into `files`, tables through the column mapping `columns`); returns the usable ones, or none
    after a Finished (cancelled, or nothing usable) whose result is `summary()`."""
    yield from _scan_with_events(paths, controls, files, known, columns)
    if controls.stop.is_set():
        yield Finished("cancelled", message="cancelled while checking files", result=summary())
        return []
    usable = [f for f in files if f.ok]
    if not usable:
        yield Finished("failed", message=_none_usable_message(files), result=summary())
    return usable


@PREPARE_FAULTS  # a full disk or a read-only folder: one line; the partial folder is removed
def prepare_dataset(paths: Iterable[str | Path], out_dir: str | Path, spec: DataSpec | None = None,
                    controls: Controls | None = None) -> Iterator[Event]:
    """Files/folders -> tokenizer + tokenized dataset in `out_dir` (which must not exist yet, or be empty).

    Yields FileVerdict per file, Progress, Log, and finally Finished(reason "completed" | "cancelled" |
    "failed", result=summary). Settings mistakes raise UserError before anything is written.
    """
    spec = (spec or DataSpec()).check()
    controls = _controls(controls)
    out = Path(out_dir).expanduser()
    paths = list(paths)
    given = _check_request(paths, out, spec)
    files: list[SourceInfo] = []
    check_output_folder(out.parent)  # created if missing; read-only or forbidden: said before the long scan
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}-{int(time.time())}"
    started = time.monotonic()
    try:
        yield Log("info", f"checking {len(paths)} input path(s)")
        usable = yield from _scan_usable(paths, controls, files, None, lambda: summary_of({}, out, files), spec.columns)
        if not usable:
            return
        if shortfall := validation_shortfall(sum(f.documents for f in usable), spec.val_fraction):
            yield Log("warning", shortfall)  # before the long work: the person may cancel and change the share
        tmp.mkdir(parents=True)
        tokenizer = yield from _dataset_tokenizer(given, usable, tmp, spec, controls)
        if tokenizer is None:
            yield Finished("cancelled", message="cancelled while training the tokenizer",
                           result=summary_of({}, out, files))
            return
        entry, encoded = yield from _encode_new(usable, tokenizer, tmp, spec, controls)
        if controls.stop.is_set():
            yield Finished("cancelled", message="cancelled while tokenizing; nothing was kept",
                           result=summary_of({}, out, files))
            return
        manifest = _new_manifest(tmp, entry, spec, encoded, files)
        for warning in _warnings(manifest):
            yield Log("warning", warning)
        _publish(tmp, out, manifest)
        total = manifest["splits"]["train"]["tokens"] + manifest["splits"]["val"]["tokens"]
        yield Log("info", f"prepared {total:,} tokens from {len(usable)} file(s) in {time.monotonic() - started:.1f} s")
        for f in files:  # final verdicts with token counts
            yield f.to_event()
        yield Finished("completed", message=f"dataset ready in {out}", result=summary_of(manifest, out, files))
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _check_request(paths: list[str | Path], out: Path, spec: DataSpec) -> _Tokenizer | None:
    """Refuse settings mistakes before anything is written; the given tokenizer (loaded now), or None."""
    if not paths:
        raise UserError("no input files or folders given")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not empty: choose a new folder, or append to it")
    if not spec.tokenizer_file:
        from desktop_app.engine.data.tokenization import min_vocab_size  # lazy: tokenizers

        if spec.vocab_size < min_vocab_size(spec.tokenizer):
            raise UserError(f"vocab size {spec.vocab_size} is too small for a {spec.tokenizer} tokenizer: "
                            f"use at least {min_vocab_size(spec.tokenizer)}")
        return None
    from desktop_app.engine.data.tokenization import eos_id, load_tokenizer  # lazy: tokenizers

    source = Path(spec.tokenizer_file).expanduser()
    tok = load_tokenizer(source)  # a bad tokenizer fails now, before the long work
    eos_id(tok, source)  # and one without an end-of-text token too
    return _Tokenizer(tok, "given", source)


def _dataset_tokenizer(given: _Tokenizer | None, usable: list[SourceInfo], tmp: Path, spec: DataSpec,
                       controls: Controls) -> Iterator[Event]:
    """The given tokenizer (with its config files), or one trained on the usable files, saved in `tmp`; returns
    it, or None when the user cancelled the training."""
    from desktop_app.engine.data.tokenization import save_tokenizer  # lazy: tokenizers

    if given is not None:
        assert given.source is not None
        save_tokenizer(given.tok, tmp / TOKENIZER_NAME)
        folder = given.source if given.source.is_dir() else given.source.parent
        for extra in ("tokenizer_config.json", "special_tokens_map.json"):
            if (folder / extra).is_file():
                shutil.copyfile(folder / extra, tmp / extra)
        return given
    result: dict[str, Any] = {}
    yield Log("info", f"training a {spec.tokenizer} tokenizer with {spec.vocab_size} tokens")
    yield from train_on_sample(usable, spec, controls, result)
    if controls.stop.is_set():
        return None
    save_tokenizer(result["tokenizer"], tmp / TOKENIZER_NAME)
    return _Tokenizer(result["tokenizer"], spec.tokenizer)


def _tokenizer_entry(tokenizer: _Tokenizer, tmp: Path) -> dict[str, Any]:
    """The manifest's "tokenizer": the saved file, its checksum, kind, vocabulary size and special tokens."""
    from desktop_app.engine.data.tokenization import eos_id, special_tokens_of, tokenizer_sha256  # lazy: tokenizers

    eos = eos_id(tokenizer.tok, tmp / TOKENIZER_NAME)
    vocab_size = tokenizer.tok.get_vocab_size(with_added_tokens=True)
    specials = special_tokens_of(tokenizer.tok, tmp / TOKENIZER_NAME)
    return {"file": TOKENIZER_NAME, "sha256": tokenizer_sha256(tmp / TOKENIZER_NAME), "kind": tokenizer.kind,
            "vocab_size": vocab_size, "eos_id": eos, "special_tokens": specials,
            **({"source": str(tokenizer.source)} if tokenizer.source else {})}


def _encode_new(usable: list[SourceInfo], tokenizer: _Tokenizer, tmp: Path, spec: DataSpec,
                controls: Controls) -> Iterator[Event]:
    """Pass 3 of a new dataset, into `tmp` (which holds its saved tokenizer); returns the tokenizer's manifest entry
    and what the pass wrote (closed)."""
    entry = _tokenizer_entry(tokenizer, tmp)
    encoded = _Encoded(TokenWriter(tmp, token_dtype(entry["vocab_size"]), entry["eos_id"]), _Records(tmp),
                       dict.fromkeys(SPLITS, 0))
    yield Log("info", f"tokenizing {len(usable)} file(s)")
    try:
        yield from _encode_sources(usable, _encoder(tokenizer.tok), encoded, spec, controls)
    finally:
        encoded.close()
    return entry, encoded


def _new_manifest(tmp: Path, tokenizer: dict[str, Any], spec: DataSpec, encoded: _Encoded,
                  files: list[SourceInfo]) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "created": _now(),
        "updated": _now(),
        "tokenizer": tokenizer,
        "dtype": encoded.writer.dtype.name,
        "chunking": {"context_length": spec.context_length, "overlap": spec.overlap, "stride": spec.stride,
                     "document_boundary": DOCUMENT_BOUNDARY, "eos_after_document": True},
        "split": {"val_fraction": spec.val_fraction, "seed": spec.seed,
                  "method": f"seeded blake2b of the first {SPLIT_KEY_CHARS} characters of each document"},
        "splits": encoded.splits(spec),
        "files": encoded.writer.file_entries(),  # sizes and checksums: training refuses a damaged store
        "records": _record_summary(tmp, encoded.records.counts),
        "sources": [f.to_dict() for f in files],
        "spec": spec.to_dict(),
    }


def _publish(tmp: Path, out: Path, manifest: dict[str, Any]) -> None:
    """Commit the manifest, then rename the finished folder into place (durably)."""

    write_manifest(tmp, manifest)
    if out.exists():
        out.rmdir()  # empty (checked above)
    os.replace(tmp, out)
    fsync_dir(out.parent)


def _none_usable_message(files: list[SourceInfo]) -> str:
    if not files:
        return "no files found in the given paths"
    counts: dict[str, int] = {}
    for f in files:
        counts[f.verdict] = counts.get(f.verdict, 0) + 1
    detail = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    return f"none of the {len(files)} file(s) can be used ({detail})"


def _warnings(manifest: dict[str, Any]) -> list[str]:
    out = []
    ctx = manifest["chunking"]["context_length"]
    for split in SPLITS:
        s = manifest["splits"][split]
        if s["tokens"] and not s["chunks"]:
            out.append(f"the {split} split has {s['tokens']} tokens, fewer than one window of {ctx + 1}: "
                       "add data or use a shorter context")
    out += empty_validation(manifest)
    records = sum(info["count"] for info in manifest.get("records", {}).values())
    if records and not manifest["splits"]["train"]["tokens"]:
        out.append(f"only chat/instruction/preference records ({records}) and no plain text: they are kept in "
                   "records/ for fine-tuning methods, but pretraining needs plain text documents")
    return out


# ------------------------------------------------------------------------------------------- append

@dataclass
class _Existing:
    """A prepared dataset opened for appending: its manifest, settings and tokenizer, and the byte size of each
    record file at the last commit."""

    folder: Path
    manifest: dict[str, Any]
    spec: DataSpec
    tok: Any
    record_sizes: dict[str, int]


@APPEND_FAULTS  # a full disk: one line; the streams are cut back to the last committed state
def append_to_dataset(dataset_dir: str | Path, paths: Iterable[str | Path],
                      controls: Controls | None = None) -> Iterator[Event]:
    """Add files to a prepared dataset without redoing the rest (files already in it are skipped).

    Uses the dataset's tokenizer, split seed and chunking. The manifest is committed last; a cancel
    or failure cuts the streams and records back to the last committed state.
    """
    controls = _controls(controls)
    ds = _open_for_append(Path(dataset_dir).expanduser())
    folder, manifest = ds.folder, ds.manifest
    old_sources = [SourceInfo.from_dict(s) for s in manifest["sources"]]
    known = {s.sha256: f"{s.path} (already in the dataset)" for s in old_sources if s.ok and s.sha256}
    files: list[SourceInfo] = []
    usable = yield from _scan_usable(list(paths), controls, files, known, lambda: summary_of(manifest, folder, files),
                                     ds.spec.columns)
    if not usable:
        return
    encoded = _Encoded(TokenWriter(folder, np.dtype(manifest["dtype"]), int(manifest["tokenizer"]["eos_id"])),
                       _Records(folder, ds.record_sizes),
                       {s: int(manifest["splits"][s].get("bytes", 0)) for s in SPLITS})
    committed = False
    try:
        yield from _encode_sources(usable, _encoder(ds.tok), encoded, ds.spec, controls)
        if controls.stop.is_set():
            yield Finished("cancelled", message="cancelled; the dataset is unchanged",
                           result=summary_of(manifest, folder, files))
            return
        encoded.close()
        # Files that were already in the dataset are reported, not recorded again.
        added_sources = [f for f in files if not (f.verdict == "duplicate" and f.sha256 in known)]
        _commit_append(ds, encoded, old_sources + added_sources)
        committed = True
        for f in files:
            yield f.to_event()
        added = sum(f.tokens for f in usable)
        yield Finished("completed", message=f"added {added:,} tokens from {len(usable)} file(s)",
                       result=summary_of(manifest, folder, files))
    finally:
        if not committed:
            encoded.writer.rollback()
            encoded.records.rollback()


def _open_for_append(folder: Path) -> _Existing:
    """The dataset in `folder`, checked, and cut back to its last committed state: an earlier interrupted append
    may have left a tail on the token streams and record files."""
    from desktop_app.engine.data.tokenization import load_tokenizer, tokenizer_sha256  # lazy: tokenizers

    manifest = load_manifest(folder)
    spec = DataSpec.from_dict(manifest["spec"])
    if tokenizer_sha256(folder / TOKENIZER_NAME) != manifest["tokenizer"]["sha256"]:
        raise UserError(f"{folder / TOKENIZER_NAME} no longer matches the dataset (its sha256 changed)")
    tok = load_tokenizer(folder / TOKENIZER_NAME)
    dtype = np.dtype(manifest["dtype"])
    TokenStore(folder).verify(remember=False)  # never extend (and re-checksum) a damaged stream
    for split in SPLITS:
        truncate_stream(folder, split, manifest["splits"][split]["tokens"], dtype)
    rec_sizes = {k: v.get("bytes", 0) for k, v in manifest.get("records", {}).items()}
    for file in (folder / "records").glob("*.jsonl"):
        rec_sizes.setdefault(file.stem, 0)  # a record kind an interrupted append started
    _Records(folder, rec_sizes).rollback()  # same repair for the record files
    return _Existing(folder, manifest, spec, tok, rec_sizes)


def _commit_append(ds: _Existing, encoded: _Encoded, sources: list[SourceInfo]) -> None:
    """Update the manifest in place with what the append wrote (`sources`: every file it now holds), then commit
    it."""
    manifest = ds.manifest
    counts = {k: v.get("count", 0) for k, v in manifest.get("records", {}).items()}
    for kind, n in encoded.records.counts.items():
        counts[kind] = counts.get(kind, 0) + n
    manifest["records"] = _record_summary(ds.folder, counts)
    manifest["splits"] = encoded.splits(ds.spec)
    manifest["files"] = encoded.writer.file_entries()
    manifest["sources"] = [s.to_dict() for s in sources]
    manifest["updated"] = _now()
    write_manifest(ds.folder, manifest)
