"""Request bodies of the OpenAI-compatible routes: OpenAI's names, strict JSON types.

Strict: "5" is not a number and 2.5 is not a count (OpenAI refuses them too); an integer is accepted
where a number is expected. Unknown fields are ignored, as OpenAI's newer clients send fields older
servers do not know; fields we know but cannot honour are refused by `to_sampling` with a clear
message rather than silently ignored. `top_k`, `min_p` and `repetition_penalty` are accepted as
extensions (the names vLLM and llama.cpp use; the `openai` client sends them through `extra_body`).
So are `num_beams`, `length_penalty` and `early_stopping` (beam search, transformers' names and meaning):
non-streaming only, temperature 0 (the default when num_beams > 1), `n` = how many of the best beams.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from desktop_app.engine.generate.beam_search import MAX_BEAMS
from desktop_app.engine.generate.row_sampler import SamplingParams
from desktop_app.server.completion_logprobs import MAX_LOGPROBS
from desktop_app.server.errors import ApiError

MAX_STOP_STRINGS = 16
MAX_CHOICES = 16


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    early_stopping: bool | str | None = None

    def _refuse_unsupported(self) -> None:
        if self.logit_bias:
            raise ApiError(400, "logit_bias is not supported by this server", param="logit_bias")

    def to_sampling(self, max_tokens: int | None, default_max_tokens: int) -> SamplingParams:
        """Validated SamplingParams (ApiError 400 naming the parameter otherwise)."""
        self._refuse_unsupported()
        tokens = default_max_tokens if max_tokens is None else max_tokens
        _check(tokens >= 1, "max_tokens", f"max_tokens must be at least 1, got {tokens}")
        beams = 1 if self.num_beams is None else self.num_beams
        _check(1 <= beams <= MAX_BEAMS, "num_beams", f"num_beams must be between 1 and {MAX_BEAMS}, got {beams}")
        if beams > 1:
            self._check_beams(beams)
        # OpenAI's default temperature is 1; beam search is deterministic, so its default is 0.
        temperature = (0.0 if beams > 1 else 1.0) if self.temperature is None else self.temperature
        _check(0.0 <= temperature <= 2.0, "temperature", f"temperature must be between 0 and 2, got {temperature}")
        top_p = 1.0 if self.top_p is None else self.top_p
        _check(0.0 <= top_p <= 1.0, "top_p", f"top_p must be between 0 and 1, got {top_p}")
        n = 1 if self.n is None else self.n
        _check(1 <= n <= MAX_CHOICES, "n", f"n must be between 1 and {MAX_CHOICES}, got {n}")
        presence = self.presence_penalty or 0.0
        frequency = self.frequency_penalty or 0.0
        _check(-2.0 <= presence <= 2.0, "presence_penalty",
               f"presence_penalty must be between -2 and 2, got {presence}")
        _check(-2.0 <= frequency <= 2.0, "frequency_penalty",
               f"frequency_penalty must be between -2 and 2, got {frequency}")
        top_k = self.top_k or 0
        _check(top_k >= 0, "top_k", f"top_k must be 0 (off) or more, got {top_k}")
        min_p = self.min_p or 0.0
        _check(0.0 <= min_p <= 1.0, "min_p", f"min_p must be between 0 and 1, got {min_p}")
        repetition = 1.0 if self.repetition_penalty is None else self.repetition_penalty
        _check(0.1 <= repetition <= 5.0, "repetition_penalty",
               f"repetition_penalty must be between 0.1 and 5, got {repetition}")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        _check(len(stop) <= MAX_STOP_STRINGS, "stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(stop)}")
        seed = None if self.seed is None else self.seed % (1 << 62)  # torch generators take 64-bit seeds
        return SamplingParams(max_tokens=tokens, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                              repetition_penalty=repetition, presence_penalty=presence, frequency_penalty=frequency,
                              stop=[s for s in stop if s], seed=seed, n=n, num_beams=beams,
                              length_penalty=1.0 if self.length_penalty is None else float(self.length_penalty),
                              early_stopping=False if self.early_stopping is None else self.early_stopping)

    def _check_beams(self, beams: int) -> None:
        """Beam search settings that cannot be honoured are refused, naming the parameter."""
        _check(not self.stream, "stream", "beam search (num_beams > 1) is not available with stream: true: the "
               "best beam is only known when the search ends; send the request without streaming")
        _check(self.temperature is None or self.temperature == 0, "temperature",
               f"beam search (num_beams {beams}) picks tokens without randomness: leave temperature out or set it "
               f"to 0, got {self.temperature}")
        for name, value, neutral in (("top_p", self.top_p, 1.0), ("top_k", self.top_k, 0), ("min_p", self.min_p, 0.0),
                                     ("presence_penalty", self.presence_penalty, 0.0),
                                     ("frequency_penalty", self.frequency_penalty, 0.0)):
            _check(value is None or value == neutral, name, f"{name} does not apply to beam search (num_beams > 1)")
        n = 1 if self.n is None else self.n
        _check(n <= beams, "n", f"n ({n}) cannot exceed num_beams ({beams}): n is how many of the best beams "
               "are returned")
        if self.length_penalty is not None:
            _check(math.isfinite(self.length_penalty) and -10.0 <= self.length_penalty <= 10.0, "length_penalty",
                   f"length_penalty must be a finite number between -10 and 10, got {self.length_penalty}")
        _check(self.early_stopping is None or isinstance(self.early_stopping, bool) or self.early_stopping == "never",
               "early_stopping", f"early_stopping must be true, false or \"never\", got {self.early_stopping!r}")

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


def _check(ok: bool, param: str, message: str) -> None:
    if not ok:
        raise ApiError(400, message, param=param)


class CompletionRequest(_Sampling):
    """POST /v1/completions"""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None
    echo: bool | None = False
    best_of: int | None = None
    suffix: str | None = None

    @property
    def scoring(self) -> bool:
        """echo or logprobs asked: the prompt (and completion) are scored token by token (completion_logprobs)."""
        return bool(self.echo) or self.logprobs is not None

    def to_sampling(self, max_tokens: int | None, default_max_tokens: int) -> SamplingParams:
        # max_tokens 0 with echo scores the prompt and generates nothing (OpenAI's legacy way to score a text).
        if max_tokens == 0 and self.echo:
            return dataclasses.replace(super().to_sampling(1, default_max_tokens), max_tokens=0)
        return super().to_sampling(max_tokens, default_max_tokens)

    def _refuse_unsupported(self) -> None:
        super()._refuse_unsupported()
        if self.logprobs is not None:
            _check(0 <= self.logprobs <= MAX_LOGPROBS, "logprobs",
                   f"logprobs must be between 0 and {MAX_LOGPROBS} (how many likeliest tokens to list), "
                   f"got {self.logprobs}")
        _check(not (self.scoring and self.stream), "stream",
               "echo and logprobs are not available with stream: true; send the request without streaming")
        _check(not (self.scoring and (self.num_beams or 1) > 1), "num_beams",
               "echo and logprobs are not available with beam search (num_beams > 1)")
        if self.best_of not in (None, 1):
            raise ApiError(400, "best_of is not supported by this server (use n)", param="best_of")
        if self.suffix:
            raise ApiError(400, "suffix (insertion) is not supported by this server", param="suffix")


class ChatMessage(_Body):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatRequest(_Sampling):
    """POST /v1/chat/completions"""

    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None

    def _refuse_unsupported(self) -> None:
        super()._refuse_unsupported()
        if self.logprobs or self.top_logprobs:
            raise ApiError(400, "logprobs is not supported by this server", param="logprobs")
        if self.tools or self.functions:
            raise ApiError(400, "tool and function calling are not supported by this server", param="tools")
        if self.response_format and self.response_format.get("type", "text") != "text":
            raise ApiError(400, "only response_format {'type': 'text'} is supported", param="response_format")
