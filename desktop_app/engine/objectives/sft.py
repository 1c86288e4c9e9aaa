"""Supervised fine-tuning: next-token cross-entropy on chat/instruction records, loss only where the mask says.

Records are read, rendered through the chat template and masked by `finetune/examples.py` (assistant tokens
carry loss by default); this objective turns them into batches and a loss. The same objective trains a
full model or a LoRA/QLoRA-wrapped one (the loop hands in whatever the run config asks for).

Loss = sum of the cross-entropy of every loss-bearing token of the step's batch / their number: a token
mean over the whole batch, whatever the micro-batch split (each micro-batch is scaled by the step's token
count, so accumulation and out-of-memory retries change no number but rounding).

Batches are right-padded (a causal model never looks right, so no attention mask is needed and the fused
llama forward applies), or packed (`packing`): several examples per window with position ids restarting
at each example, and examples never attend to each other. On the CPU a block-diagonal causal attention mask
isolates them (SDPA ignores position ids for that; the explicit mask is what isolates them, checked on llama,
mistral, qwen2, phi3, gemma and gpt2); on a GPU the fast path (model/fast_path.py) builds FlexAttention's
block mask of the examples from the position ids instead, so packed rows keep a fused attention kernel and
skip the blocks between examples rather than computing them masked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from desktop_app.engine.data.batches import IndexBatchSource
from desktop_app.engine.data.chat import stop_token_ids
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Log
from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.finetune.examples import IGNORE_INDEX, build_sft_examples, pack_examples
from desktop_app.engine.generate.prompts import context_length
from desktop_app.engine.model import fused_llama
from desktop_app.engine.model.fast_forward import block_causal_mask
from desktop_app.engine.model.fused_loss import linear_cross_entropy
from desktop_app.engine.model.training_forward import next_token_loss, uses_fused_loss
from desktop_app.engine.objectives.base import Objective, TrainContext

VERDICTS_FILE = "data_verdicts.jsonl"
MAX_VERDICT_LINES = 200  # per run, on screen; data_verdicts.jsonl in the run folder holds every one


# --- pieces shared with DPO ---------------------------------------------------------------------------------

class _Shard(list):
    """One process's example indices of a step, with what the whole step's normalisation needs."""

    def __init__(self, indices: list[int], *, loss_tokens: int, world: int):
        super().__init__(indices)
        self.loss_tokens = loss_tokens
        self.world = world


def held_out_split(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train indices, validation indices): a seeded `fraction` of n held out, at least one example kept to
    train on; none held out when that would be less than one example."""
    k = round(n * fraction) if fraction > 0 else 0
    k = min(k, n - 1)
    if k < 1:
        return list(range(n)), []
    perm = np.random.default_rng([int(seed), 0x5EED]).permutation(n)
    val = sorted(int(i) for i in perm[:k])
    held = set(val)
    return [i for i in range(n) if i not in held], val


def max_len_for(model: Any, requested: int) -> int:
    """The longest example: `requested`, or the model's context length when 0 (refused when it exceeds it)."""

    ctx = context_length(model)
    if requested:
        if ctx and requested > ctx:
            raise UserError(f"max_len {requested} is longer than the model's context of {ctx} tokens: lower it")
        return requested
    return int(ctx or 2048)


def verdict_events(groups: list[tuple[str, list[Any]]], run_dir: Path) -> list[Log]:
    """Log events for the data verdicts of each (label, verdicts) group: every record problem with its file and
    line (up to a cap), then one summary per file. Every verdict also goes to data_verdicts.jsonl in the run
    folder (atomically), so nothing is dropped without a trace."""

    lines = [json.dumps({"set": what, "path": v.path, "line": v.line, "status": v.status, "reason": v.reason},
                        ensure_ascii=False) for what, verdicts in groups for v in verdicts]
    events: list[Log] = []
    try:
        atomic_write_text(run_dir / VERDICTS_FILE, "\n".join(lines) + ("\n" if lines else ""))
    except OSError as exc:
        events.append(Log("warning", f"could not write {run_dir / VERDICTS_FILE}: {exc.strerror or exc}"))
    problems = [(what, v) for what, verdicts in groups for v in verdicts if v.line and v.status != "ok"]
    for what, v in problems[:MAX_VERDICT_LINES]:
        events.append(Log("warning" if v.status in ("error", "dropped") else "info", f"{what}: {v}"))
    if len(problems) > MAX_VERDICT_LINES:
        events.append(Log("warning", f"{len(problems) - MAX_VERDICT_LINES} more record problem(s) not shown; every "
                          f"verdict is in {run_dir / VERDICTS_FILE}"))
    events += [Log("info", f"{what}: {v}") for what, verdicts in groups for v in verdicts if not v.line]
    return events


