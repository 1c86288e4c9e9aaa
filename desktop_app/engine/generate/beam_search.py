"""Beam search with length normalisation on the engine's decode runners (KV cache, lean or HF forward).

The algorithm is transformers' own (`generate(num_beams=N, length_penalty=A, early_stopping=E,
do_sample=False)`, the vectorised beam search of transformers 4.50+/5.x), ported step for step so the
same model gives the same sequences (tests compare them on tiny llama and gpt2 models):

- Every prompt keeps N running beams. Each step scores every (beam, token) continuation by the beam's
  summed log-probability plus the token's, and keeps the best K = max(2, 1 + number of end ids) x N.
- A continuation that ends (an end id, a stop string, or the token budget reached) becomes a finished
  hypothesis when it is among the best N of the K, scored sum / length ** length_penalty (length counts
  generated tokens, the final end id included); the N best finished hypotheses are kept. The best N
  continuations that did not end become the running beams, and the KV cache rows follow them
  (`runner.reorder`).
- Stopping: early_stopping "true" ends a prompt once N hypotheses finished; "false" (the default) once
  the best running beam, normalised at its current length, cannot beat the worst finished one; "never"
  uses the longest possible length for that estimate when length_penalty > 0 (exact search). The
  search also ends when every continuation ended (the budget).
- A repetition penalty applies to the log-probabilities, as transformers' processor does in beam search.

`BeamSearch` advances one decode step per `step()` call (the server interleaves it with its batch);
`beam_search()` runs it to the end; `stream_beams()` is `stream_text`'s path for num_beams > 1: the text
of the best beams is yielded once the search is over (beams change their past until then).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import GenerationStats, TextDelta
from desktop_app.engine.generate.rows import tokens_per_second
from desktop_app.engine.generate.runners import left_padded, make_runner
from desktop_app.engine.generate.settings import BeamSettings, DecodeLimits, Vocab
from desktop_app.engine.generate.text_stream import TextStream

MAX_BEAMS = 64
EARLY_STOPPING = ("false", "true", "never")
_NEG = -1.0e9  # transformers' "impossible" score
_LENGTH, _EOS, _STOP = 0, 1, 2
_REASONS = {_LENGTH: "length", _EOS: "eos", _STOP: "stop"}


def early_stopping_mode(value: Any) -> bool | str:
    """"false"/False -> False, "true"/True -> True, "never" -> "never" (transformers' values)."""
    if value is True or value == "true":
        return True
    if value is False or value == "false":
        return False
    if value == "never":
        return "never"
    raise UserError(f"early_stopping must be one of false, true, never, got {value!r}")


def check_beam_settings(num_beams: Any, length_penalty: Any, num_return: Any = 1) -> None:
    """UserError naming the setting when beam search cannot run with these values."""
    if not isinstance(num_beams, int) or isinstance(num_beams, bool) or not 1 <= num_beams <= MAX_BEAMS:
        raise UserError(f"num_beams must be a whole number from 1 to {MAX_BEAMS}, got {num_beams!r}")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) \
            or not math.isfinite(length_penalty):
        raise UserError(f"length_penalty must be a finite number, got {length_penalty!r}")
    if not isinstance(num_return, int) or isinstance(num_return, bool) or not 1 <= num_return <= num_beams:
        raise UserError(f"the number of returned beams must be from 1 to num_beams ({num_beams}), got {num_return!r}")


@dataclass
class Hypothesis:
    """One returned beam: generated ids (a final end id included), its text (stop strings cut), its score."""

    prompt: int
    rank: int
    token_ids: list[int]
    text: str
    score: float
    finish_reason: str  # eos | stop | length | cancelled


