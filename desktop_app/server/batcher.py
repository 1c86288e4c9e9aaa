"""One decode thread serves every generation request; concurrent requests decode as one batch.

Why one thread and one batch: decoding a small model is memory-bound (each step streams all weights
through the CPU), so a step over 16 rows costs little more than a step over one, and 16 clients get
many times the tokens/s of one. Requests are queued; between two decode steps the thread admits as
many as fit (their prompts prefilled together, their cache rows joined to the running batch, see
slot_cache.py), samples every live row with that row's own settings (row_sampler.py), hands each
request its new text, and drops rows that finished or whose client went away.

Text handling is the engine's: the same prompt truncation, token budget, end-of-sequence ids and
TextStream (never half a character, never part of a stop string), so a greedy request gives the text
`generate` gives. Events reach the request's `sink` from this thread (the HTTP layer hops them onto
its event loop); a request's `cancelled` flag is checked every step.

Beam search requests (params.num_beams > 1) take their own path on the same thread: each runs the
engine's BeamSearch (engine/generate/beam_search.py) on its own KV cache, one step per turn of the loop beside
the batch's step, so the batch keeps decoding while a beam search runs and normal requests never see
beam rows. At most MAX_BEAM_SEARCHES run at once; the others wait in their own queue. A beam request's
choices (its n best beams) arrive when its search ends.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from desktop_app.engine.data.chat import stop_token_ids
from desktop_app.engine.generate.beam_search import BeamSearch
from desktop_app.engine.generate.buckets import bucket_at_most
from desktop_app.engine.generate.prompts import context_length
from desktop_app.engine.generate.row_sampler import RowSampler, SamplingParams, sample_rows
from desktop_app.engine.generate.rows import Row
from desktop_app.engine.generate.settings import BeamSettings, DecodeLimits, Vocab
from desktop_app.engine.generate.slot_cache import FixedBatch, GraphSlotCache, SlotCache
from desktop_app.engine.generate.static_cache import check_fits, kv_bytes_per_row, rows_that_fit
from desktop_app.engine.generate.text_stream import TextStream, text_decoder
from desktop_app.engine.generate.threads import short_gil_switch
from desktop_app.server.errors import ApiError
from desktop_app.server.thread_policy import DecodeThreads

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 32
DEFAULT_CACHE_MB = 1024
DEFAULT_MAX_QUEUE = 512
MAX_BEAM_SEARCHES = 2  # beam searches decoding at once (each has its own KV cache of prompts x num_beams rows)
MAX_BEAM_ROWS = 256  # prompts x num_beams of one beam request


@dataclass
class Piece:
    """New text of choice `index` (never half a character or part of a stop string)."""

    index: int
    text: str


@dataclass
class Done:
    """Choice `index` ended: finish_reason "stop" (end token or stop string) or "length"."""

    index: int
    finish_reason: str
    completion_tokens: int
    text: str
    token_ids: list[int] = field(default_factory=list)  # every token produced (an end token included)


@dataclass
class Failed:
    """The request could not be completed (the server is stopping, or decoding failed)."""

    message: str
    status: int = 500


class GenerationRequest:
    """Prompts (token ids) x `params.n` choices; choice index = prompt index x n + k, as OpenAI numbers them.

    `sink(events)` receives lists of Piece / Done / Failed: called in the decode thread, or, when `loop`
    (an asyncio event loop) is given, on that loop, where the events of all its requests of one decode
    step arrive in one hop (one wake-up of the loop per step, not one per request). With `flush_s`, text
    is handed over at most that often (the first piece and a choice's end at once): a fast model's tokens
    then travel together, so the receiving thread wakes less often. Set `cancelled` (the client went
    away) and the rows leave the batch at the next step.
    """

    def __init__(self, prompts: list[list[int]], params: SamplingParams, *, chat: bool,
                 sink: Callable[[list[Any]], None], loop: Any = None, flush_s: float = 0.0):
        self.prompts, self.params, self.chat, self.sink, self.loop = prompts, params, chat, sink, loop
        self.flush_s = flush_s
        self.delivered_at: float | None = None  # decode-thread bookkeeping for flush_s
        self.cancelled = threading.Event()

    @property
    def rows_needed(self) -> int:
        return len(self.prompts) * self.params.n


class _Row:
    """One choice being decoded: its request, its sampler and the engine's per-row bookkeeping (rows.py)."""

    __slots__ = ("index", "request", "sampler", "state")

    def __init__(self, request: GenerationRequest, index: int, sampler: RowSampler, state: Row):
        self.request, self.index, self.sampler, self.state = request, index, sampler, state

    def push(self, token: int, out: list[Any]) -> bool:
        """Take the chosen token; append what to tell the client to `out`; True when the choice ended."""
        state = self.state
        self._piece(state.push(token), out)
        if state.reason is None and state.full:
            self._piece(state.end("length"), out)
        if state.reason is None:
            return False
        # An end id or a stop string is OpenAI's "stop"; the budget "length".
        out.append(Done(self.index, "length" if state.reason == "length" else "stop", len(state.ids), state.text,
                        list(state.ids)))
        return True

    def _piece(self, text: str, out: list[Any]) -> None:
        if text:
            out.append(Piece(self.index, text))


def _dispatch(group: list[tuple[GenerationRequest, list[Any]]]) -> None:
    """On an event loop: hand each request its events of one decode step."""
    for request, events in group:
        Batcher._call_sink(request, events)


def _cache_rows_for(model: Any, columns: int, budget_mb: int) -> int:
    """How many rows of `columns` cached tokens fit in `budget_mb` of KV cache (at least 1)."""
    per_row = kv_bytes_per_row(model, columns)
    return max(1, int(budget_mb * (1 << 20) // max(1, per_row)))


def _decode_cache(model: Any, pad_id: int, max_rows: int, static: bool | None, cache_mb: int) -> SlotCache | FixedBatch:
    """The batch's cache. static: the engine's static path (GraphSlotCache; None = on CUDA for the models it covers),
    rows sized from the free GPU memory; else continuous batching on a lean runner (`cache_mb` of cache), or, for
    models the lean runners do not cover, a fixed batch through transformers' forward."""
    device = next(model.parameters()).device
    context = context_length(model)
    if static is None:
        static = device.type == "cuda" and GraphSlotCache.supports(model)
    if static:  # CUDA: the static decoder's graph buckets, rows sized from the free GPU memory
        columns = 2 * (context or 1)
        fit = rows_that_fit(model, columns)
        if fit is not None and bucket_at_most(fit) < 1:
            check_fits(model, 1, columns)  # raises the one-line message
        rows = max_rows if fit is None else min(max_rows, bucket_at_most(fit))
        cache = GraphSlotCache(model, rows, pad_id)
        log.info("decoding on the static path (%s): up to %d rows", cache.reason, rows)
        return cache
    if SlotCache.supports(model):
        return SlotCache(model, min(max_rows, _cache_rows_for(model, 2 * (context or 1), cache_mb)), pad_id)
    return FixedBatch(model, max_rows, pad_id)


@dataclass(frozen=True)
class BatcherLimits:
    """Sizes of the batcher: `cache_mb` of KV cache for the CPU's rows, at most `max_queue` requests waiting, and
    `max_tokens_cap`, the token budget when the model states no context length."""

    cache_mb: int = DEFAULT_CACHE_MB
    max_queue: int = DEFAULT_MAX_QUEUE
    max_tokens_cap: int = 4096


class Batcher:
    """The decode thread and its queue. `submit` from any thread; `close` ends it (pending and running
    requests get Failed, status 503). `static`: decode on the engine's static path (GraphSlotCache); None
    = on CUDA for the models it covers, with rows sized from the free GPU memory (limits.cache_mb sizes the
    CPU's)."""

    def __init__(self, loaded: Any, *, max_rows: int = DEFAULT_MAX_ROWS, threads: int | None = None,
                 static: bool | None = None, limits: BatcherLimits = BatcherLimits()):
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.device = next(self.model.parameters()).device
        self.context = context_length(self.model)
        vocab = getattr(self.model.config, "vocab_size", None)
        self.vocab_size = int(vocab) if isinstance(vocab, int) else 0
        self.max_tokens_cap = limits.max_tokens_cap  # the budget when the model states no context length
        self.eos = {chat: set(stop_token_ids(self.tokenizer, self.model, chat=chat)) for chat in (False, True)}
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else next(iter(self.eos[False]), 0)
        self._decode = text_decoder(self.tokenizer)
        self.cache = _decode_cache(self.model, self.pad_id, max_rows, static, limits.cache_mb)
        self.capacity = self.cache.capacity
        self.max_queue = limits.max_queue
        self.threads = DecodeThreads(self.model, threads)
        self.rows: list[_Row | None] = []
        self.logits: torch.Tensor | None = None
        self._held: dict[GenerationRequest, list[Any]] = {}  # events waiting for their request's flush_s
        self._pending: deque[GenerationRequest] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._gil: contextlib.ExitStack | None = None
        self._thread = threading.Thread(target=self._run, name="azr-decode", daemon=True)
        self.stats = {"steps": 0, "tokens": 0, "requests": 0}
        self._beam_pending: deque[GenerationRequest] = deque()
        self._beams: list[tuple[GenerationRequest, BeamSearch]] = []  # decode thread only
        self._calls: list[tuple[Callable[[], Any], Future[Any]]] = []  # work that needs the model (call_between_steps)

    # --- any thread ---------------------------------------------------------------------------------
    @property
    def continuous(self) -> bool:
        return self.cache.continuous

    def start(self) -> None:
        if not self._thread.is_alive() and not self._closed:
            self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        if request.params.num_beams > 1:
            rows = len(request.prompts) * request.params.num_beams
            if rows > MAX_BEAM_ROWS:
                raise ApiError(400, f"this beam search needs {rows} decode rows (prompts x num_beams) but the server "
                                    f"runs at most {MAX_BEAM_ROWS} per request: ask for fewer beams or prompts",
                               param="num_beams")
            self._enqueue(request, beams=True)
            return
        if request.rows_needed > self.capacity:
            raise ApiError(400, f"this request needs {request.rows_needed} decode rows (prompts x n) but the server "
                                f"decodes at most {self.capacity} at once: ask for fewer choices or prompts",
                           param="n")
        self._enqueue(request, beams=False)

    def _enqueue(self, request: GenerationRequest, beams: bool) -> None:
        with self._cv:
            queue = self._beam_pending if beams else self._pending  # (close() replaces them, under the lock)
            if self._closed:
                raise ApiError(503, "the server is shutting down", type="server_error")
            if len(queue) >= self.max_queue:
                raise ApiError(429, f"too many requests waiting ({self.max_queue}); retry in a moment",
                               code="rate_limit_exceeded")
            queue.append(request)
            self.stats["requests"] += 1
            self._cv.notify()

    def call_between_steps(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run `fn` on the decode thread between two decode steps (that thread owns the model): prompt scoring
        (echo / logprobs) uses it. The future fails with ApiError 503 when the server stops first."""
        future: Future[Any] = Future()
        with self._cv:
            if self._closed:
                raise ApiError(503, "the server is shutting down", type="server_error")
            self._calls.append((fn, future))
            self._cv.notify()
        return future

    def _run_calls(self, calls: list[tuple[Callable[[], Any], Future[Any]]]) -> None:
        for fn, future in calls:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:  # handed to the waiting request, which reports it
                    future.set_exception(exc)

    def _fail_calls(self) -> None:
        with self._cv:
            calls, self._calls = self._calls, []
        for _, future in calls:
            if future.set_running_or_notify_cancel():
                future.set_exception(ApiError(503, "the server is shutting down", type="server_error"))

    def close(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():  # never started (or gone): nobody else will tell the waiting requests
            with self._cv:
                pending, self._pending = list(self._pending), deque()
                pending += list(self._beam_pending)
                self._beam_pending = deque()
            self._fail_all(pending, "the server is shutting down", 503)
            self._fail_calls()

    def load(self) -> dict[str, int]:
        """Rows decoding and requests waiting (for status pages and tests)."""
        with self._cv:
            waiting = len(self._pending)
        return {"rows": sum(r is not None for r in self.rows), "waiting": waiting, "capacity": self.capacity}

    # --- the decode thread --------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    while (not self._closed and not self._pending and not self.rows and not self._beam_pending
                           and not self._beams and not self._calls):
                        self._release_gil_setting()
                        self._cv.wait()
                    if self._closed:
                        return
                    admitted = self._take()
                    beams = self._take_beams()
                    calls, self._calls = self._calls, []
                self._run_calls(calls)
                self._iterate(admitted)
                if beams or self._beams:
                    self._beam_steps(beams)
        except BaseException:  # never expected: _iterate catches per step; log and fail what is left
            log.exception("the decode thread stopped")
        finally:
            with self._cv:
                self._closed = True
                pending, self._pending = list(self._pending), deque()
                pending += list(self._beam_pending)
                self._beam_pending = deque()
            pending += [request for request, _ in self._beams]
            self._fail_all(pending + self._active_requests(), "the server is shutting down", 503)
            self.rows, self.logits, self._beams = [], None, []
            self._fail_calls()
            self._release_gil_setting()

    def _take(self) -> list[GenerationRequest]:
        """Requests that fit now, first come first served (called with the lock held)."""
        room = self.cache.room()
        taken: list[GenerationRequest] = []
        while self._pending:
            request = self._pending[0]
            if request.cancelled.is_set():
                self._pending.popleft()
                continue
            if request.rows_needed > room:
                break
            taken.append(self._pending.popleft())
            room -= request.rows_needed
        return taken

    # --- beam search requests (decode thread) -------------------------------------------------------
    def _take_beams(self) -> list[GenerationRequest]:
        """Beam requests that may start now (called with the lock held)."""
        taken: list[GenerationRequest] = []
        while self._beam_pending and len(self._beams) + len(taken) < MAX_BEAM_SEARCHES:
            request = self._beam_pending.popleft()
            if not request.cancelled.is_set():
                taken.append(request)
        return taken

    def _budget(self, max_tokens: int, prompt_length: int) -> int:
        """The engine's budget (stream_text's): what fits in the context after the prompt (huge max_tokens are
        capped)."""
        if self.context:
            return max(1, min(max_tokens, self.context - prompt_length))
        return min(max_tokens, self.max_tokens_cap)

    def _start_beams(self, request: GenerationRequest) -> BeamSearch:
        p = request.params
        budget = self._budget(p.max_tokens, max(len(ids) for ids in request.prompts))
        beams = BeamSettings(p.num_beams, p.length_penalty, p.early_stopping, p.n, p.repetition_penalty)
        return BeamSearch(self.model, request.prompts, beams, DecodeLimits(budget, self.eos[request.chat], p.stop),
                          Vocab(self._decode, self.pad_id, len(self.tokenizer)))

    def _beam_steps(self, new: list[GenerationRequest]) -> None:
        """One step of every running beam search; a search that ended hands its request the choices."""
        for request in new:
            try:
                self._beams.append((request, self._start_beams(request)))
            except Exception as exc:
                log.exception("beam search could not start")
                self._fail_all([request], f"generation failed: {type(exc).__name__}: {exc}", 500)
        if self._beams and self._gil is None:
            self._gil = contextlib.ExitStack()
            self._gil.enter_context(short_gil_switch())
        still: list[tuple[GenerationRequest, BeamSearch]] = []
        finished: list[tuple[GenerationRequest, list[Any]]] = []
        for request, search in self._beams:
            if request.cancelled.is_set():
                continue
            try:
                self.threads.before(len(request.prompts) * request.params.num_beams)  # sets threads, records nothing
                if search.step():
                    still.append((request, search))
                    continue
                events: list[Any] = []
                for hyps in search.results():
                    for h in hyps:
                        index = h.prompt * request.params.n + h.rank
                        if h.text:
                            events.append(Piece(index, h.text))
                        reason = "length" if h.finish_reason == "length" else "stop"
                        events.append(Done(index, reason, len(h.token_ids), h.text, list(h.token_ids)))
                self.stats["tokens"] += search.cur * len(request.prompts) * request.params.num_beams
                finished.append((request, events))
            except Exception as exc:
                log.exception("beam search failed")
                self._fail_all([request], f"generation failed: {type(exc).__name__}: {exc}", 500)
        self._beams = still
        if not still and not self.rows:
            self._release_gil_setting()  # before the last results go out (see _step)
        for request, events in finished:
            self._deliver(request, events)

    def _iterate(self, admitted: list[GenerationRequest]) -> None:
        try:
            if admitted:
                self._admit(admitted)
            if not self.rows:
                return
            if self._gil is None:  # decoding: hand the GIL back and forth quickly with the HTTP thread
                self._gil = contextlib.ExitStack()
                self._gil.enter_context(short_gil_switch())
            self._step()
        except Exception as exc:
            log.exception("decoding failed")
            failed = {id(r): r for r in [*admitted, *self._active_requests()]}
            self._fail_all(list(failed.values()), f"generation failed: {type(exc).__name__}: {exc}", 500)
            self.rows, self.logits, self._held = [], None, {}
            self.cache.remove(list(range(self.cache.n)))

    def _admit(self, requests: list[GenerationRequest]) -> None:
        prompts: list[list[int]] = []
        prompt_of_row: list[int] = []
        new_rows: list[_Row] = []
        for request in requests:
            p = request.params
            for i, ids in enumerate(request.prompts):
                prompts.append(ids)
                limits = DecodeLimits(self._budget(p.max_tokens, len(ids)), self.eos[request.chat], p.stop)
                for k in range(p.n):
                    index = i * p.n + k
                    # A seed gives each choice its own reproducible stream; no seed = fresh randomness.
                    seed = p.seed + index if p.seed is not None else secrets.randbits(63)
                    sampler = RowSampler(p, seed, self.vocab_size, self.device, ids, len(self.tokenizer))
                    stream = TextStream(self._decode, limits.stop, context_ids=ids)
                    new_rows.append(_Row(request, index, sampler, Row(limits, stream)))
                    prompt_of_row.append(len(prompts) - 1)
        logits = self.cache.admit(prompts, prompt_of_row, max(r.state.limits.budget for r in new_rows))
        self.logits = logits if self.logits is None or not self.rows else torch.cat([self.logits, logits])
        self.rows.extend(new_rows)

    def _step(self) -> None:
        assert self.logits is not None
        if self.cache.continuous:  # rows are never None here
            live: list[int] | range = range(len(self.rows))
            rows = self.rows
            logits = self.logits
        else:
            live = [i for i, r in enumerate(self.rows) if r is not None]
            rows = [self.rows[i] for i in live]
            logits = self.logits if len(live) == len(self.rows) else self.logits[live]
        chosen = sample_rows(logits, [r.sampler for r in rows])  # type: ignore[union-attr]
        next_ids = [self.pad_id] * len(self.rows)
        leaving: list[int] = []
        out: dict[GenerationRequest, list[Any]] = {}
        for i, row, token in zip(live, rows, chosen, strict=True):
            assert row is not None
            if row.request.cancelled.is_set():
                leaving.append(i)
                continue
            next_ids[i] = token
            if row.push(token, out.setdefault(row.request, [])):
                leaving.append(i)
        self.stats["tokens"] += len(chosen)
        if leaving:
            self._leave(leaving, next_ids)
        if not self.cache.n and not self._beams:
            # The batch is done: restore the GIL switch interval before the last results go out, so nothing a
            # client does after its answer arrives runs with the lowered setting.
            self._release_gil_setting()
        self._hand_over(out)
        if self.cache.n:
            self.threads.before(self.cache.n)
            self.logits = self.cache.step(next_ids[: len(self.rows)])
            self.threads.after()
            self.stats["steps"] += 1
        else:
            self.rows, self.logits = [], None

    def _leave(self, leaving: list[int], next_ids: list[int]) -> None:
        moves = self.cache.remove(leaving)
        if not self.cache.continuous:
            for i in leaving:
                self.rows[i] = None
            if self.cache.n == 0:
                self.rows = []
            return
        for src, dst in moves:
            self.rows[dst] = self.rows[src]
            next_ids[dst] = next_ids[src]
        del self.rows[self.cache.n:]
        del next_ids[self.cache.n:]

    def _hand_over(self, out: dict[GenerationRequest, list[Any]]) -> None:
        """Deliver this step's events, holding text of requests with `flush_s` until it is due."""
        for request, events in out.items():
            if events:
                self._held.setdefault(request, []).extend(events)
        if not self._held:
            return
        now = time.perf_counter()
        due = []
        for request, events in list(self._held.items()):
            if request.cancelled.is_set():
                del self._held[request]
            elif (request.delivered_at is None or now - request.delivered_at >= request.flush_s
                  or any(isinstance(e, Done) for e in events)):
                due.append((request, events))
                del self._held[request]
                request.delivered_at = now
        self._deliver_all(due)

    def _deliver_all(self, items: list[tuple[GenerationRequest, list[Any]]]) -> None:
        by_loop: dict[int, list[tuple[GenerationRequest, list[Any]]]] = {}
        for request, events in items:
            if request.loop is None:
                self._deliver(request, events)
            else:
                by_loop.setdefault(id(request.loop), []).append((request, events))
        for group in by_loop.values():
            try:
                group[0][0].loop.call_soon_threadsafe(_dispatch, group)
            except RuntimeError:  # that event loop is closed: its clients are gone
                for request, _ in group:
                    request.cancelled.set()

    def _deliver(self, request: GenerationRequest, events: list[Any]) -> None:
        if request.loop is not None:
            self._deliver_all([(request, events)])
        else:
            self._call_sink(request, events)

    @staticmethod
    def _call_sink(request: GenerationRequest, events: list[Any]) -> None:
        try:
            request.sink(events)
        except Exception:  # the receiving side is gone: treat it as a disconnect
            request.cancelled.set()

    def _active_requests(self) -> list[GenerationRequest]:
        seen: dict[int, GenerationRequest] = {}
        for row in self.rows:
            if row is not None:
                seen.setdefault(id(row.request), row.request)
        return list(seen.values())

    def _fail_all(self, requests: list[GenerationRequest], message: str, status: int) -> None:
        for request in requests:
            if not request.cancelled.is_set():
                self._deliver(request, [Failed(message, status)])

    def _release_gil_setting(self) -> None:
        if self._gil is not None:
            self._gil.close()
            self._gil = None
