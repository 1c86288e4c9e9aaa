"""Streaming text generation: our own decode loop with a KV cache, batch sampling and stop handling.

Why not `model.generate()`: decoding a small model on a CPU is a long chain of tiny ops, and every
Python-level call costs microseconds. transformers' forward + generate() add module calls, mask and
cache objects and a list of logits processors per token; the loop below, on the lean runners
(runners.py), needs about half the calls.

- The runner (runners.py) computes one forward of one position per new token over a KV cache, through
  the lean llama / gpt2 path or transformers' own forward; tests check both against `generate()`.
- The sampler (sampling.py) applies only the processors that are enabled, and one `.tolist()` per step
  moves all new token ids to Python at once.
- Text is decoded incrementally (text_stream.py): never half a character, never part of a stop string.
- Several samples run as one batch; each distinct prompt is prefilled once and its cache rows repeated.
  Prompts of different lengths are padded on the LEFT with an attention mask and position ids counted
  from each row's first real token, so each row computes what it would compute alone (greedy batch ==
  greedy single, tested).
- A sample ends at a stop string, the token budget, or a stop token: data/chat.py's `stop_token_ids`
  (the end-of-sequence ids, and in chat mode the chat template's end-of-turn token).
- Threads (threads.py): "auto" starts on the safe choice (1 thread for small work on CPU) and a
  ThreadTuner times it against all cores while decoding, keeps the faster and re-checks; the GIL switch
  interval is lowered while generating.
- Prompts (prompts.py) are token ids of plain text or of a conversation rendered by the chat template.
- On CUDA, llama and gpt2 models take the static path instead (static_decode.py: a kept static KV cache,
  steps replayed as CUDA graphs, sampling and stop checks on the GPU, tokens read every few steps);
  `_decode_static` turns its chunks of tokens into the same events. The CPU keeps the loop below.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

from desktop_app.engine.data.chat import stop_token_ids
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import GenerationStats, TextDelta
from desktop_app.engine.generate.beam_search import stream_beams
from desktop_app.engine.generate.device_sampling import SamplingSettings
from desktop_app.engine.generate.prompts import context_length, encode_prompt
from desktop_app.engine.generate.runners import BACKENDS, left_padded, make_runner
from desktop_app.engine.generate.sampling import Sampler
from desktop_app.engine.generate.static_decode import StaticGeneration, log_choice, use_static_path
from desktop_app.engine.generate.text_stream import TextStream
from desktop_app.engine.generate.thread_tuner import ThreadTuner
from desktop_app.engine.generate.threads import (
    decode_threads,
    remember_tuner,
    short_gil_switch,
    thread_tuner,
    torch_threads,
)
from desktop_app.engine.specs import GenerateSpec

if TYPE_CHECKING:
    from desktop_app.engine.model.loading import LoadedModel

DECODE_BACKENDS = (*BACKENDS, "static")


def _decoder(tokenizer: Any) -> Any:
    """ids -> text through the Rust tokenizer directly (the Python wrapper adds per-call overhead)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: backend.decode(list(ids), skip_special_tokens=True)
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)


# ----------------------------------------------------------------------------------------------------
# The decode loop


