"""Direct preference optimisation (DPO; IPO as an option) on prompt / chosen / rejected pairs.

For a pair, with log-probabilities summed over the answer's tokens (pi: the trained model, ref: the
reference, see finetune/reference.py):

    logits = (log pi(chosen) - log ref(chosen)) - (log pi(rejected) - log ref(rejected))
    sigmoid (DPO paper):  loss = -log sigmoid(beta * logits)
    ipo:                  loss = (logits' - 1 / (2 beta))^2, logits' from length-averaged log-probabilities

Metrics (per step, means over the pairs, and in metrics.jsonl): rewards_chosen = beta * (log pi(chosen) -
log ref(chosen)), rewards_rejected likewise, reward_margin = their difference, preference_accuracy = share
of pairs whose chosen reward is higher. Evaluation reports the same on held-out pairs (val_loss is the
held-out DPO loss, which drives best checkpoint and early stopping).

One forward per micro-batch: the chosen and rejected sequences of its pairs go through the model as one
right-padded batch (chosen rows first), and only the answer positions' logits go through the softmax (on a GPU
only their hidden states reach the output projection, chunk by chunk: model/training_forward.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.data.batches import IndexBatchSource
from desktop_app.engine.events import Log
from desktop_app.engine.finetune import reference as ref_mod
from desktop_app.engine.finetune.examples import build_preference_examples
from desktop_app.engine.model.training_forward import next_token_logps, uses_fused_loss
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.objectives.sft import (
    IGNORE_INDEX,
    FineTuneObjective,
    TokenBatch,
    collate,
    max_len_for,
    pad_id_of,
    read_examples,
)


@dataclass
class Pairs:
    """One value per preference pair for its chosen and for its rejected answer ([pairs] each)."""

    chosen: torch.Tensor
    rejected: torch.Tensor


def dpo_loss(policy: Pairs, reference: Pairs, beta: float, loss_type: str = "sigmoid",
             tokens: Pairs | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair losses, chosen rewards and rejected rewards from the policy's and the reference's summed answer
    log-probabilities. ipo divides each log-probability by its answer's token count (`tokens`)."""
    if loss_type == "ipo":
        assert tokens is not None
        dtype = policy.chosen.dtype
        c, r = tokens.chosen.clamp(min=1).to(dtype), tokens.rejected.clamp(min=1).to(dtype)
        logits = (policy.chosen / c - reference.chosen / c) - (policy.rejected / r - reference.rejected / r)
        losses = (logits - 1.0 / (2.0 * beta)) ** 2
    elif loss_type == "sigmoid":
        logits = (policy.chosen - reference.chosen) - (policy.rejected - reference.rejected)
        losses = -F.logsigmoid(beta * logits)
    else:
        raise ValueError(f"unknown DPO loss {loss_type!r}")
    chosen_rewards = beta * (policy.chosen - reference.chosen).detach()
    rejected_rewards = beta * (policy.rejected - reference.rejected).detach()
    return losses, chosen_rewards, rejected_rewards


def sequence_logps(model: Any, batch: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-probability of each row's loss-bearing tokens, their count), both [rows], float32."""
    x, y = batch.input_ids[:, :-1], batch.labels[:, 1:]
    mask = y != IGNORE_INDEX
    if uses_fused_loss(model, x.device):  # only the answer positions' hidden states reach the output projection
        token_lp, _ = next_token_logps(model, x, y, mask)
    else:
        logits = model(input_ids=x, use_cache=False).logits
        picked = logits[mask].float()  # [answer tokens, vocab]: the softmax runs on answer positions only
        token_lp = torch.log_softmax(picked, dim=-1).gather(1, y[mask][:, None])[:, 0]
    rows = mask.nonzero()[:, 0]
    total = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device).index_add(0, rows, token_lp)
    return total, mask.sum(dim=1)


def _pair_rows(ex: Any) -> tuple[tuple[list[int], list[int], None], tuple[list[int], list[int], None]]:
    p = list(ex.prompt_ids)
    masked = [IGNORE_INDEX] * len(p)
    return ((p + list(ex.chosen_ids), masked + list(ex.chosen_ids), None),
            (p + list(ex.rejected_ids), masked + list(ex.rejected_ids), None))


