"""Numbers and previews of a prepared dataset for the Data tab: per split documents / tokens / windows, a document
length histogram, and the first decoded windows with the text they share with the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.data.token_store import SPLITS, TokenStore


def dataset_stats(dataset_dir: str | Path, preview_chunks: int = 3, bins: int = 20) -> dict[str, Any]:
    """Numbers and previews for the UI: per split documents/tokens/chunks, a document-length
    histogram, and the first decoded chunks with the text they share with the next chunk."""
    store = TokenStore(dataset_dir)
    manifest = store.manifest
    result: dict[str, Any] = {"dataset": str(store.path), "vocab_size": store.vocab_size,
                              "context_length": store.context_length, "overlap": store.overlap,
                              "stride": store.stride, "dtype": store.dtype.name, "splits": {},
                              "records": {k: v.get("count", 0) for k, v in manifest.get("records", {}).items()},
                              "sources": {"ok": 0, "problems": 0}}
    for src in manifest.get("sources", []):
        result["sources"]["ok" if src.get("verdict") == "ok" else "problems"] += 1
    lengths = []
    for split in SPLITS:
        docs = store.doc_lengths(split)
        lengths.append(docs)
        result["splits"][split] = {
            "documents": len(docs), "tokens": len(store.tokens(split)), "chunks": store.num_chunks(split),
            "bytes": manifest.get("splits", {}).get(split, {}).get("bytes", 0),
            "mean_doc_tokens": float(docs.mean()) if len(docs) else 0.0,
        }
    all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    if len(all_lengths):
        counts, edges = np.histogram(all_lengths, bins=min(bins, max(1, len(np.unique(all_lengths)))))
        result["doc_length_histogram"] = {"edges": edges.tolist(), "counts": counts.tolist()}
    else:
        result["doc_length_histogram"] = {"edges": [], "counts": []}
    result["preview"] = preview_windows(store, preview_chunks)
    return result


def preview_windows(store: TokenStore, n: int) -> list[dict[str, Any]]:
    from desktop_app.engine.data.tokenization import load_tokenizer  # lazy: tokenizers

    split = "train" if store.num_chunks("train") else "val"
    count = min(n, store.num_chunks(split))
    if not count:
        return []
    tok = load_tokenizer(store.tokenizer_path)
    stream = store.tokens(split)
    out = []
    for i in range(count):
        chunk = store.chunk(split, i)
        start = i * store.stride
        # Inputs of chunk i are tokens[start : start+C]; chunk i+1 starts at start+stride, so both
        # read tokens[start+stride : start+C] (overlap tokens) -- the +1 target token is always shared.
        shared = np.asarray(stream[start + store.stride:start + store.context_length], dtype=np.int64)
        out.append({
            "split": split, "index": i, "start": start, "tokens": len(chunk),
            "text": tok.decode(chunk[:-1].tolist(), skip_special_tokens=False),
            "overlap_tokens": len(shared),
            "overlap_text": tok.decode(shared.tolist(), skip_special_tokens=False) if len(shared) else "",
            "has_next": i + 1 < store.num_chunks(split),
        })
    return out
