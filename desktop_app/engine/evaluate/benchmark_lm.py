"""The model the app loaded, as an lm-evaluation-harness model: the harness's own HFLM around our model instance.

Everything that decides a score is HFLM's (tokenizing, truncation, the order and the batching of requests, the
one-token-continuation cache, stop strings, post-processing); two things are ours, for speed:
- log-likelihood: the same right-padded forward pass as HFLM's, but the output projection and the softmax run only
  at the continuation's positions (`logits_to_keep`), not at every context position over the whole vocabulary
  (for SmolLM2-135M that is a fifth of the compute and most of the memory traffic of a multiple-choice task);
- greedy generation: our batched decoder (selfplay/rollout.sample_completions: KV cache, lean runners, the static
  CUDA path on a GPU) instead of transformers' generate. Sampled generation stays HFLM's.
Progress and the stop flag go through a Tracker: checked after every batch.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import Collator
from lm_eval.models.utils_hf import pad_and_concat

from desktop_app.engine.events import Progress


class BenchmarksStopped(Exception):
    """Raised inside the harness's loop when the user stops: it unwinds the harness between two batches."""


class Tracker:
    """Requests done of the current kind of work, reported as Progress; raises BenchmarksStopped once stop is set."""

    def __init__(self, stop: threading.Event, report: Callable[[Progress], None]):
        self.stop, self.report = stop, report
        self.kind, self.done, self.total = "", 0, 0

    def begin(self, kind: str, total: int) -> None:
        self.kind, self.done, self.total = kind, 0, total
        self.check()
        self.report(Progress("benchmarks", 0, total, "requests", kind))

    def advance(self, count: int) -> None:
        self.done = min(self.total, self.done + count)
        self.report(Progress("benchmarks", self.done, self.total, "requests", self.kind))
        self.check()

    def check(self) -> None:
        if self.stop.is_set():
            raise BenchmarksStopped


def _context_key(req: tuple[Any, list[int], list[int]]) -> tuple[int, tuple[int, ...]]:
    toks = req[1] + req[2]  # longest first, as HFLM: the first of a batch sets its padded length
    return -len(toks), tuple(toks)


def _one_token_key(req: tuple[Any, list[int], list[int]]) -> list[int]:
    return req[-2] + req[-1][:-1]  # requests that differ only in a last token share one forward pass (HFLM's)


def _tail_has(tokenizer: Any, stops: list[str], longest: int) -> Callable[[list[int]], bool]:
    """A check: does the completion's end hold a stop string (decoding only its last tokens, each at least a
    character, so a check costs the same at every step)."""
    def finished(ids: list[int]) -> bool:
        tail = tokenizer.decode(ids[-(longest + 2):], skip_special_tokens=False)
        return any(s in tail for s in stops)

    return finished