@dataclass
class ExampleSplit:
    """A fine-tuning method's records as examples, split into training and held-out ones, with notes on the data."""

    examples: list[Any]  # every example of the training files
    train: list[Any]
    val: list[Any]
    val_idx: list[int] | None  # where val lies in examples; None when the validation files hold it
    notes: list[Log]


def read_examples(ctx: TrainContext, opts: Any, build: Callable[[list[str]], tuple[list[Any], list[Any]]],
                  unit: str, missing: str) -> ExampleSplit:
    """The training files' examples and the held-out ones (the validation files', else a seeded `val_fraction` of
    the training files'), with the data verdicts' notes and a warning when none is held out. build(paths) ->
    (examples, verdicts); `unit` names one example ("example", "pair"), `missing` what a run goes without."""
    examples, verdicts = build(data_paths(ctx, ctx.config.data))
    groups = [("data", verdicts)]
    val_idx: list[int] | None = None
    if opts.val_data:
        val, val_verdicts = build(data_paths(ctx, opts.val_data))
        groups.append(("validation data", val_verdicts))
        train = examples
    else:
        train_idx, val_idx = held_out_split(len(examples), opts.val_fraction, ctx.seed)
        train, val = [examples[i] for i in train_idx], [examples[i] for i in val_idx]
    notes = verdict_events(groups, ctx.run_dir)
    if not val:
        why = "val_fraction is 0" if not opts.val_fraction else f"only {len(examples)} {unit}(s)"
        notes.append(Log("warning", f"no {unit}s held out for validation ({why}), so there is no validation {missing}; "
                         "set val_fraction or val_data"))
    return ExampleSplit(examples, train, val, val_idx, notes)


@dataclass
class TokenBatch:
    """Right-padded rows of one micro-batch (len() = rows, which the loop weights micro-batches by)."""

    input_ids: torch.Tensor  # [rows, T] int64
    labels: torch.Tensor  # [rows, T] int64, IGNORE_INDEX where no loss (aligned with input_ids)
    position_ids: torch.Tensor | None  # [rows, T] for packed rows, else None
    lengths: list[int]  # real (unpadded) tokens per row
    scale: float = 1.0  # rows of the step / (rows here * loss tokens of the step): see SFTObjective.loss
    index: torch.Tensor | None = None  # example indices (DPO: rows of the reference tables)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: torch.device) -> TokenBatch:
        if device.type == "cpu":
            return self
        move = lambda t: t.to(device, non_blocking=True) if t is not None else None  # noqa: E731
        return TokenBatch(move(self.input_ids), move(self.labels), move(self.position_ids), self.lengths,
                          self.scale, self.index)


def collate(rows: list[tuple[list[int], list[int], list[int] | None]], pad_id: int) -> TokenBatch:
    """(input_ids, labels, position_ids or None) rows -> one right-padded TokenBatch."""
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), int(pad_id), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    packed = rows[0][2] is not None
    pos = torch.zeros((len(rows), width), dtype=torch.long) if packed else None
    for i, (a, b, p) in enumerate(rows):
        ids[i, :len(a)] = torch.tensor(a, dtype=torch.long)
        labels[i, :len(b)] = torch.tensor(b, dtype=torch.long)
        if pos is not None and p is not None:
            pos[i, :len(p)] = torch.tensor(p, dtype=torch.long)
            if len(p) < width:  # padding continues as its own segment
                pos[i, len(p):] = torch.arange(width - len(p))
    return TokenBatch(ids, labels, pos, [len(r[0]) for r in rows])