class BeamSearch:
    """Beam search over `prompts` (token ids), `beams.num_beams` beams each; call `step()` until it returns False.

    `limits`: the most generated tokens (`budget`), the ids that end a hypothesis (`stop_ids`) and stop strings
    (`stop`: the text is cut before them; they need `vocab.decode`, ids -> text, which also gives the texts).
    `vocab.pad`: the left padding of a batch of prompts (None: the smallest end id, else 0); `vocab.tokens`:
    the tokenizer's size, when the model's vocabulary is padded beyond it.
    """

    def __init__(self, model: Any, prompts: Sequence[Sequence[int]], beams: BeamSettings, limits: DecodeLimits,
                 vocab: Vocab = Vocab(), backend: str = "auto"):
        check_beam_settings(beams.num_beams, beams.length_penalty, beams.num_return)
        if not prompts or any(len(p) == 0 for p in prompts):
            raise UserError("beam search needs at least one non-empty prompt")
        if limits.budget < 1:
            raise UserError(f"the token budget must be at least 1, got {limits.budget}")
        if limits.stop and vocab.decode is None:
            raise ValueError("stop strings need a decode function")
        self.model = model
        self.tokens = int(vocab.tokens)  # the tokenizer's size: a padded vocabulary's extra ids never join a beam
        self.prompts = [list(map(int, p)) for p in prompts]
        self.num_beams, self.budget, self.num_return = beams.num_beams, int(limits.budget), beams.num_return
        self.length_penalty = float(beams.length_penalty)
        self.early_stopping = early_stopping_mode(beams.early_stopping)
        self.eos = sorted(limits.stop_ids)
        self.pad = int(vocab.pad) if vocab.pad is not None else (self.eos[0] if self.eos else 0)
        self.decode, self.stop = vocab.decode, [s for s in limits.stop if s]
        self.repetition_penalty = float(beams.repetition_penalty)
        self.backend = backend
        self.device = next(model.parameters()).device
        self.cur = 0  # tokens generated so far by every running beam
        self.done = False
        self.steps = 0  # forwards run (the prefill included)
        self.first_token_at: float | None = None
        self._logits: torch.Tensor | None = None
        self._runner: Any = None

    # --- the search ---------------------------------------------------------------------------------
    def _start(self) -> None:
        b, n, dev = len(self.prompts), self.num_beams, self.device
        longest = max(len(p) for p in self.prompts)
        ids, mask = left_padded(self.prompts, self.pad, dev)
        self._runner = make_runner(self.model, b, longest + self.budget, self.backend)
        logits = self._runner.prefill(ids, mask)
        self._runner.expand(n)
        self._logits = logits.repeat_interleave(n, dim=0)
        self.k = max(2, 1 + len(self.eos)) * n
        self.running = torch.full((b, n, self.budget), self.pad, dtype=torch.long, device=dev)
        self.sequences = self.running.clone()
        self.running_scores = torch.zeros((b, n), dtype=torch.float, device=dev)
        self.running_scores[:, 1:] = _NEG  # only the first beam's tokens compete in the first step
        self.beam_scores = torch.full((b, n), _NEG, dtype=torch.float, device=dev)
        self.finished = torch.zeros((b, n), dtype=torch.bool, device=dev)
        self.lengths = torch.zeros((b, n), dtype=torch.long, device=dev)
        self.reasons = torch.zeros((b, n), dtype=torch.long, device=dev)
        self.improvable = torch.ones((b, 1), dtype=torch.bool, device=dev)
        self.top_mask = torch.cat((torch.ones(n, dtype=torch.bool), torch.zeros(self.k - n, dtype=torch.bool))).to(dev)
        self.eos_t = torch.tensor(self.eos, dtype=torch.long, device=dev)
        self.offsets = torch.arange(b, device=dev).view(-1, 1) * n
        self.seen: torch.Tensor | None = None
        if self.repetition_penalty != 1.0:
            vocab = self._logits.shape[-1]
            self.seen = torch.zeros((b, vocab), dtype=torch.bool, device=dev)
            for i, p in enumerate(self.prompts):
                self.seen[i, torch.tensor([t for t in p if t < vocab], dtype=torch.long, device=dev)] = True
            if mask is not None:  # transformers' penalty also sees the left padding of a batch
                self.seen[:, self.pad] |= (mask == 0).any(dim=1)
            self.seen = self.seen.repeat_interleave(n, dim=0)
        self.streams: list[TextStream] | None = None
        if self.stop:
            assert self.decode is not None
            self.streams = [TextStream(self.decode, self.stop, context_ids=p) for p in self.prompts for _ in range(n)]
        self.steps = 1

    def step(self) -> bool:
        """Choose the next token of every beam and run the forward for it; False once the search is over."""
        if self.done:
            return False
        with torch.inference_mode():
            if self._runner is None:
                self._start()
            more = self._advance()
        if not more:
            self.done = True
            self._runner = None  # free the KV cache now
            self._logits = None
        return more

    def _advance(self) -> bool:
        """One step of the search: the next token of every beam, the hypotheses that finished; False once over."""
        topk_lp, source, tokens = self._candidates()
        topk_seqs = torch.take_along_dim(self.running, source[:, :, None], dim=1)
        topk_seqs[:, :, self.cur] = tokens
        hits, reason, forks = self._ends(source, tokens)
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        chosen, parents, next_tokens = self._keep_running(topk_lp, topk_seqs, hits, source, tokens)
        self._keep_finished(topk_lp, topk_seqs, hits, reason)
        self.cur += 1
        if not self._improvable(hits):
            return False
        self._follow(parents, next_tokens, chosen, forks)
        return True

    def _candidates(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best k (beam, token) continuations of every prompt: their summed log-probabilities [b, k], the beam
        each continues (within its prompt) and its token."""
        b, n = len(self.prompts), self.num_beams
        assert self._logits is not None
        logits = self._logits.float()
        if 0 < self.tokens < logits.shape[-1]:
            logits[..., self.tokens:] = float("-inf")
        log_probs = torch.log_softmax(logits, dim=-1)
        vocab = log_probs.shape[-1]
        if self.seen is not None:
            penalized = torch.where(log_probs < 0, log_probs * self.repetition_penalty,
                                    log_probs / self.repetition_penalty)
            log_probs = torch.where(self.seen, penalized, log_probs)
        log_probs = log_probs.view(b, n, vocab) + self.running_scores[:, :, None]
        topk_lp, topk_idx = torch.topk(log_probs.view(b, n * vocab), k=self.k)
        return topk_lp, topk_idx // vocab, topk_idx % vocab

    def _ends(self, source: torch.Tensor,
              tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[list[TextStream | None]] | None]:
        """Which continuations end (an end id, a stop string, the budget) and why; the text streams they fork."""
        is_eos = torch.isin(tokens, self.eos_t) if self.eos else torch.zeros_like(tokens, dtype=torch.bool)
        reason = torch.where(is_eos, _EOS, _LENGTH)
        hits = is_eos
        forks: list[list[TextStream | None]] | None = None
        if self.streams is not None:
            hits, reason, forks = self._stop_strings(source, tokens, is_eos, reason)
        if self.cur + 1 >= self.budget:
            hits = torch.ones_like(hits)
        return hits, reason, forks

    def _keep_running(self, topk_lp: torch.Tensor, topk_seqs: torch.Tensor, hits: torch.Tensor, source: torch.Tensor,
                      tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The best n continuations that did not end keep running: which of the k (chosen), their parent beams and
        their tokens."""
        running_lp = topk_lp + hits.to(torch.float32) * _NEG
        chosen = torch.topk(running_lp, k=self.num_beams)[1]  # [b, n]
        self.running = torch.take_along_dim(topk_seqs, chosen[:, :, None], dim=1)
        self.running_scores = torch.take_along_dim(running_lp, chosen, dim=1)
        return chosen, torch.take_along_dim(source, chosen, dim=1), torch.take_along_dim(tokens, chosen, dim=1)

    def _keep_finished(self, topk_lp: torch.Tensor, topk_seqs: torch.Tensor, hits: torch.Tensor,
                       reason: torch.Tensor) -> None:
        """Continuations among the best n that ended compete with the finished hypotheses."""
        n, cur = self.num_beams, self.cur
        just_finished = hits & self.top_mask[None, :]
        final_lp = topk_lp / ((cur + 1) ** self.length_penalty)
        full = torch.all(self.finished, dim=-1, keepdim=True) & (self.early_stopping is True)
        final_lp += full.to(torch.float32) * _NEG
        final_lp += (~self.improvable).to(torch.float32) * _NEG
        final_lp += (~just_finished) * _NEG
        merged_scores = torch.cat((self.beam_scores, final_lp), dim=1)
        keep = torch.topk(merged_scores, k=n)[1]
        self.sequences = torch.take_along_dim(torch.cat((self.sequences, topk_seqs), dim=1), keep[:, :, None], dim=1)
        self.beam_scores = torch.take_along_dim(merged_scores, keep, dim=1)
        new_lengths = torch.full_like(hits, cur + 1, dtype=torch.long)
        self.lengths = torch.take_along_dim(torch.cat((self.lengths, new_lengths), dim=1), keep, dim=1)
        self.reasons = torch.take_along_dim(torch.cat((self.reasons, reason), dim=1), keep, dim=1)
        self.finished = torch.take_along_dim(torch.cat((self.finished, just_finished), dim=1), keep, dim=1)

    def _improvable(self, hits: torch.Tensor) -> bool:
        """Whether the search goes on: some prompt's best running beam can still beat its worst finished one, not
        every prompt is full (early_stopping true) and not every continuation ended."""
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_length = self.budget
        else:
            best_length = self.cur
        best_running = self.running_scores[:, :1] / (best_length ** self.length_penalty)
        worst_finished = torch.where(self.finished, torch.min(self.beam_scores, dim=1, keepdim=True)[0], _NEG)
        self.improvable = self.improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)
        open_beams = not (bool(torch.all(self.finished)) and self.early_stopping is True)
        return bool(torch.any(self.improvable)) and open_beams and not bool(torch.all(hits))

    def _follow(self, parents: torch.Tensor, next_tokens: torch.Tensor, chosen: torch.Tensor,
                forks: list[list[TextStream | None]] | None) -> None:
        """Every running beam continues from its parent's cache row, text stream and seen tokens; the forward of
        the chosen tokens gives the next step's logits."""
        b, n = len(self.prompts), self.num_beams
        flat_parents = (parents + self.offsets).view(-1)
        if forks is not None:
            pick = chosen.tolist()
            self.streams = [forks[i][j] for i in range(b) for j in pick[i]]  # type: ignore[misc]
        if self.seen is not None:
            self.seen = self.seen.index_select(0, flat_parents)
            self.seen[torch.arange(b * n, device=self.device), next_tokens.view(-1)] = True
        assert self._runner is not None
        if not torch.equal(flat_parents, torch.arange(b * n, device=self.device)):
            self._runner.reorder(flat_parents)
        self._logits = self._runner.step(next_tokens.view(-1))
        self.steps += 1

    def _stop_strings(self, source: torch.Tensor, tokens: torch.Tensor, is_eos: torch.Tensor,
                      reason: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[list[TextStream | None]]]:
        """Which continuations complete a stop string (each forks its parent's text stream)."""
        assert self.streams is not None
        n = self.num_beams
        src, tok, eos = source.tolist(), tokens.tolist(), is_eos.tolist()
        forks: list[list[TextStream | None]] = []
        stopped = []
        for i in range(len(src)):
            row, row_stop = [], []
            for j in range(len(src[i])):
                if eos[i][j]:
                    row.append(None)
                    row_stop.append(False)
                    continue
                stream = self.streams[i * n + src[i][j]].fork()
                stream.push(tok[i][j])
                row.append(stream)
                row_stop.append(stream.stopped)
            forks.append(row)
            stopped.append(row_stop)
        stop_t = torch.tensor(stopped, dtype=torch.bool, device=self.device)
        return is_eos | stop_t, torch.where(stop_t, _STOP, reason), forks

    def release(self) -> None:
        """Free the KV cache now (a search abandoned midway)."""
        self._runner = None

    def run(self, stop_event: Any = None) -> list[list[Hypothesis]]:
        """Search to the end (or until `stop_event` is set) and return `results()`."""
        while True:
            if stop_event is not None and stop_event.is_set():
                return self.results(cancelled=True)
            if not self.step():
                return self.results()

    # --- results ------------------------------------------------------------------------------------
    def results(self, cancelled: bool = False) -> list[list[Hypothesis]]:
        """Per prompt, the `num_return` best hypotheses, best first. `cancelled`: the search was stopped
        early; the finished hypotheses and the running beams (normalised at their length) compete."""
        out: list[list[Hypothesis]] = []
        if self._runner is None and not self.done:  # cancelled before the first forward
            return [[Hypothesis(p, r, [], "", float("-inf"), "cancelled") for r in range(self.num_return)]
                    for p in range(len(self.prompts))]
        seqs, scores = self.sequences, self.beam_scores
        lengths, reasons, finished = self.lengths, self.reasons, self.finished
        if cancelled and not self.done and self.cur > 0:
            running_final = self.running_scores / (self.cur ** self.length_penalty)
            scores = torch.cat((scores, running_final), dim=1)
            seqs = torch.cat((seqs, self.running), dim=1)
            lengths = torch.cat((lengths, torch.full_like(self.lengths, self.cur)), dim=1)
            reasons = torch.cat((reasons, torch.full_like(self.reasons, -1)), dim=1)
            finished = torch.cat((finished, torch.ones_like(self.finished)), dim=1)
            order = torch.sort(scores, dim=1, descending=True, stable=True)[1]
            seqs, scores = torch.take_along_dim(seqs, order[:, :, None], dim=1), torch.take_along_dim(scores, order, 1)
            lengths, reasons = torch.take_along_dim(lengths, order, 1), torch.take_along_dim(reasons, order, 1)
            finished = torch.take_along_dim(finished, order, 1)
        seq_l, score_l, len_l = seqs.tolist(), scores.tolist(), lengths.tolist()
        reason_l, fin_l = reasons.tolist(), finished.tolist()
        for p, prompt in enumerate(self.prompts):
            hyps: list[Hypothesis] = []
            for r in range(self.num_return):
                if r >= len(seq_l[p]) or not fin_l[p][r]:
                    hyps.append(Hypothesis(p, r, [], "", float("-inf"), "cancelled" if cancelled else "length"))
                    continue
                ids = seq_l[p][r][: len_l[p][r]]
                why = _REASONS.get(reason_l[p][r], "cancelled")  # -1: a running beam of a stopped search
                hyps.append(Hypothesis(p, r, ids, self._text(prompt, ids, why), float(score_l[p][r]), why))
            out.append(hyps)
        return out

    def _text(self, prompt: list[int], ids: list[int], reason: str) -> str:
        """The text `generate` shows for these ids: stop strings cut, a final end id not decoded."""
        if self.decode is None:
            return ""
        stream = TextStream(self.decode, self.stop, context_ids=prompt)
        for t in ids[:-1] if reason == "eos" else ids:
            stream.push(t)
            if stream.stopped:
                break
        stream.finish()
        return stream.text