def stream_text(loaded: LoadedModel, prompt: str | Sequence[str], spec: GenerateSpec,
                stop_event: Any = None, *, threads: int | str | None = "auto",
                backend: str = "auto") -> Iterator[TextDelta | GenerationStats]:
    """Generate `spec.samples` completions of `prompt`, yielding text as it comes.

    Yields TextDelta(sample, text) pieces (never half a character or part of a stop string) and, when
    a sample ends, its GenerationStats (full text, generated token ids incl. a final EOS id, TTFT,
    tokens/s, finish_reason length|stop|eos|cancelled). `prompt` may also be a list of prompts: each
    gets `spec.samples` rows, numbered prompt-major (sample = prompt_index * samples + k).
    With spec.num_beams > 1 it runs beam search (beam_search.py) instead: samples = the best beams, best
    first, each yielded whole (one TextDelta, then its GenerationStats) when the search ends.
    `stop_event` (a threading.Event) is checked before every token (on the static path: every chunk of
    tokens read). `threads`: torch threads while decoding ("auto" = decode_threads(), None = leave unchanged,
    or a number). `backend`: auto|lean|hf|static (auto: the static path on CUDA, see static_decode.py).
    """
    t0 = time.perf_counter()
    spec.check()
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    if not prompts:
        raise UserError("no prompt given")
    encoded = [encode_prompt(tokenizer, p, chat=spec.chat) for p in prompts]
    vocab = getattr(model.config, "vocab_size", None)
    if isinstance(vocab, int) and any(i >= vocab for ids in encoded for i in ids):
        raise UserError(f"the prompt uses tokens the model does not know (its vocabulary has {vocab} tokens, "
                        "the tokenizer more): the tokenizer does not belong to this model")
    ctx = context_length(model)
    if ctx:
        # Keep the end of an over-long prompt: the model cannot attend past its context.
        encoded = [r[-(ctx - 1):] if len(r) > ctx - 1 else r for r in encoded]
    longest = max(len(r) for r in encoded)
    budget = spec.max_new_tokens if not ctx else max(1, min(spec.max_new_tokens, ctx - longest))
    if backend not in DECODE_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(DECODE_BACKENDS)}")
    if spec.num_beams > 1:  # beam search: its own loop (beam_search.py); the text comes when the search ends
        n_threads = decode_threads(model, len(encoded) * spec.num_beams) if threads == "auto" else threads
        with torch_threads(n_threads), short_gil_switch():  # type: ignore[arg-type]
            yield from stream_beams(model, tokenizer, encoded, budget, spec, stop_event,
                                    "auto" if backend == "static" else backend, t0,
                                    _decoder(tokenizer), set(stop_token_ids(tokenizer, model, chat=spec.chat)))
        return
    static, reason = use_static_path(model, backend)
    if static:
        log_choice(model, reason)
        with short_gil_switch():
            yield from _decode_static(model, tokenizer, encoded, budget, spec, stop_event, t0)
        return
    tuner, n_threads = thread_tuner(model, len(encoded) * spec.samples) if threads == "auto" else (None, threads)
    try:
        with torch_threads(n_threads), short_gil_switch():  # type: ignore[arg-type]
            yield from _decode(model, tokenizer, encoded, budget, spec, stop_event, backend, t0, tuner)
    finally:
        if tuner is not None:
            remember_tuner(model, len(encoded) * spec.samples, tuner)


def _decode(model: Any, tokenizer: Any, prompts: list[list[int]], budget: int, spec: GenerateSpec,
            stop_event: Any, backend: str, t0: float,
            tuner: ThreadTuner | None = None) -> Iterator[TextDelta | GenerationStats]:
    rows = [ids for ids in prompts for _ in range(spec.samples)]  # prompt-major sample numbering
    n = len(rows)
    device = next(model.parameters()).device
    eos = set(stop_token_ids(tokenizer, model, chat=spec.chat))
    decode = _decoder(tokenizer)
    streams = [TextStream(decode, spec.stop, context_ids=r) for r in rows]
    generated: list[list[int]] = [[] for _ in rows]
    first_t: list[float] = [0.0] * n
    last_t: list[float] = [0.0] * n
    active = list(range(n))
    longest = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)

    def stats(b: int, reason: str) -> GenerationStats:
        count = len(generated[b])
        ttft = (first_t[b] - t0) if count else (time.perf_counter() - t0)
        if count > 1 and last_t[b] > first_t[b]:
            rate = (count - 1) / (last_t[b] - first_t[b])
        else:
            rate = count / ttft if ttft > 0 else 0.0
        return GenerationStats(sample=b, text=streams[b].text, token_ids=list(generated[b]), ttft_ms=ttft * 1e3,
                               tokens_per_s=rate, finish_reason=reason)

    with torch.inference_mode():
        # Prefill each distinct prompt once, then repeat its cache rows for its samples.
        ids, mask = left_padded(prompts, pad, device)
        vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        sampler = Sampler(temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p, min_p=spec.min_p,
                          repetition_penalty=spec.repetition_penalty, seed=spec.seed, batch=n, vocab_size=vocab,
                          device=device, tokens=len(tokenizer))
        sampler.observe_prompt(rows)
        runner = make_runner(model, len(prompts), longest + budget, backend)
        logits = runner.prefill(ids, mask)
        if spec.samples > 1:
            runner.expand(spec.samples)
            logits = logits.repeat_interleave(spec.samples, dim=0)
    cancelled = False
    try:
        for step in range(budget):
            if stop_event is not None and stop_event.is_set():
                cancelled = True
                break
            with torch.inference_mode():
                next_ids = sampler(logits)
                chosen = next_ids.tolist()
            now = time.perf_counter()
            still: list[int] = []
            for b in active:
                token = chosen[b]
                generated[b].append(token)
                if len(generated[b]) == 1:
                    first_t[b] = now
                last_t[b] = now
                if token in eos:
                    piece = streams[b].finish()
                    if piece:
                        yield TextDelta(sample=b, text=piece)
                    yield stats(b, "eos")
                    continue
                piece = streams[b].push(token)
                if piece:
                    yield TextDelta(sample=b, text=piece)
                if streams[b].stopped:
                    yield stats(b, "stop")
                    continue
                still.append(b)
            active = still
            if not active or step == budget - 1:
                break
            with torch.inference_mode():
                if tuner is None:
                    logits = runner.step(next_ids)
                else:
                    tuner.apply()
                    t_step = time.perf_counter()
                    logits = runner.step(next_ids)
                    tuner.record(time.perf_counter() - t_step)
        reason = "cancelled" if cancelled else "length"
        for b in active:
            piece = streams[b].finish()
            if piece:
                yield TextDelta(sample=b, text=piece)
            yield stats(b, reason)
        active = []
    finally:
        del runner  # free the KV cache promptly even when the consumer abandons the stream


