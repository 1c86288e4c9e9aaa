"""Per-row decode bookkeeping, written once for every decode loop.

A `Row` takes a row's tokens as they are chosen and says when and why it ends: a stop id ("eos", kept as its
last token), a stop string in its text ("stop", the text cut before it), its line limit or a completeness check
("stop"); the budget and cancelling are the loop's to call (`end`). It keeps the row's ids, the text shown so far
(through a TextStream: never half a character, never part of a stop string) and the times of its first and last
token for its GenerationStats.

Users: generate's CPU loop and static path (decode.py, through `Rows`, which turns rows into the TextDelta /
GenerationStats events of stream_text), rollouts (selfplay/rollout.py: ids only, with line limits and checks)
and the server's continuous batching (server/batcher.py: one Row per choice, its own budget).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from desktop_app.engine.events import GenerationStats, TextDelta
from desktop_app.engine.generate.settings import DecodeLimits
from desktop_app.engine.generate.text_stream import TextStream

Check = Callable[[list[int]], bool]  # is this row's answer complete?


def tokens_per_second(count: int, first: float, last: float, fallback_s: float) -> float:
    """Decode speed of `count` tokens: the ones after the first over the time between the first and the last,
    else (one token, or no time between) all of them over `fallback_s`."""
    if count > 1 and last > first:
        return (count - 1) / (last - first)
    return count / fallback_s if fallback_s > 0 else 0.0


class Row:
    """One row being decoded: its ids, its text (when it has a stream), its timing, and why it ended."""

    __slots__ = ("check", "first_at", "ids", "last_at", "limits", "lines", "reason", "stream")

    def __init__(self, limits: DecodeLimits, stream: TextStream | None = None, check: Check | None = None):
        self.limits, self.stream, self.check = limits, stream, check
        self.ids: list[int] = []
        self.first_at = self.last_at = 0.0
        self.lines = 0
        self.reason: str | None = None  # eos | stop | length | cancelled once it ended; None while it runs

    @property
    def full(self) -> bool:
        """The row has used its token budget."""
        return len(self.ids) >= self.limits.budget

    @property
    def text(self) -> str:
        return self.stream.text if self.stream is not None else ""

    def push(self, token: int, now: float = 0.0) -> str:
        """Take the row's next token (chosen at time `now`); returns the text that can be shown now ('' if none).
        Sets `reason` when the token ends the row."""
        self.ids.append(token)
        if len(self.ids) == 1:
            self.first_at = now
        self.last_at = now
        limits = self.limits
        if token in limits.stop_ids:
            return self.end("eos")  # the text held back for a possible stop string is shown after all
        text = ""
        if self.stream is not None:
            text = self.stream.push(token)
            if self.stream.stopped:
                self.reason = "stop"
                return text
        if token in limits.newline_ids:
            self.lines += 1
        if (limits.max_lines > 0 and self.lines >= limits.max_lines) or (
                self.check is not None and self.check(self.ids)):
            self.reason = "stop"
        return text

    def end(self, reason: str) -> str:
        """End the row now (`reason`); returns the text its stream still held back."""
        self.reason = reason
        return self.stream.finish() if self.stream is not None else ""

    def stats(self, sample: int, t0: float) -> GenerationStats:
        """The row's GenerationStats (sample number, text, ids, time to first token from t0, tokens/s)."""
        count = len(self.ids)
        ttft = (self.first_at - t0) if count else (time.perf_counter() - t0)
        return GenerationStats(sample=sample, text=self.text, token_ids=list(self.ids), ttft_ms=ttft * 1e3,
                               tokens_per_s=tokens_per_second(count, self.first_at, self.last_at, ttft),
                               finish_reason=self.reason or "length")


class Rows:
    """stream_text's rows (one per sample, each with its TextStream) and the events they yield: a TextDelta per
    piece of text, a row's GenerationStats when it ends. `active`: the rows still running, in order."""

    def __init__(self, prompts: Sequence[Sequence[int]], limits: DecodeLimits, decode: Callable[[Sequence[int]], str],
                 t0: float):
        self.rows = [Row(limits, TextStream(decode, limits.stop, context_ids=p)) for p in prompts]
        self.t0 = t0
        self.active = list(range(len(self.rows)))

    def push(self, b: int, tokens: Iterable[int], now: float) -> Iterator[TextDelta | GenerationStats]:
        """Row b's new tokens (read at time `now`) up to the one that ends it: its text, and its stats if it ended."""
        row = self.rows[b]
        for token in tokens:
            text = row.push(token, now)
            if text:
                yield TextDelta(sample=b, text=text)
            if row.reason is not None:
                yield row.stats(b, self.t0)
                return

    def ended(self, reason: str) -> list[int]:
        """The active rows that ended with `reason` (before `settle` drops them)."""
        return [b for b in self.active if self.rows[b].reason == reason]

    def settle(self) -> list[int]:
        """Drop the rows that ended from `active`; returns the rows still running."""
        self.active = [b for b in self.active if self.rows[b].reason is None]
        return self.active

    def end(self, reason: str) -> Iterator[TextDelta | GenerationStats]:
        """End every running row (`reason`: length or cancelled): the text each held back, then its stats."""
        for b in self.active:
            row = self.rows[b]
            text = row.end(reason)
            if text:
                yield TextDelta(sample=b, text=text)
            yield row.stats(b, self.t0)
        self.active = []
