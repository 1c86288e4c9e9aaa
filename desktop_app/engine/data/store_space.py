"""Disk space for a token store being written (prepare and append; torch-free).

How many bytes the tokens of a text take depends on the tokenizer (characters per token) and the store's dtype,
so the estimate is measured, not guessed: after each batch, what the store has grown by so far, scaled to the
characters still to encode. The first check comes after the first batch (about 1 MB of text), long before a disk
that cannot hold the whole store fills; a NotEnoughSpace then ends the pass and prepare removes its partial folder
(append cuts the streams back to the last committed state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from desktop_app.engine.fault_report import said_as_faults
from desktop_app.engine.os_faults import check_free_space, check_writable

PREPARE_FAULTS = said_as_faults("preparing the dataset")
APPEND_FAULTS = said_as_faults("adding files to the dataset")


def check_output_folder(folder: Path) -> None:
    """The folder a new dataset goes into, created if missing; a read-only or forbidden one is refused now,
    before the files are scanned (DiskFault: one line)."""
    check_writable(folder, "the dataset folder")


def written_bytes(out: Any) -> int:
    """What an encode pass (prepare's _Encoded: token writer + record files) has added so far. The document index
    (8 bytes a document, against hundreds of token bytes) is left out."""
    writer = out.writer
    tokens = sum(writer.tokens[s] - writer.start_tokens[s] for s in writer.tokens)
    records = sum(max(0, size - out.records.start_sizes.get(kind, 0)) for kind, size in out.records.sizes().items())
    return tokens * writer.dtype.itemsize + records


def check_rest_fits(out: Any, done_chars: int, chars_total: int) -> None:
    """Refuse to go on when the rest of the store (what was written per character so far, times the characters
    left) does not fit the free space of its disk (NotEnoughSpace)."""
    left = chars_total - done_chars
    if done_chars <= 0 or left <= 0:
        return
    rest = int(written_bytes(out) * left / done_chars)
    folder = Path(out.writer.path)  # a new dataset is written in a hidden sibling: name the folder the person chose
    shown = folder.parent if folder.name.startswith(".") else folder
    check_free_space(shown, rest, "the rest of the tokenized dataset")
