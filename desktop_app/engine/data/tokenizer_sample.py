"""Pass 2 of preparing a dataset (prepare.py): a tokenizer trained on a proportional sample of the usable files, in a
worker thread, so the pass reports progress and stays cancellable."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.data.ingest import Doc, SourceInfo, read_items
from desktop_app.engine.events import Controls, Event, Progress
from desktop_app.engine.specs import DataSpec

TOKENIZER_SAMPLE_CHARS = 64 << 20  # tokenizer training sample (BPE counts words; more text adds little)


def sample_texts(sources: list[SourceInfo], budget: int, stop: threading.Event,
                 counter: list[int], columns: dict[str, str] | None = None) -> Iterator[str]:
    """A proportional sample of every usable file (first documents of each, up to its share)."""
    total = sum(s.chars + 1 for s in sources) or 1
    for src in sources:
        share = max(1, int(budget * (src.chars + 1) / total))
        used = 0
        try:
            for item in read_items(Path(src.path), columns=columns or None):
                if stop.is_set():
                    return
                if isinstance(item, Doc):
                    text = item.text
                elif item.kind == "chat":
                    text = "\n".join(m["content"] for m in item.data["messages"])
                else:
                    text = "\n".join(str(v) for v in item.data.values())
                if not text:
                    continue
                text = text[:share - used] if used + len(text) > share else text
                used += len(text)
                counter[0] += len(text)
                yield text
                if used >= share:
                    break
        except Exception:  # a file that changed since the scan: the encode pass reports it
            continue


def train_on_sample(sources: list[SourceInfo], spec: DataSpec, controls: Controls,
                    out: dict[str, Any]) -> Iterator[Event]:
    """Train the tokenizer in a worker thread; yield Progress while it runs (and stay cancellable)."""
    from desktop_app.engine.data.tokenization import train_tokenizer  # lazy: tokenizers

    counter = [0]
    budget = min(TOKENIZER_SAMPLE_CHARS, sum(s.chars + 1 for s in sources))

    def work() -> None:
        try:
            out["tokenizer"] = train_tokenizer(
                sample_texts(sources, budget, controls.stop, counter, spec.columns), spec.tokenizer,
                vocab_size=spec.vocab_size, min_frequency=spec.min_frequency)
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=work, name="tokenizer-training", daemon=True)
    thread.start()
    last = -1
    while thread.is_alive():
        thread.join(0.25)
        if counter[0] != last:
            last = counter[0]
            yield Progress("tokenizer", float(min(last, budget)), float(budget), "chars",
                           f"training a {spec.tokenizer} tokenizer ({spec.vocab_size} tokens)")
    if "error" in out:
        raise out["error"]