class AppLM(HFLM):
    """HFLM over a loaded model (transformers PreTrainedModel + fast tokenizer) with our log-likelihood and greedy
    generation paths; `batch`: requests per forward pass; `generation_batch`: prompts decoded together."""

    def __init__(self, model: Any, tokenizer: Any, *, batch: int, generation_batch: int, tracker: Tracker):
        super().__init__(pretrained=model, tokenizer=tokenizer, batch_size=batch)
        self.tracker = tracker
        self.generation_batch = generation_batch
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    # ----------------------------------------------------------------------------------------- log-likelihood

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        self.tracker.kind = "log-likelihood"
        return super().loglikelihood(requests, disable_tqdm=True)

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        self.tracker.kind = "rolling log-likelihood"
        return super().loglikelihood_rolling(requests, disable_tqdm=True)

    def _loglikelihood_tokens(self, requests: list[Any], disable_tqdm: bool = False,
                              override_bs: int | None = None) -> list[tuple[float, bool]]:
        """(sum of the continuation's log-probabilities, whether greedy decoding would produce it) per request, in
        the requests' order: HFLM's ordering, batching and cache, our forward pass."""
        re_ord = Collator(requests, sort_fn=_context_key, group_by="contexts" if self.logits_cache else None,
                          group_fn=_one_token_key)
        self.tracker.begin(self.tracker.kind or "log-likelihood", len(requests))
        res: list[tuple[float, bool]] = []
        for chunk in re_ord.get_batched(n=int(override_bs or self.batch_size), batch_fn=None):
            before = len(res)
            rows = [(context + continuation)[-(self.max_length + 1):][:-1] for _, context, continuation in chunk]
            scored = self.continuation_logprobs(rows, [len(c) for _, _, c in chunk])
            for (request_str, context, continuation), logprobs in zip(chunk, scored, strict=True):
                logprobs = logprobs.unsqueeze(0)  # [1, continuation, vocab]
                greedy = logprobs.argmax(dim=-1)
                for key, cont, lp in re_ord.get_cache(req_str=request_str, cxt_toks=context,
                                                      cont_toks=continuation, logits=logprobs):
                    cont_ids = torch.tensor(cont, dtype=torch.long, device=lp.device).unsqueeze(0)
                    exact = bool((greedy[:, -cont_ids.shape[1]:] == cont_ids).all())
                    answer = (float(torch.gather(lp, 2, cont_ids.unsqueeze(-1)).sum()), exact)
                    res.append(answer)
                    if key is not None:
                        self.cache_hook.add_partial("loglikelihood", key, answer)
            self.tracker.advance(len(res) - before)
        return re_ord.get_original(res)

    @torch.no_grad()
    def continuation_logprobs(self, rows: list[list[int]], lengths: list[int]) -> list[torch.Tensor]:
        """Each row's log-probabilities [its continuation's length, vocab] at the positions that predict its
        continuation (the row's last `length` positions), from one right-padded forward pass."""
        inputs = [torch.tensor(r, dtype=torch.long, device=self.device) for r in rows]
        batch = pad_and_concat(max(len(r) for r in rows), inputs, padding_side="right")
        spans = [(len(r) - n, len(r)) for r, n in zip(rows, lengths, strict=True)]
        if not self.keeps_logits:  # a model without logits_to_keep: every position, as HFLM
            logits = self.model(batch).logits
            return [F.log_softmax(row[a:b], dim=-1, dtype=self.softmax_dtype) for row, (a, b) in zip(logits, spans,
                                                                                                     strict=True)]
        kept = sorted({p for a, b in spans for p in range(a, b)})
        column = {p: i for i, p in enumerate(kept)}
        logits = self.model(batch, logits_to_keep=torch.tensor(kept, device=self.device)).logits
        logprobs = F.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)  # [batch, kept positions, vocab]
        return [row[column[a]:column[b - 1] + 1] for row, (a, b) in zip(logprobs, spans, strict=True)]

    # --------------------------------------------------------------------------------------------- generation

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        self.tracker.begin("generation", len(requests))
        kept = self.batch_size_per_gpu
        self.batch_size_per_gpu = self.generation_batch  # prompts per decode: more than per scoring pass
        try:
            return super().generate_until(requests, disable_tqdm=True)
        finally:
            self.batch_size_per_gpu = kept

    def _model_generate(self, context: torch.Tensor, max_length: int, stop: list[str],
                        **generation_kwargs: Any) -> torch.Tensor:
        """Context + continuation ids, as transformers' generate returns them: greedy decoding (do_sample false
        or temperature 0, HFLM's default) by our decoder, sampling by HFLM's."""
        mask = generation_kwargs.pop("attention_mask", None)
        sampled = generation_kwargs.get("do_sample") is True or float(generation_kwargs.get("temperature") or 0) > 0
        if sampled:
            out = super()._model_generate(context, max_length, stop, attention_mask=mask, **generation_kwargs)
        else:
            out = self.greedy(context, mask, max_length - context.shape[1], stop)
        self.tracker.advance(context.shape[0])
        return out

    def greedy(self, context: torch.Tensor, mask: torch.Tensor | None, new_tokens: int,
               stop: list[str]) -> torch.Tensor:
        """Greedy completions of the left-padded prompts by sample_completions, cut once a stop string appears
        (HFLM's post-processing then cuts the text at it), laid out as [prompts | completions, right-padded]."""
        from desktop_app.engine.selfplay.rollout import RolloutOptions, sample_completions  # lazy: numpy

        rows = context.tolist() if mask is None else [
            [t for t, m in zip(r, k, strict=True) if m] for r, k in zip(context.tolist(), mask.tolist(), strict=True)]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eot_token_id
        texts = [s for s in stop if s]
        options = RolloutOptions(max_new_tokens=max(1, new_tokens), temperature=0.0, stop_ids={self.eot_token_id},
                                 pad_id=pad,
                                 finished=_tail_has(self.tokenizer, texts, max(map(len, texts))) if texts else None)
        completions = sample_completions(self.model, rows, options)
        width = max(len(c) for c in completions)
        tail = torch.full((len(rows), width), pad, dtype=torch.long)
        for i, c in enumerate(completions):
            tail[i, :len(c)] = torch.tensor(c, dtype=torch.long)
        return torch.cat([context.cpu(), tail], dim=1).to(context.device)
