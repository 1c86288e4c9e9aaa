"""Streaming text generation: our own decode loop with a KV cache, batch sampling and stop handling.

Why not `model.generate()`: decoding a small model on a CPU is a long chain of tiny ops, and every
Python-level call costs microseconds. transformers' forward + generate() add module calls, mask and
cache objects and a list of logits processors per token; token_loop.py's loop, on the lean runners
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
  `_decode_static` turns its chunks of tokens into the same events. Elsewhere the steps come from token_loop.py,
  the loop the RL methods' rollouts run too.
- Both paths keep their per-row bookkeeping (stops, budget, text, timing, stats) in rows.py's `Rows`, which the
  rollouts and the server's batcher share.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from desktop_app.engine.data.chat import stop_token_ids
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import GenerationStats, TextDelta
from desktop_app.engine.generate.beam_search import BeamSearch, stream_beams
from desktop_app.engine.generate.prompts import context_length, encode_prompt
from desktop_app.engine.generate.rows import Rows
from desktop_app.engine.generate.runners import BACKENDS
from desktop_app.engine.generate.settings import BeamSettings, DecodeLimits, PromptRows, SamplingSettings, Vocab
from desktop_app.engine.generate.static_decode import StaticGeneration, log_choice, use_static_path
from desktop_app.engine.generate.text_stream import text_decoder
from desktop_app.engine.generate.thread_tuner import ThreadTuner
from desktop_app.engine.generate.threads import (
    decode_threads,
    remember_tuner,
    short_gil_switch,
    thread_tuner,
    torch_threads,
)
from desktop_app.engine.generate.token_loop import LoopOptions, token_steps
from desktop_app.engine.specs import GenerateSpec

if TYPE_CHECKING:
    from desktop_app.engine.model.loading import LoadedModel

DECODE_BACKENDS = (*BACKENDS, "static")


@dataclass
class _Call:
    """One stream_text call as its decode paths see it: the encoded prompts, the settings, when it began."""

    model: Any
    tokenizer: Any
    prompts: list[list[int]]
    spec: GenerateSpec
    budget: int
    stop_event: Any
    t0: float
    eos: set[int] = field(init=False)  # the ids that end a sample (data/chat.py's stop_token_ids)

    def __post_init__(self) -> None:
        self.eos = set(stop_token_ids(self.tokenizer, self.model, chat=self.spec.chat))

    @property
    def limits(self) -> DecodeLimits:
        return DecodeLimits(self.budget, self.eos, self.spec.stop)

    @property
    def batch(self) -> PromptRows:
        """`spec.samples` rows per prompt, prompt-major; padded with the tokenizer's pad id (else an end id)."""
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else next(iter(self.eos), 0)
        return PromptRows(self.prompts, self.spec.samples, pad)

    @property
    def sampling(self) -> SamplingSettings:
        s = self.spec
        return SamplingSettings(s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, len(self.tokenizer))

    def rows(self) -> Rows:
        """Every row's bookkeeping (rows.py), with a TextStream each."""
        return Rows(self.batch.rows(), self.limits, text_decoder(self.tokenizer), self.t0)

    def cancelled(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()


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
    call = _encode(loaded, prompt, spec, stop_event, t0)
    model, n = call.model, len(call.prompts)
    if backend not in DECODE_BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(DECODE_BACKENDS)}")
    if spec.num_beams > 1:  # beam search: its own loop (beam_search.py); the text comes when the search ends
        beams = BeamSettings(spec.num_beams, spec.length_penalty, spec.early_stopping, spec.samples,
                             spec.repetition_penalty)
        vocab = Vocab(text_decoder(call.tokenizer), call.tokenizer.pad_token_id, len(call.tokenizer))
        search = BeamSearch(model, call.prompts, beams, call.limits, vocab, "auto" if backend == "static" else backend)
        n_threads = decode_threads(model, n * spec.num_beams) if threads == "auto" else threads
        with torch_threads(n_threads), short_gil_switch():  # type: ignore[arg-type]
            yield from stream_beams(search, spec.samples, stop_event, t0)
        return
    static, reason = use_static_path(model, backend)
    if static:
        log_choice(model, reason)
        with short_gil_switch():
            yield from _decode_static(call)
        return
    tuner, n_threads = thread_tuner(model, n * spec.samples) if threads == "auto" else (None, threads)
    try:
        with torch_threads(n_threads), short_gil_switch():  # type: ignore[arg-type]
            yield from _decode(call, backend, tuner)
    finally:
        if tuner is not None:
            remember_tuner(model, n * spec.samples, tuner)


def _encode(loaded: LoadedModel, prompt: str | Sequence[str], spec: GenerateSpec, stop_event: Any,
            t0: float) -> _Call:
    """The prompts' token ids (each cut to what the context holds) and the token budget that fits after them."""
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
    return _Call(model, tokenizer, encoded, spec, budget, stop_event, t0)


def _decode(call: _Call, backend: str, tuner: ThreadTuner | None) -> Iterator[TextDelta | GenerationStats]:
    """The lean / transformers runners' stream: token_loop.py's steps turned into text events."""
    rows = call.rows()
    options = LoopOptions(backend, call.spec.seed, tuner=tuner)
    steps = token_steps(call.model, call.batch, call.budget, call.sampling,
                        lambda b: rows.rows[b].reason is None, options)
    cancelled = False
    try:
        for step in steps:
            if call.cancelled():
                cancelled = True
                break
            now = time.perf_counter()
            for b, token in zip(step.rows, step.tokens, strict=True):
                if rows.rows[b].reason is None:
                    yield from rows.push(b, (token,), now)
            rows.settle()
        yield from rows.end("cancelled" if cancelled else "length")
    finally:
        steps.close()  # frees the KV cache promptly even when the consumer abandons the stream


def _decode_static(call: _Call) -> Iterator[TextDelta | GenerationStats]:
    """_decode's job on the static path (static_decode.py): tokens arrive in chunks read every few steps."""
    rows = call.rows()
    run = StaticGeneration(call.model, call.batch, call.limits, call.sampling, seed=call.spec.seed)
    cancelled = False
    chunks = run.run()
    try:
        for chunk in chunks:
            for b in rows.active:
                yield from rows.push(b, chunk.tokens[b], chunk.at)
            ended = rows.ended("stop")  # stop strings: the device only knows the stop ids
            rows.settle()
            run.finish_rows(ended)
            if not rows.active:
                break
            if call.cancelled():
                cancelled = True
                break
        yield from rows.end("cancelled" if cancelled else "length")
    finally:
        chunks.close()  # releases the decoder even when the consumer abandons the stream
