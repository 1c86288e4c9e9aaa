"""OpenAI-compatible routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions.

Responses follow OpenAI's shapes exactly (the official clients parse them): JSON objects, or with
`stream: true` server-sent events: `data: {chunk}` with new text (the tokens of up to ~20 ms together,
the first one at once), a chunk with the finish_reason per choice, an optional usage chunk
(`stream_options.include_usage`) and `data: [DONE]`.
An error after the stream started is sent as `data: {"error": {...}}` (the clients raise it).

`echo` and `logprobs` on /v1/completions (what lm-evaluation-harness's local-completions sends) return OpenAI's
legacy logprobs object, computed as the harness's own HF backend computes log-likelihoods (completion_logprobs.py);
such prompts are scored whole (one longer than the context is refused, never cut) and are not streamed.

Usage counts: prompt_tokens as decoded (after truncation to the context, once per prompt, not per
choice); completion_tokens every token the model produced, including a final end-of-text token.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from desktop_app.engine.generate.row_sampler import SamplingParams
from desktop_app.server.batcher import Done, Failed, GenerationRequest, Piece
from desktop_app.server.completion_logprobs import (
    logprobs_object,
    one_token,
    prompt_texts,
    score_sequences,
    scoring_needs_no_decoding,
)
from desktop_app.server.errors import ApiError
from desktop_app.server.openai_schemas import ChatRequest, CompletionRequest
from desktop_app.server.prompts import chat_prompt, completion_prompts
from desktop_app.server.state import ServedModel, get_state, served_model

router = APIRouter(prefix="/v1", tags=["OpenAI-compatible"])

OPENAI_DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default max_tokens for /v1/completions
_DISCONNECT_POLL_S = 0.25
_FLUSH_S = 0.02  # at most ~50 chunks/s per streaming request: smooth for people, cheap for the server


class _ClientGone(Exception):
    pass


class Job:
    """One request in flight: submits to the batcher, receives its events on this event loop."""

    def __init__(self, served: ServedModel, prompts: list[list[int]], params: SamplingParams, *, chat: bool):
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[list[Any]] = asyncio.Queue()
        # Text reaches this loop at most every _FLUSH_S (the first piece at once): a fast model's tokens then
        # share a wake-up of the HTTP thread and a chunk, which cuts its per-token work and the GIL time the
        # decode thread waits for.
        self.request = GenerationRequest(prompts, params, chat=chat, sink=self.queue.put_nowait, loop=self.loop,
                                         flush_s=_FLUSH_S)
        self.remaining = self.request.rows_needed
        self.prompt_tokens = sum(len(p) for p in prompts)
        self.completion_tokens = 0
        served.batcher.submit(self.request)

    def _take(self, batch: list[Any]) -> list[Piece | Done]:
        out: list[Piece | Done] = []
        for event in batch:
            if isinstance(event, Failed):
                self.remaining = 0
                raise ApiError(event.status, event.message, type="server_error")
            if isinstance(event, Done):
                self.remaining -= 1
                self.completion_tokens += event.completion_tokens
            out.append(event)
        return out

    async def events(self) -> AsyncIterator[Piece | Done]:
        """Every Piece and Done until all choices ended. Abandoning the iterator (the client went
        away and the response task was cancelled) cancels the rows."""
        try:
            while self.remaining > 0:
                batch = await self.queue.get()
                while not self.queue.empty():  # the client fell behind: what piled up goes in fewer chunks
                    batch = batch + self.queue.get_nowait()
                for event in _merge_pieces(self._take(batch)):
                    yield event
        finally:
            if self.remaining > 0:
                self.request.cancelled.set()

    async def results(self, http: Request) -> dict[int, Done]:
        """Wait for every choice (non-streaming), cancelling if the client disconnects meanwhile."""
        done: dict[int, Done] = {}
        check_at = self.loop.time() + _DISCONNECT_POLL_S
        try:
            while self.remaining > 0:
                try:
                    batch = await asyncio.wait_for(self.queue.get(), max(0.0, check_at - self.loop.time()))
                except asyncio.TimeoutError:
                    batch = []
                if self.loop.time() >= check_at:  # on a clock, not only when idle: events come every step
                    if await http.is_disconnected():
                        raise _ClientGone()
                    check_at = self.loop.time() + _DISCONNECT_POLL_S
                for event in self._take(batch):
                    if isinstance(event, Done):
                        done[event.index] = event
        finally:
            if self.remaining > 0:
                self.request.cancelled.set()
        return done

    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def _merge_pieces(events: list[Piece | Done]) -> list[Piece | Done]:
    """Join each choice's consecutive pieces (order kept: a choice's Done still follows its text)."""
    out: list[Piece | Done] = []
    pending: dict[int, int] = {}  # choice index -> position of its open Piece in out
    for event in events:
        if isinstance(event, Piece):
            at = pending.get(event.index)
            if at is None:
                pending[event.index] = len(out)
                out.append(Piece(event.index, event.text))
            else:
                out[at].text += event.text  # type: ignore[union-attr]
        else:
            pending.pop(event.index, None)
            out.append(event)
    return out


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _stream(job: Job, make_chunk: Any, first: list[dict[str, Any]], finish: Any, include_usage: bool,
                  head: dict[str, Any]) -> AsyncIterator[bytes]:
    """Chunks for every event; an error after the start goes out as an error chunk."""
    try:
        for chunk in first:
            yield _sse(chunk)
        async for event in job.events():
            yield _sse(make_chunk(event) if isinstance(event, Piece) else finish(event))
        if include_usage:
            yield _sse({**head, "choices": [], "usage": job.usage()})
        yield b"data: [DONE]\n\n"
    except ApiError as exc:
        yield _sse(exc.body())


def _head(kind: str, prefix: str, model: str, include_usage: bool) -> dict[str, Any]:
    head = {"id": f"{prefix}-{secrets.token_hex(12)}", "object": kind, "created": int(time.time()), "model": model,
            "system_fingerprint": None}
    if include_usage:
        head["usage"] = None  # OpenAI sends usage: null on every chunk but the last
    return head


@router.get("/models", summary="List the served model")
async def list_models(request: Request) -> dict[str, Any]:
    served = get_state(request).served
    return {"object": "list", "data": [served.card()] if served else []}


@router.get("/models/{model_id}", summary="Describe the served model")
async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    return served_model(request, model_id).card()


@router.post("/completions", summary="Continue a prompt (OpenAI completions)", response_model=None)
async def completions(body: CompletionRequest, request: Request) -> Response:
    served = served_model(request, body.model)
    batcher = served.batcher
    params = body.to_sampling(body.max_tokens, OPENAI_DEFAULT_COMPLETION_TOKENS)
    if body.scoring:
        return await _scored_completion(served, body, params, request)
    prompts = completion_prompts(served.loaded.tokenizer, body.prompt, batcher.context, batcher.vocab_size)
    job = Job(served, prompts, params, chat=False)
    head = _head("text_completion", "cmpl", served.id, body.stream and body.include_usage)

    def choice(index: int, text: str, finish: str | None) -> dict[str, Any]:
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}

    if body.stream:
        return StreamingResponse(
            _stream(job, lambda e: {**head, "choices": [choice(e.index, e.text, None)]}, [],
                    lambda e: {**head, "choices": [choice(e.index, "", e.finish_reason)]}, body.include_usage, head),
            media_type="text/event-stream", headers=_SSE_HEADERS)
    try:
        done = await job.results(request)
    except _ClientGone:
        return Response(status_code=499)
    head.pop("usage", None)
    return JSONResponse({**head, "choices": [choice(i, d.text, d.finish_reason) for i, d in sorted(done.items())],
                         "usage": job.usage()})


def _scoring_prompts(served: ServedModel, body: CompletionRequest) -> list[list[int]]:
    """The prompts whole: a scored prompt is never cut (a harness counts its tokens), so one longer than the
    context is refused."""
    batcher = served.batcher
    prompts = completion_prompts(served.loaded.tokenizer, body.prompt, None, batcher.vocab_size)
    longest = max(len(p) for p in prompts)
    if batcher.context and longest > batcher.context - 1:
        raise ApiError(400, f"a prompt of {longest} tokens does not fit this model's context of {batcher.context} "
                            f"tokens with echo or logprobs (prompts are scored whole, never cut): send at most "
                            f"{batcher.context - 1} tokens (lm-evaluation-harness: max_length={batcher.context})",
                       param="prompt", code="context_length_exceeded")
    return prompts


async def _scored_completion(served: ServedModel, body: CompletionRequest, params: SamplingParams,
                             request: Request) -> Response:
    """echo / logprobs: the completion (decoded as usual, or, for at most one greedy token, read from the scoring
    forward itself), then every token of prompt + completion scored on the decode thread (completion_logprobs)."""
    tokenizer, batcher, model = served.loaded.tokenizer, served.batcher, served.loaded.model
    prompts, n, top_k = _scoring_prompts(served, body), params.n, body.logprobs or 0
    if scoring_needs_no_decoding(params):
        scored = await asyncio.wrap_future(batcher.call_between_steps(
            lambda: score_sequences(model, prompts, top_k, batcher.pad_id, extend=params.max_tokens == 1)))
        done = {}
        for i, row in enumerate(scored):
            made = row.ids[len(prompts[i]):]
            text, finish = one_token(tokenizer, made[0], batcher.eos[False], params.stop) if made else ("", "length")
            done.update({i * n + k: Done(i * n + k, finish, len(made), text, made) for k in range(n)})
        rows = [scored[index // n] for index in sorted(done)]
    else:
        try:
            done = await Job(served, prompts, params, chat=False).results(request)
        except _ClientGone:
            return Response(status_code=499)
        sequences = [prompts[index // n] + done[index].token_ids for index in sorted(done)]
        rows = await asyncio.wrap_future(batcher.call_between_steps(
            lambda: score_sequences(model, sequences, top_k, batcher.pad_id)))
    texts = prompt_texts(tokenizer, body.prompt, prompts)
    choices = []
    for row, (index, d) in zip(rows, sorted(done.items()), strict=True):
        i = index // n
        start, offset = (0, 0) if body.echo else (len(prompts[i]), len(texts[i]))
        logprobs = None if body.logprobs is None else logprobs_object(tokenizer, row, start, offset)
        choices.append({"index": index, "text": (texts[i] if body.echo else "") + d.text, "logprobs": logprobs,
                        "finish_reason": d.finish_reason})
    used = {"prompt_tokens": sum(len(p) for p in prompts), "completion_tokens": sum(d.completion_tokens
                                                                                    for d in done.values())}
    return JSONResponse({**_head("text_completion", "cmpl", served.id, False), "choices": choices,
                         "usage": {**used, "total_tokens": used["prompt_tokens"] + used["completion_tokens"]}})


@router.post("/chat/completions", summary="Answer a conversation (OpenAI chat completions)", response_model=None)
async def chat_completions(body: ChatRequest, request: Request) -> Response:
    served = served_model(request, body.model)
    batcher = served.batcher
    tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    params = body.to_sampling(tokens, batcher.context or batcher.max_tokens_cap)
    ids = chat_prompt(served.loaded.tokenizer, body.messages, batcher.context, batcher.vocab_size)
    job = Job(served, [ids], params, chat=True)
    head = _head("chat.completion.chunk" if body.stream else "chat.completion", "chatcmpl", served.id,
                 body.stream and body.include_usage)

    def chunk(index: int, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {**head, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    if body.stream:
        first = [chunk(i, {"role": "assistant", "content": ""}, None) for i in range(params.n)]
        return StreamingResponse(
            _stream(job, lambda e: chunk(e.index, {"content": e.text}, None), first,
                    lambda e: chunk(e.index, {}, e.finish_reason), body.include_usage, head),
            media_type="text/event-stream", headers=_SSE_HEADERS)
    try:
        done = await job.results(request)
    except _ClientGone:
        return Response(status_code=499)
    choices = [{"index": i, "message": {"role": "assistant", "content": d.text, "refusal": None}, "logprobs": None,
                "finish_reason": d.finish_reason} for i, d in sorted(done.items())]
    return JSONResponse({**head, "choices": choices, "usage": job.usage()})