def _forward_logits(model: Any, x: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
    kwargs: dict[str, Any] = {}
    if position_ids is not None:
        kwargs = {"position_ids": position_ids, "attention_mask": block_causal_mask(position_ids)}
    return model(input_ids=x, use_cache=False, **kwargs).logits


def masked_ce_sum(model: Any, batch: TokenBatch) -> tuple[torch.Tensor, int]:
    """(sum of next-token cross-entropy over the loss-bearing tokens, their number). Only those rows ever reach
    the output projection's softmax: on a GPU (or a fast path) only their hidden states go through the chunked
    projection + loss; a plain fp32 llama on CPU computes only their logits; elsewhere on the CPU the module
    forward's logits of those rows."""
    x, y = batch.input_ids[:, :-1], batch.labels[:, 1:]
    mask = y != IGNORE_INDEX
    n = int(mask.sum())
    pos = batch.position_ids[:, :-1] if batch.position_ids is not None else None
    if n and uses_fused_loss(model, x.device):
        return next_token_loss(model, x, y, mask=mask, position_ids=pos, reduction="sum"), n
    if n and pos is None and fused_llama.usable(model, x.device):
        hidden = fused_llama.final_hidden(model, x)
        return linear_cross_entropy(hidden[mask], model.lm_head.weight, y[mask]) * n, n
    logits = _forward_logits(model, x, pos)
    return F.cross_entropy(logits[mask].float(), y[mask], reduction="sum"), n


def chat_samples(model: Any, ctx: TrainContext, prompts: list[list[int]]) -> list[tuple[str, str]]:
    """Greedy answers to held-out prompts (already rendered through the chat template, ending where the
    assistant's turn starts): (prompt text, answer text) pairs."""
    spec = ctx.train_spec
    tok = ctx.tokenizer
    if not spec.sample_tokens or tok is None or not prompts or not hasattr(model, "generate"):
        return []

    stops = stop_token_ids(tok)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (stops[0] if stops else 0)
    limit = context_length(model) or 2048
    out = []
    for ids in prompts:
        ids = ids[-(limit - 1):]
        room = max(1, limit - len(ids))
        input_ids = torch.tensor([ids], dtype=torch.long, device=ctx.device)
        with ctx.autocast():
            gen = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 max_new_tokens=min(spec.sample_tokens, room), do_sample=False,
                                 pad_token_id=pad, eos_token_id=stops or None)
        new = gen[0, len(ids):].tolist()
        out.append((tok.decode(ids, skip_special_tokens=True).strip(),
                    tok.decode(new, skip_special_tokens=True)))
    return out


def prompt_of(example: Any) -> list[int]:
    """The rendered prompt of an SFT example: its tokens before the first loss-bearing one."""
    first = next((i for i, label in enumerate(example.labels) if label != IGNORE_INDEX), len(example.labels))
    return list(example.input_ids[:first])


def data_paths(ctx: TrainContext, files: list[str]) -> list[str]:
    """Data file paths; relative ones are taken as given (the CLI makes them absolute)."""
    return [str(Path(f).expanduser()) for f in files]


def pad_id_of(tokenizer: Any) -> int:
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if isinstance(value, int):
            return value
    return 0


class FineTuneObjective(Objective):
    """What SFT and DPO share: right-padded token batches of rendered records, and greedy answers to held-out
    prompts at each evaluation."""

    def __init__(self) -> None:
        super().__init__()
        self._val: list[Any] = []  # the held-out examples
        self._pad = 0
        self._sample_prompts: list[list[int]] = []

    def to_device(self, micro: TokenBatch, device: torch.device) -> TokenBatch:
        return micro.to(device)

    def tokens(self, micro: TokenBatch) -> int:
        return sum(micro.lengths)

    @torch.no_grad()
    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        return chat_samples(model, ctx, self._sample_prompts)


# --- the objective -------------------------------------------------------------------------------------------

