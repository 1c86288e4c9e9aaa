"""Training's window reads: TokenStore.read_windows (plain reads, what WindowBatchSource uses) against slicing the
memory map (what it used before), side by side in one run on the same random windows of a 100 MB token file.

    python tests/bench/bench_token_reads.py [--json-out FILE]

Prints microseconds per batch for each and their ratio (map / reads: above 1 means the plain reads are faster).
Both read from the page cache (the file is read once first), as training does after its first epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from desktop_app.engine.data.token_store import TokenStore

SHAPES = ((64, 1025), (512, 257), (8, 2049))  # (windows per batch, tokens per window)
REPEATS = 300


def make_store(folder: Path, tokens: int) -> TokenStore:
    """A token store with one train split of random uint16 ids (what prepare writes), context 256."""
    rng = np.random.default_rng(0)
    rng.integers(0, 30000, size=tokens, dtype=np.uint16).tofile(folder / "train.bin")
    manifest = {"format_version": 1, "dtype": "uint16", "chunking": {"context_length": 256, "overlap": 0},
                "tokenizer": {"vocab_size": 30000}, "splits": {"train": {"tokens": tokens}, "val": {"tokens": 0}}}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return TokenStore(folder)


def memory_map_windows(tokens: np.ndarray, starts: list[int], width: int) -> np.ndarray:
    out = np.empty((len(starts), width), dtype=np.int64)
    for row, start in enumerate(starts):
        out[row] = tokens[start:start + width]
    return out


def cpu_name() -> str:
    """The processor's model name where the system says it (Linux), else platform's word, with the core count."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
        name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def per_batch_us(read, repeats: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeats):
        read()
    return (time.perf_counter() - t0) / repeats * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp), 50_000_000)
        mapped = store.tokens("train")
        (Path(tmp) / "train.bin").read_bytes()  # into the page cache
        rng = np.random.default_rng(1)
        for batch, width in SHAPES:
            starts = [int(s) for s in rng.integers(0, len(mapped) - width, size=batch)]
            assert np.array_equal(store.read_windows("train", starts, width),
                                  memory_map_windows(mapped, starts, width))
            times = {"reads": [], "map": []}
            for _ in range(3):  # interleaved, so a drift of the machine hits both alike
                times["reads"].append(per_batch_us(
                    lambda s=starts, w=width: store.read_windows("train", s, w), REPEATS))
                times["map"].append(per_batch_us(lambda s=starts, w=width: memory_map_windows(mapped, s, w), REPEATS))
            reads, mapped_us = min(times["reads"]), min(times["map"])
            rows.append({"batch": batch, "window": width, "read_windows_us": round(reads, 1),
                         "memory_map_us": round(mapped_us, 1), "map_over_reads": round(mapped_us / reads, 2)})
            print(f"{batch:>4} windows of {width:>5} tokens: read_windows {reads:7.1f} us, memory map "
                  f"{mapped_us:7.1f} us per batch (map / reads {mapped_us / reads:.2f})", flush=True)
    if args.json_out:
        payload = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
                   "cpu": cpu_name(), "python": platform.python_version(),
                   "command": "python tests/bench/bench_token_reads.py", "rows": rows}
        args.json_out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
