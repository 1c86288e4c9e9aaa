"""Sampling and stop checks that stay on the device: no host read per token, fixed shapes, capturable.

The CPU decoder's `Sampler` (sampling.py) moves every chosen token to Python right away; the static path
keeps them on the device and lets the host read them every few tokens (static_decode.py). Both apply the
same processors (`process_logits`: repetition penalty, temperature, top-k, top-p, min-p, HF's order).

- `DeviceSampling` draws with an exponential race: the token is argmax(p / E) with E ~ Exp(1) drawn per
  row and token, which picks token i with probability p_i (as torch.multinomial does) using only
  elementwise ops and an argmax. The noise is drawn by the host into a static buffer before each step
  (one kernel, from a private generator seeded per call: same seed + settings + batch = same text), so
  the captured step itself holds no random state. Draws differ from the CPU sampler's multinomial; the
  distributions are the same (tests check both against the processed probabilities). With one seed per row
  (rollouts), the host draws each row's uniform from that row's generator before each step and the token is
  taken by inverse CDF (sampling.inverse_cdf), as the CPU sampler does with row seeds: a row's draws do not
  depend on the other rows of the batch.
- `StopState` records each row's token into a small ring buffer the host copies out every few steps, and
  marks a row done on the device when it produces a stop token or its `max_lines`-th line break; later
  tokens of a done row are recorded as -1. Stop strings need text, so the host checks them on each
  chunk it reads and ends those rows with `finish_rows`.
Both keep their buffers across calls (they belong to a StaticDecoder), so captured graphs stay valid: every
tensor a step reads (noise, seen, the padding mask, the stop table, ...) is allocated once and refilled in
place (`copy_`, `fill_`, `zero_`) by `start`, never re-created (a graph keeps the address it was captured
with; a new tensor there would leave it reading freed memory). The settings themselves are Python numbers
baked into each graph, which is why they key the graphs.

A padded vocabulary's extra ids are masked first, before the repetition penalty and the filters, as the CPU
`Sampler` does; the probabilities (the race's softmax, top-p's cumulative sums, min-p) are computed in fp32
whatever the logits' dtype (as transformers upcasts).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

import torch

from desktop_app.engine.generate.sampling import inverse_cdf, process_logits
from desktop_app.engine.generate.settings import SamplingSettings

RING = 64  # token columns the host reads from; it reads at most RING // 2 steps at a time
MAX_STOP_IDS = 64
_TINY = 1e-30


class DeviceSampling:
    """Next-token choice for up to `rows` rows over `vocab` logits, without host reads."""

    def __init__(self, rows: int, vocab: int, device: torch.device):
        self.rows, self.vocab, self.device = rows, vocab, device
        self.generator = torch.Generator(device=device)
        self.noise: torch.Tensor | None = None  # [rows, vocab] Exp(1) draws, refilled before each step
        self.uniform: torch.Tensor | None = None  # [rows] fp64 uniforms of per-row seeded calls, refilled per step
        self.row_rngs: list[random.Random] | None = None
        self.seen: torch.Tensor | None = None  # [rows, vocab] tokens in each row's text (repetition penalty)
        self.settings = SamplingSettings()
        # [vocab] True for the padded ids no tokenizer token has: allocated once, refilled by each call's start
        self.padding: torch.Tensor | None = None

    @property
    def key(self) -> tuple:
        """What a captured pick depends on besides the shapes: the settings, and whether rows draw on their own."""
        return (*self.settings.key, self.row_rngs is not None)

    def start(self, settings: SamplingSettings, seed: int | Sequence[int], prompts: Sequence[Sequence[int]]) -> None:
        """Begin a call: its settings and seed (or one seed per row); `prompts[b]` are row b's prompt ids (the
        penalty covers them)."""
        self.settings = settings.normalized(self.vocab)
        self.row_rngs = None
        with torch.inference_mode(False), torch.no_grad():
            if self.settings.tokens:
                self._mark_padding(self.settings.tokens)
            if not self.settings.greedy and not isinstance(seed, int):
                self.row_rngs = [random.Random(s) for s in seed]
                if self.uniform is None:
                    self.uniform = torch.zeros(self.rows, dtype=torch.float64, device=self.device)
            elif not self.settings.greedy:
                self.generator.manual_seed(int(seed))
                if self.noise is None:
                    self.noise = torch.ones(self.rows, self.vocab, device=self.device)
            if self.settings.repetition_penalty != 1.0:
                self._mark_prompts(prompts)

    def _mark_padding(self, tokens: int) -> None:
        """Ids tokens .. vocab - 1 are padding: written into the one padding buffer (graphs keep its address)."""
        if self.padding is None:
            self.padding = torch.zeros(self.vocab, dtype=torch.bool, device=self.device)
        self.padding.zero_()
        self.padding[tokens:] = True

    def _mark_prompts(self, prompts: Sequence[Sequence[int]]) -> None:
        """Every row's prompt ids count as seen (the repetition penalty covers the prompt, like HF)."""
        if self.seen is None:
            self.seen = torch.zeros(self.rows, self.vocab, dtype=torch.bool, device=self.device)
        self.seen.zero_()
        rows = [b for b, ids in enumerate(prompts) for _ in ids]  # one indexed write for every row
        if rows:
            cols = [int(i) for ids in prompts for i in ids]
            index = torch.tensor([rows, cols], dtype=torch.long).to(self.device)
            self.seen[index[0], index[1]] = True

    def draw(self, rows: int) -> None:
        """Fresh noise for the next pick of `rows` rows (the host runs this before each step); per-row seeded:
        each row's next uniform (rows past the call's own draw nothing)."""
        if self.settings.greedy:
            return
        if self.row_rngs is not None and self.uniform is not None:
            values = [r.random() for r in self.row_rngs[:rows]]
            values += [0.5] * (rows - len(values))
            self.uniform[:rows].copy_(torch.tensor(values, dtype=torch.float64))
        elif self.noise is not None:
            self.noise[:rows].exponential_(generator=self.generator)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """Next token per row ([rows, vocab] float logits -> [rows] long); marks it seen."""
        s, rows = self.settings, logits.shape[0]
        seen = self.seen[:rows] if self.seen is not None and s.repetition_penalty != 1.0 else None
        logits = logits.float()  # fp32 probabilities (a no-op for the decoder's fp32 logits)
        if s.tokens:  # a padded vocabulary's extra ids are never chosen: masked before the filters (as on the CPU)
            assert self.padding is not None
            logits = logits.masked_fill(self.padding, float("-inf"))
        processed = process_logits(logits, s, seen)
        if s.greedy:
            ids = processed.argmax(dim=-1)
        elif self.row_rngs is not None:
            assert self.uniform is not None
            ids = inverse_cdf(processed.softmax(dim=-1, dtype=torch.float32), self.uniform[:rows])
        else:
            assert self.noise is not None
            probs = processed.softmax(dim=-1, dtype=torch.float32)
            ids = (probs / self.noise[:rows].clamp(min=_TINY)).argmax(dim=-1)
        if seen is not None:
            seen.scatter_(1, ids.view(-1, 1), True)
        return ids

    def mutable(self) -> list[torch.Tensor]:
        """What a pick changes (snapshots around graph warm-ups restore it)."""
        return [self.seen] if self.seen is not None else []

    def buffers(self) -> list[torch.Tensor]:
        """Every buffer a pick reads (allocated once, refilled in place by start)."""
        return [t for t in (self.noise, self.uniform, self.seen, self.padding) if t is not None]