def beam_search(model: Any, prompts: Sequence[Sequence[int]], beams: BeamSettings, limits: DecodeLimits,
                vocab: Vocab = Vocab(), backend: str = "auto") -> list[list[Hypothesis]]:
    """Run a BeamSearch (same arguments) to the end: per prompt, its best hypotheses."""
    return BeamSearch(model, prompts, beams, limits, vocab, backend).run()


def stream_beams(search: BeamSearch, samples: int, stop_event: Any, t0: float) -> Iterator[TextDelta | GenerationStats]:
    """stream_text's path for num_beams > 1: runs `search` (until `stop_event` is set), then yields each returned
    beam's text and GenerationStats (t0: when the call began).

    Sample numbering as stream_text's: prompt_index * samples + rank (rank 0 = the best beam).
    """
    try:
        results = search.run(stop_event)
    finally:
        search.release()  # free the KV cache even when the consumer abandons the stream
    end = time.perf_counter()
    first = search.first_token_at or end
    for hyps in results:
        for h in hyps:
            sample = h.prompt * samples + h.rank
            if h.text:
                yield TextDelta(sample=sample, text=h.text)
            yield GenerationStats(sample=sample, text=h.text, token_ids=list(h.token_ids), ttft_ms=(first - t0) * 1e3,
                                  tokens_per_s=tokens_per_second(len(h.token_ids), first, end, end - t0),
                                  finish_reason=h.finish_reason)