class SFTObjective(FineTuneObjective):
    """loss = mean cross-entropy of the loss-bearing tokens (assistant turns by default) of each step."""

    name = "sft"

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[tuple[list[int], list[int], list[int] | None]] = []

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        opts = ctx.config.options()
        tok = ctx.tokenizer
        self._pad = pad_id_of(tok)
        max_len = max_len_for(model, opts.max_len)
        columns = ctx.config.columns or None  # the table column mapping, saved in run.json
        split = read_examples(ctx, opts, lambda paths: build_sft_examples(paths, tok, max_len, loss_on=opts.loss_on,
                                                                          overlong=opts.overlong, columns=columns),
                              "example", "loss (and no early stopping)")
        train, val = split.train, split.val
        self.notes = split.notes
        self._val = val
        if opts.packing:
            rows = pack_examples(train, max_len, self._pad)
            self._rows = [(r["input_ids"], r["labels"], r["position_ids"]) for r in rows]
            fill = sum(len(e.input_ids) for e in train) / max(1, len(rows) * max_len)
            self.notes.append(Log("info", f"{len(train)} training examples packed into {len(rows)} windows of "
                                  f"{max_len} tokens ({100 * fill:.0f}% filled)"))
        else:
            self._rows = [(e.input_ids, e.labels, None) for e in train]
        loss_tokens = sum(sum(1 for t in e.labels[1:] if t != IGNORE_INDEX) for e in train)
        self.notes.append(Log("info", f"SFT on {len(train)} example(s) ({loss_tokens:,} loss-bearing tokens, loss on "
                              f"{opts.loss_on}), {len(val)} held out; max_len {max_len}"))
        self._sample_prompts = self._prompts(ctx, opts, max_len, val, split.val_idx, len(split.examples))

    @staticmethod
    def _prompts(ctx: TrainContext, opts: Any, max_len: int, val: list[Any], val_idx: list[int] | None,
                 total: int) -> list[list[int]]:
        """Held-out prompts to answer at each evaluation: each example's tokens before its first loss-bearing
        one. With loss on every token that is nothing, so the records are rendered once more with loss on the
        assistant to find where each answer starts."""
        wanted = val[:opts.sample_count]
        if opts.loss_on != "all" or not wanted:
            return [p for p in (prompt_of(e) for e in wanted) if p]

        files = opts.val_data if val_idx is None else ctx.config.data
        try:
            marked, _ = build_sft_examples(data_paths(ctx, files), ctx.tokenizer, max_len, overlong=opts.overlong,
                                           columns=ctx.config.columns or None)
        except UserError:
            return []
        if val_idx is not None:
            if len(marked) != total:  # a record usable with loss on everything but not on the assistant
                return []
            marked = [marked[i] for i in val_idx]
        if len(marked) != len(val):
            return []
        return [p for p in (prompt_of(e) for e in marked[:len(wanted)]) if p]

    def batch_source(self, ctx: TrainContext) -> IndexBatchSource:
        return IndexBatchSource(len(self._rows), ctx.seed)

    def _loss_tokens(self, batch: list[int]) -> int:
        return sum(sum(1 for t in self._rows[i][1][1:] if t != IGNORE_INDEX) for i in batch)

    def shard(self, batch: list[int], rank: int, world: int) -> _Shard:
        """Process `rank`'s rows of a step (several processes): the loss stays normalised by the whole step's
        loss-bearing tokens, so N processes compute the gradient of one (DDP averages over them: hence x world)."""
        per = len(batch) // world
        return _Shard(batch[rank * per:(rank + 1) * per], loss_tokens=self._loss_tokens(batch), world=world)

    def split(self, batch: list[int], micro_batch: int) -> list[TokenBatch]:
        rows = [self._rows[i] for i in batch]
        loss_tokens = batch.loss_tokens if isinstance(batch, _Shard) else self._loss_tokens(batch)
        world = batch.world if isinstance(batch, _Shard) else 1
        pieces = []
        for start in range(0, len(rows), micro_batch):
            piece = collate(rows[start:start + micro_batch], self._pad)
            piece.scale = len(rows) * world / (len(piece) * max(1, loss_tokens))
            pieces.append(piece)
        return pieces

    def loss(self, model: torch.nn.Module, micro: TokenBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # The loop weights each micro-batch by rows / step rows; scale undoes that and divides by the step's
        # loss-bearing tokens, so the step's loss is the token mean over the whole batch.
        total, _ = masked_ce_sum(model, micro)
        return total * micro.scale, {}

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        if not self._val:
            return {}
        total, count = 0.0, 0
        rows = [(e.input_ids, e.labels, None) for e in self._val]
        for start in range(0, len(rows), ctx.train_spec.micro_batch):
            piece = collate(rows[start:start + ctx.train_spec.micro_batch], self._pad).to(ctx.device)
            with ctx.autocast():
                s, n = masked_ce_sum(model, piece)
            total += float(s)
            count += n
        val_loss = total / max(1, count)
        return {"val_loss": val_loss, "val_ppl": math.exp(min(val_loss, 80.0))}