class StopState:
    """Per-row token log (a ring the host reads) and done flags, on the device."""

    def __init__(self, rows: int, vocab: int, device: torch.device):
        self.rows, self.vocab, self.device = rows, vocab, device
        with torch.inference_mode(False), torch.no_grad():
            self.ring = torch.full((rows, RING), -1, dtype=torch.long, device=device)
            self.done = torch.zeros(rows, dtype=torch.bool, device=device)
            self.count = torch.zeros(1, dtype=torch.long, device=device)
            self.lines = torch.zeros(rows, dtype=torch.long, device=device)
            self.stop_table = torch.full((MAX_STOP_IDS,), -1, dtype=torch.long, device=device)
            self.newline = torch.zeros(vocab, dtype=torch.bool, device=device)
            self.max_lines = torch.ones(1, dtype=torch.long, device=device)
        self.count_lines = False

    def start(self, live: int, stop_ids: Iterable[int], newline_ids: Iterable[int] = (), max_lines: int = 0) -> None:
        """Begin a call with rows 0 .. live - 1 running (the rest of the buffers' rows count as done)."""
        stops = sorted({int(i) for i in stop_ids if 0 <= int(i) < self.vocab})
        if len(stops) > MAX_STOP_IDS:
            raise ValueError(f"at most {MAX_STOP_IDS} stop token ids, got {len(stops)}")
        newlines = [int(i) for i in newline_ids if 0 <= int(i) < self.vocab] if max_lines > 0 else []
        with torch.inference_mode(False), torch.no_grad():
            self.done.zero_()
            self.done[live:] = True
            self.count.zero_()
            self.lines.zero_()
            self.stop_table.fill_(-1)
            if stops:
                self.stop_table[: len(stops)] = torch.tensor(stops, dtype=torch.long, device=self.device)
            self.newline.zero_()
            if newlines:
                self.newline[torch.tensor(newlines, dtype=torch.long, device=self.device)] = True
            self.max_lines.fill_(max(1, int(max_lines)))
        # Counting lines costs a few kernels per step: only calls with a line limit do (it keys the graphs).
        self.count_lines = bool(newlines)

    def record(self, ids: torch.Tensor) -> None:
        """Log the tokens just chosen for rows 0 .. len(ids) - 1 and update their done flags."""
        rows = ids.shape[0]
        done = self.done[:rows]
        slot = torch.remainder(self.count, RING)
        self.ring[:rows].index_copy_(1, slot, torch.where(done, -1, ids).unsqueeze(1))
        hit = (ids.unsqueeze(1) == self.stop_table).any(dim=1)
        if self.count_lines:
            lines = self.lines[:rows]
            lines += self.newline[ids]
            hit |= lines >= self.max_lines
        done |= hit
        self.count += 1

    def finish_rows(self, rows: Sequence[int]) -> None:
        """End these rows now (the host saw a stop string in their text)."""
        if rows:
            with torch.inference_mode(False), torch.no_grad():
                self.done[torch.tensor(list(rows), dtype=torch.long, device=self.device)] = True

    def mutable(self) -> list[torch.Tensor]:
        return [self.done, self.count, self.lines]

    def buffers(self) -> list[torch.Tensor]:
        """Every buffer a record reads or writes (allocated once, refilled in place by start)."""
        return [self.ring, self.done, self.count, self.lines, self.stop_table, self.newline, self.max_lines]