class DPOObjective(FineTuneObjective):
    """Preference optimisation against a frozen reference (precomputed or live; see finetune/reference.py)."""

    name = "dpo"

    def __init__(self) -> None:
        super().__init__()
        self._train: list[Any] = []
        self._beta = 0.1
        self._loss = "sigmoid"
        self._tables: dict[str, torch.Tensor] = {}
        self._reference: ref_mod.Reference | None = None
        self._autocast: Any = None

    # --- setup -----------------------------------------------------------------------------------------------

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        opts = ctx.config.options()
        tok = ctx.tokenizer
        self._pad = pad_id_of(tok)
        self._beta, self._loss = float(opts.beta), opts.loss
        self._autocast = ctx.autocast
        max_len = max_len_for(model, opts.max_len)
        columns = ctx.config.columns or None  # the table column mapping, saved in run.json
        split = read_examples(ctx, opts, lambda paths: build_preference_examples(paths, tok, max_len,
                                                                                 overlong=opts.overlong,
                                                                                 columns=columns),
                              "pair", "loss or held-out preference accuracy")
        train, val = split.train, split.val
        self.notes = split.notes
        self._train, self._val = train, val
        self._sample_prompts = [list(e.prompt_ids) for e in val[:opts.sample_count]]

        self._reference = ref_mod.Reference(model, adapter=ctx.adapter, load_copy=ctx.load_reference,
                                            pristine=not ctx.resumed)
        spec = ctx.train_spec
        visits = spec.steps * spec.batch_size
        precompute = opts.reference == "precompute" or (opts.reference == "auto" and len(train) <= visits)
        sets = {"val": val, **({"train": train} if precompute else {})}
        base = ctx.base
        base_sha = ctx.config.base_model_sha256 or (str(base.folder) if base is not None else "")
        sig = ref_mod.signature(base_sha, ctx.config.adapter_spec().kind, sets)
        cached = ref_mod.load_cache(ctx.run_dir, sig)
        if cached is not None:
            self._tables = cached
            how = f"read from {ref_mod.CACHE_FILE}"
        else:
            self._tables = {}
            for name, pairs in sets.items():
                chosen, rejected = self._reference_tables(pairs, spec.micro_batch, ctx.device)
                self._tables[f"{name}.chosen"], self._tables[f"{name}.rejected"] = chosen, rejected
            ref_mod.save_cache(ctx.run_dir, sig, self._tables)
            how = "computed once before training"
        if precompute:
            self._reference.release()
        who = "the base with its adapters disabled" if ctx.adapter else "a frozen copy of the base"
        mode = f"precomputed ({how})" if precompute else f"computed each step with {who}"
        self.notes.append(Log("info", f"DPO ({self._loss}, beta {self._beta:g}) on {len(train)} pair(s), {len(val)} "
                              f"held out; reference log-probabilities {mode}"))

    def _reference_tables(self, pairs: list[Any], micro: int, device: torch.device) -> tuple[torch.Tensor,
                                                                                            torch.Tensor]:
        assert self._reference is not None
        chosen, rejected = [], []
        for start in range(0, len(pairs), micro):
            piece = self._collate(pairs[start:start + micro], list(range(start, min(len(pairs), start + micro))))
            lp = self._reference.logps(piece.to(device), sequence_logps, self._autocast, during_training=False)
            half = len(piece) // 2
            chosen.append(lp[:half].cpu())
            rejected.append(lp[half:].cpu())
        empty = torch.zeros(0, dtype=torch.float32)
        return (torch.cat(chosen) if chosen else empty), (torch.cat(rejected) if rejected else empty)

    def _collate(self, pairs: list[Any], index: list[int]) -> TokenBatch:
        rows = [_pair_rows(e) for e in pairs]
        batch = collate([c for c, _ in rows] + [r for _, r in rows], self._pad)
        batch.index = torch.tensor(index, dtype=torch.long)
        return batch

    # --- training --------------------------------------------------------------------------------------------

    def batch_source(self, ctx: TrainContext) -> IndexBatchSource:
        return IndexBatchSource(len(self._train), ctx.seed)

    def split(self, batch: list[int], micro_batch: int) -> list[TokenBatch]:
        return [self._collate([self._train[i] for i in batch[s:s + micro_batch]], batch[s:s + micro_batch])
                for s in range(0, len(batch), micro_batch)]

    def _ref_logps(self, split: str, micro: TokenBatch) -> Pairs:
        assert micro.index is not None
        device = micro.input_ids.device
        if f"{split}.chosen" in self._tables:
            idx = micro.index
            return Pairs(self._tables[f"{split}.chosen"][idx].to(device),
                         self._tables[f"{split}.rejected"][idx].to(device))
        assert self._reference is not None
        lp = self._reference.logps(micro, sequence_logps, self._autocast, during_training=True)
        half = len(micro) // 2
        return Pairs(lp[:half], lp[half:])

    def _pair_losses(self, model: Any, micro: TokenBatch, split: str) -> tuple[torch.Tensor, torch.Tensor,
                                                                                torch.Tensor]:
        total, count = sequence_logps(model, micro)
        half = len(micro) // 2  # chosen rows first, then the rejected ones
        reference = self._ref_logps(split, micro)
        return dpo_loss(Pairs(total[:half], total[half:]), reference, self._beta, self._loss,
                        tokens=Pairs(count[:half], count[half:]))

    def loss(self, model: torch.nn.Module, micro: TokenBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        losses, chosen, rejected = self._pair_losses(model, micro, "train")
        return losses.mean(), {
            "rewards_chosen": chosen.mean(), "rewards_rejected": rejected.mean(),
            "reward_margin": (chosen - rejected).mean(),
            "preference_accuracy": (chosen > rejected).float().mean(),
        }

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        if not self._val:
            return {}
        sums = {"loss": 0.0, "chosen": 0.0, "rejected": 0.0, "correct": 0.0}
        micro = ctx.train_spec.micro_batch
        for start in range(0, len(self._val), micro):
            index = list(range(start, min(len(self._val), start + micro)))
            piece = self._collate([self._val[i] for i in index], index).to(ctx.device)
            with ctx.autocast():
                losses, chosen, rejected = self._pair_losses(model, piece, "val")
            sums["loss"] += float(losses.sum())
            sums["chosen"] += float(chosen.sum())
            sums["rejected"] += float(rejected.sum())
            sums["correct"] += float((chosen > rejected).sum())
        n = len(self._val)
        return {"val_loss": sums["loss"] / n, "val_rewards_chosen": sums["chosen"] / n,
                "val_rewards_rejected": sums["rejected"] / n,
                "val_reward_margin": (sums["chosen"] - sums["rejected"]) / n,
                "val_preference_accuracy": sums["correct"] / n}
