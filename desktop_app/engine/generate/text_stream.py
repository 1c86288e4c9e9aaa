"""Token ids -> text deltas for streaming: never half a character, never part of a stop string.

Two layers, one per promise:

- `IncrementalDetokenizer` decodes only a short window of recent tokens per step (decode of the whole
  text on every token grows quadratically). A byte-level BPE token can end in the middle of a UTF-8
  character; the decoder then renders the incomplete tail as U+FFFD, and we hold the tokens back until
  the character completes. The window starts a few tokens back (prompt tail included) so decoders that
  treat the first token specially (leading-space handling) see the same context as a full decode.
- `StopStringFilter` holds back the longest tail of the text that could still grow into a stop
  string, and cuts the text where a stop string appears (the stop string itself is never shown).

`TextStream` chains the two: push(token_id) -> text to show now; finish() -> the rest.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

REPLACEMENT_CHAR = "\ufffd"
# A UTF-8 character has at most 4 bytes, so after this many held tokens the U+FFFD is real, not partial.
_MAX_HELD_TOKENS = 6
# Prompt tokens kept as decoding context for the first generated tokens.
_CONTEXT_TOKENS = 4

Decode = Callable[[Sequence[int]], str]


def text_decoder(tokenizer: Any) -> Decode:
    """ids -> text through the Rust tokenizer directly (the Python wrapper adds per-call overhead)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: backend.decode(list(ids), skip_special_tokens=True)
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)


class IncrementalDetokenizer:
    """Decodes a growing list of token ids into complete characters, a few tokens at a time."""

    def __init__(self, decode: Decode, context_ids: Sequence[int] = ()):
        self._decode = decode
        self.ids: list[int] = list(context_ids[-_CONTEXT_TOKENS:]) if context_ids else []
        self._prefix_offset = 0
        self._read_offset = len(self.ids)
        self._prefix_text = self._decode(self.ids) if self.ids else ""

    def push(self, token_id: int) -> str:
        """Add one token; return the newly completed text (may be empty while a character is incomplete)."""
        self.ids.append(token_id)
        new_text = self._decode(self.ids[self._prefix_offset:])
        complete = not new_text.endswith(REPLACEMENT_CHAR)
        if len(new_text) > len(self._prefix_text) and (
                complete or len(self.ids) - self._read_offset >= _MAX_HELD_TOKENS):
            delta = new_text[len(self._prefix_text):]
            # Slide the window: the tokens just emitted become the context of the next decode.
            self._prefix_offset = self._read_offset
            self._read_offset = len(self.ids)
            self._prefix_text = self._decode(self.ids[self._prefix_offset:self._read_offset])
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete character at the very end decodes as U+FFFD)."""
        if self._read_offset >= len(self.ids):
            return ""
        new_text = self._decode(self.ids[self._prefix_offset:])
        delta = new_text[len(self._prefix_text):]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self.ids)
        self._prefix_text = self._decode(self.ids[self._prefix_offset:self._read_offset])
        return delta


class StopStringFilter:
    """Holds back text that might be the start of a stop string; cuts the text at the first stop string.

    Invariant: every occurrence of a stop string starts inside the held-back part (we only ever release
    text that cannot be the beginning of one), so searching the held part is enough.
    """

    def __init__(self, stop: Sequence[str] = ()):
        self.stop = [s for s in stop if s]
        self.pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        """Add decoded text; return what can be shown now. After a stop string, returns "" forever."""
        if self.stopped or not text:
            return ""
        if not self.stop:
            return text
        self.pending += text
        cut = -1
        for s in self.stop:
            i = self.pending.find(s)
            if i != -1 and (cut == -1 or i < cut):
                cut = i
        if cut != -1:
            self.stopped = True
            out, self.pending = self.pending[:cut], ""
            return out
        hold = self._longest_stop_prefix_suffix(self.pending)
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold:]
        return out

    def flush(self) -> str:
        """At the end of generation the held-back text was not a stop string after all: release it."""
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out

    def _longest_stop_prefix_suffix(self, text: str) -> int:
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if text.endswith(s[:n]):
                    best = n
                    break
        return best


class TextStream:
    """One sample's stream: push(token_id) -> text to show now; finish() -> the last piece.

    `text` is everything shown so far (the concatenation of the returned pieces); `stopped` turns True
    when a stop string appeared, at which point generation of this sample should end.
    """

    def __init__(self, decode: Decode, stop: Sequence[str] = (), context_ids: Sequence[int] = ()):
        self._detok = IncrementalDetokenizer(decode, context_ids)
        self._stops = StopStringFilter(stop)
        self.text = ""

    @property
    def stopped(self) -> bool:
        return self._stops.stopped

    def fork(self) -> TextStream:
        """An independent copy (its token list and stop filter), cheaper than deepcopy (beam search forks a
        stream per continuation)."""
        new = copy.copy(self)
        new._detok = copy.copy(self._detok)
        new._detok.ids = list(self._detok.ids)
        new._stops = copy.copy(self._stops)
        return new

    def push(self, token_id: int) -> str:
        out = self._stops.push(self._detok.push(token_id))
        self.text += out
        return out

    def finish(self) -> str:
        out = "" if self.stopped else self._stops.push(self._detok.flush())
        out += self._stops.flush()
        self.text += out
        return out
