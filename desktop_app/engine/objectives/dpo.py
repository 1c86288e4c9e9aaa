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

from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.data.batches import IndexBatchSource
from desktop_app.engine.events import Log
from desktop_app.engine.finetune import reference as ref_mod
from desktop_app.engine.model.training_forward import next_token_logps, uses_fused_loss
from desktop_app.engine.objectives.base import Objective, TrainContext
from desktop_app.engine.objectives.sft import (
    IGNORE_INDEX,
    TokenBatch,
    chat_samples,
    collate,
    data_paths,
    held_out_split,
    max_len_for,
    pad_id_of,
    verdict_events,
)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float, loss_type: str = "sigmoid",
             chosen_tokens: torch.Tensor | None = None,
             rejected_tokens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-pair losses, chosen rewards and rejected rewards from summed answer log-probabilities [pairs].

    ipo divides each log-probability by its answer's token count (chosen_tokens / rejected_tokens)."""
    if loss_type == "ipo":
        assert chosen_tokens is not None and rejected_tokens is not None
        c, r = chosen_tokens.clamp(min=1).to(policy_chosen.dtype), rejected_tokens.clamp(min=1).to(policy_chosen.dtype)
        logits = (policy_chosen / c - ref_chosen / c) - (policy_rejected / r - ref_rejected / r)
        losses = (logits - 1.0 / (2.0 * beta)) ** 2
    elif loss_type == "sigmoid":
        logits = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
        losses = -F.logsigmoid(beta * logits)
    else:
        raise ValueError(f"unknown DPO loss {loss_type!r}")
    chosen_rewards = beta * (policy_chosen - ref_chosen).detach()
    rejected_rewards = beta * (policy_rejected - ref_rejected).detach()
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


class DPOObjective(Objective):
    """Preference optimisation against a frozen reference (precomputed or live; see finetune/reference.py)."""

    name = "dpo"

    def __init__(self) -> None:
        super().__init__()
        self._train: list[Any] = []
        self._val: list[Any] = []
        self._pad = 0
        self._beta = 0.1
        self._loss = "sigmoid"
        self._tables: dict[str, torch.Tensor] = {}
        self._reference: ref_mod.Reference | None = None
        self._autocast: Any = None
        self._sample_prompts: list[list[int]] = []

    # --- setup -----------------------------------------------------------------------------------------------

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        from desktop_app.engine.finetune.examples import build_preference_examples

        opts = ctx.config.options()
        tok = ctx.tokenizer
        self._pad = pad_id_of(tok)
        self._beta, self._loss = float(opts.beta), opts.loss
        self._autocast = ctx.autocast
        max_len = max_len_for(model, opts.max_len)
        examples, verdicts = build_preference_examples(data_paths(ctx, ctx.config.data), tok, max_len,
                                                       overlong=opts.overlong)
        groups = [("data", verdicts)]
        if opts.val_data:
            val, val_verdicts = build_preference_examples(data_paths(ctx, opts.val_data), tok, max_len,
                                                          overlong=opts.overlong)
            groups.append(("validation data", val_verdicts))
            train = examples
        else:
            train_idx, val_idx = held_out_split(len(examples), opts.val_fraction, ctx.seed)
            train, val = [examples[i] for i in train_idx], [examples[i] for i in val_idx]
        self.notes = verdict_events(groups, ctx.run_dir)
        if not val:
            why = "val_fraction is 0" if not opts.val_fraction else f"only {len(examples)} pair(s)"
            self.notes.append(Log("warning", f"no pairs held out for validation ({why}), so there is no validation "
                                  "loss or held-out preference accuracy; set val_fraction or val_data"))
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

    def to_device(self, micro: TokenBatch, device: torch.device) -> TokenBatch:
        return micro.to(device)

    def _ref_logps(self, split: str, micro: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
        assert micro.index is not None
        device = micro.input_ids.device
        if f"{split}.chosen" in self._tables:
            idx = micro.index
            return (self._tables[f"{split}.chosen"][idx].to(device),
                    self._tables[f"{split}.rejected"][idx].to(device))
        assert self._reference is not None
        lp = self._reference.logps(micro, sequence_logps, self._autocast, during_training=True)
        half = len(micro) // 2
        return lp[:half], lp[half:]

    def _pair_losses(self, model: Any, micro: TokenBatch, split: str) -> tuple[torch.Tensor, torch.Tensor,
                                                                                torch.Tensor]:
        total, count = sequence_logps(model, micro)
        half = len(micro) // 2
        ref_c, ref_r = self._ref_logps(split, micro)
        return dpo_loss(total[:half], total[half:], ref_c, ref_r, self._beta, self._loss,
                        chosen_tokens=count[:half], rejected_tokens=count[half:])

    def loss(self, model: torch.nn.Module, micro: TokenBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        losses, chosen, rejected = self._pair_losses(model, micro, "train")
        return losses.mean(), {
            "rewards_chosen": chosen.mean(), "rewards_rejected": rejected.mean(),
            "reward_margin": (chosen - rejected).mean(),
            "preference_accuracy": (chosen > rejected).float().mean(),
        }

    def tokens(self, micro: TokenBatch) -> int:
        return sum(micro.lengths)

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

    @torch.no_grad()
    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        return chat_samples(model, ctx, self._sample_prompts)