def _decode_static(model: Any, tokenizer: Any, prompts: list[list[int]], budget: int, spec: GenerateSpec,
                   stop_event: Any, t0: float) -> Iterator[TextDelta | GenerationStats]:
    """_decode's job on the static path (static_decode.py): tokens arrive in chunks read every few steps."""
    rows = [ids for ids in prompts for _ in range(spec.samples)]
    n = len(rows)
    eos = set(stop_token_ids(tokenizer, model, chat=spec.chat))
    decode = _decoder(tokenizer)
    streams = [TextStream(decode, spec.stop, context_ids=r) for r in rows]
    generated: list[list[int]] = [[] for _ in rows]
    first_t: list[float] = [0.0] * n
    last_t: list[float] = [0.0] * n
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
    settings = SamplingSettings(spec.temperature, spec.top_k, spec.top_p, spec.min_p, spec.repetition_penalty,
                                len(tokenizer))
    run = StaticGeneration(model, prompts, budget=budget, samples=spec.samples, settings=settings, seed=spec.seed,
                           stop_ids=eos, pad_id=pad)

    def stats(b: int, reason: str) -> GenerationStats:
        count = len(generated[b])
        ttft = (first_t[b] - t0) if count else (time.perf_counter() - t0)
        rate = (count - 1) / (last_t[b] - first_t[b]) if count > 1 and last_t[b] > first_t[b] else \
            (count / ttft if ttft > 0 else 0.0)
        return GenerationStats(sample=b, text=streams[b].text, token_ids=list(generated[b]), ttft_ms=ttft * 1e3,
                               tokens_per_s=rate, finish_reason=reason)

    active = list(range(n))
    cancelled = False
    chunks = run.run()
    try:
        for chunk in chunks:
            still: list[int] = []
            ended: list[int] = []
            for b in active:
                for token in chunk.tokens[b]:
                    generated[b].append(token)
                    if len(generated[b]) == 1:
                        first_t[b] = chunk.at
                    last_t[b] = chunk.at
                    if token in eos:
                        piece = streams[b].finish()
                        if piece:
                            yield TextDelta(sample=b, text=piece)
                        yield stats(b, "eos")
                        break
                    piece = streams[b].push(token)
                    if piece:
                        yield TextDelta(sample=b, text=piece)
                    if streams[b].stopped:
                        yield stats(b, "stop")
                        ended.append(b)
                        break
                else:
                    still.append(b)
            active = still
            run.finish_rows(ended)
            if not active:
                break
            if stop_event is not None and stop_event.is_set():
                cancelled = True
                break
        for b in active:
            piece = streams[b].finish()
            if piece:
                yield TextDelta(sample=b, text=piece)
            yield stats(b, "cancelled" if cancelled else "length")
    finally:
        chunks.close()  # releases the decoder even when the consumer abandons the stream
