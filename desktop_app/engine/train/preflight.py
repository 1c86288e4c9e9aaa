"""Before Start: what in a run's settings cannot work, or will not do what the person means, said with what would.

`preflight(config, machine)` -> [Finding(level, field, message)]:

    error    the run cannot work here: its memory estimate is far beyond what the machine has free (it would be
             killed, or swap for hours). The window refuses to start it and says why.
    warning  the run works, but not as meant: a warm-up as long as the run (the learning rate never peaks), an empty
             validation set (no validation curve), a learning rate of another method (a LoRA run with the
             pretraining rate). Shown, never blocking.

`field` names the setting a finding is about (a TrainSpec field such as warmup_steps, lr or batch_size; val_fraction;
dataset; device), so a front end can show it next to that setting. The window shows them as the settings change,
the CLI prints them before it starts, and the server can return them with its notes.

Stdlib only (no torch at import): the window runs this on every change. The memory check's estimate and the machine
it is held to are memory_plan.py's (the one estimate of the app).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from desktop_app.engine.data.tables import table_kind, table_rows
from desktop_app.engine.errors import UserError
from desktop_app.engine.methods import METHOD_BY_KEY, method_key
from desktop_app.engine.model.sizing import TrainingShape, estimate_training_memory, human_bytes
from desktop_app.engine.specs import RunConfig, SpecError, TrainSpec
from desktop_app.engine.train.memory_plan import (
    ESTIMATE_LOW,
    FITS_SHARE,
    Machine,
    MemoryPlan,
    base_parameters,
    memory_budget,
    memory_plan,
)

ERROR = "error"
WARNING = "warning"
# A learning rate this many times the method's usual one is another method's (a pretraining rate on a pretrained
# model wrecks it); one this many times smaller barely moves the weights.
LR_TOO_HIGH = 5.0
LR_TOO_LOW = 50.0
_BAD_SETTINGS = (UserError, SpecError, OSError, ValueError, KeyError, TypeError)


@dataclass(frozen=True)
class Finding:
    """One thing preflight found: level "error" (the run cannot work: Start refuses) or "warning"."""

    level: str
    field: str
    message: str


def preflight(config: RunConfig, machine: Machine, *, records: int | None = None) -> list[Finding]:
    """What in `config` cannot work on `machine` (errors) or will not do what it seems to (warnings), each with what
    would. `records`: how many records the fine-tuning data holds, where the caller has counted them (else counted
    here). A setting that is invalid on its own is left to config.validate(): nothing here raises for it."""
    try:
        train = config.train_spec()
    except _BAD_SETTINGS:
        return []
    checks = (lambda: warmup_finding(train), lambda: learning_rate_finding(config, train),
              lambda: validation_finding(config, train, records), lambda: memory_finding(config, train, machine))
    found = []
    for check in checks:
        try:
            finding = check()
        except _BAD_SETTINGS:  # a setting the check cannot read: config.validate() names it
            finding = None
        if finding is not None:
            found.append(finding)
    return sorted(found, key=lambda f: f.level != ERROR)


# --- the checks ------------------------------------------------------------------------------------------------------

def warmup_finding(train: TrainSpec) -> Finding | None:
    """A warm-up at least as long as the run: the learning rate climbs the whole run and never reaches its peak."""
    if train.warmup_steps < train.steps:
        return None
    short = train.steps // 10
    use = (f"a warm-up of about {short:,} step{'s' if short != 1 else ''} (a tenth of the run)" if short else
           "no warm-up (0 steps) on so short a run")
    return Finding(WARNING, "warmup_steps",
                   f"Warm-up of {train.warmup_steps:,} steps is not shorter than the run ({train.steps:,} steps): the "
                   f"learning rate climbs the whole run and never reaches {train.lr:g}. Use {use}, or train for "
                   "more steps.")


def learning_rate_finding(config: RunConfig, train: TrainSpec) -> Finding | None:
    """A learning rate far from what the method usually starts from (most often another method's, kept)."""
    kind = str((config.adapter or {}).get("kind", "none"))
    method = METHOD_BY_KEY[method_key(config.objective, kind)]
    usual = method.default_lr(kind, base_parameters(config.base_model) if config.base_model else 0)
    name = "pretraining" if method.key == "pretraining" else method.label.split(" (")[0]
    if train.lr >= usual * LR_TOO_HIGH:
        return Finding(WARNING, "lr",
                       f"Learning rate {train.lr:g} is {train.lr / usual:.0f}× what {name} usually starts from "
                       f"({usual:g}){' (a pretraining rate kept?)' if method.finetune else ''}: steps this large can "
                       f"wreck what the model knows or make the loss diverge. Use about {usual:g}.")
    if train.lr * LR_TOO_LOW <= usual:
        return Finding(WARNING, "lr",
                       f"Learning rate {train.lr:g} is far below what {name} usually starts from ({usual:g}): the "
                       f"weights will barely move. Use about {usual:g}.")
    return None


def validation_finding(config: RunConfig, train: TrainSpec, records: int | None = None) -> Finding | None:
    """An empty validation set while evaluations are on: no validation curve, no best checkpoint by it."""
    if train.eval_every <= 0:
        return None
    if config.objective == "causal_lm" and config.dataset:
        return dataset_validation(config.dataset)
    if config.objective in ("sft", "dpo"):
        return held_out_validation(config, records)
    return None


def dataset_validation(dataset: str) -> Finding | None:
    """A prepared dataset whose validation split holds no full window (its manifest says how many documents)."""
    try:
        manifest = json.loads((Path(dataset).expanduser() / "manifest.json").read_text(encoding="utf-8"))
        val, train = manifest["splits"]["val"], manifest["splits"].get("train", {})
        fraction = float((manifest.get("split") or {}).get("val_fraction") or 0.0)
        window = int(manifest["chunking"]["context_length"]) + 1
        windows = int(val["chunks"]) if "chunks" in val else int(int(val.get("tokens", 0)) >= window)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # not prepared yet (the sample corpus) or unreadable: the run's own checks say so
    if windows > 0:
        return None
    docs, total = int(val.get("documents", 0)), int(val.get("documents", 0)) + int(train.get("documents", 0))
    name = Path(dataset).name
    if docs:
        why = (f"its {docs:,} validation document{'s' if docs != 1 else ''} hold {int(val.get('tokens', 0)):,} "
               f"tokens, fewer than one window of {window:,}")
    else:
        why = f"{fraction:.0%} of its {total:,} document{'s' if total != 1 else ''} held out rounds to none"
    if fraction <= 0:
        how = "prepare it again with a share held out for validation (Data tab)"
    else:
        how = (f"prepare it with more documents (at {fraction:.0%}, about {math.ceil(1 / fraction):,} documents "
               f"give one for validation) or a larger share held out for validation (Data tab)")
    return Finding(WARNING, "dataset", f"No validation curve: the validation set of {name} is empty ({why}), so "
                   f"validation loss is never measured. To have one, {how}.")


def held_out_validation(config: RunConfig, records: int | None) -> Finding | None:
    """Fine-tuning data split by `val_fraction` into nothing held out (engine/objectives/sft.py held_out_split)."""
    options = config.options()
    if options is None or options.val_data:
        return None
    fraction = float(options.val_fraction)
    unit = "pairs" if config.objective == "dpo" else "records"
    enough = 2 if fraction <= 0 else int(0.5 / fraction) + 2
    n = records if records is not None else count_records(config.data, enough)
    if not n:
        return None  # no data yet (or unreadable): Start's own checks ask for it
    held = min(round(n * fraction), n - 1) if fraction > 0 else 0
    if held >= 1:
        return None
    if fraction <= 0:
        why, how = "Held out for validation is 0", "set it (10% is usual) or give validation files"
    elif n < 2:
        why, how = f"the data holds only {n}", "add data, or give validation files"
    else:
        share = math.floor(50 / n) + 1  # the smallest whole percent that holds one out (round() halves to even)
        why = f"{fraction:.0%} of about {n:,} {unit} rounds to none"
        how = (f"hold out at least {share}% (Held out for validation, advanced) or give validation files"
               if share <= 50 else "add data, or give validation files")
    return Finding(WARNING, "val_fraction", f"No validation curve: no {unit} are held out for validation ({why}). "
                   f"To have one, {how}.")


def count_records(files: list[str], enough: int) -> int | None:
    """Non-empty lines of the data files (rows of a table), counted until `enough` (all a check needs); None when a
    file cannot be read (a missing or damaged file: the run's own checks name it)."""
    n = 0
    for name in files:
        path = Path(name).expanduser()
        if table_kind(path) is not None:  # a table: its rows (the column mapping reads one record per row)
            rows = table_rows(path, enough - n)
            if rows is None:
                return None
            n += rows
            if n >= enough:
                return n
            continue
        if not path.is_file():
            return None
        try:
            with path.open("rb") as fh:
                for line in fh:
                    n += bool(line.strip())
                    if n >= enough:
                        return n
        except OSError:
            return None
    return n


# --- memory ------------------------------------------------------------------------------------------------------

def memory_finding(config: RunConfig, train: TrainSpec, machine: Machine) -> Finding | None:
    """The run's memory estimate against what its device has free: an error where it cannot fit at all, a warning
    where it may not, each with what would fit."""
    budget = memory_budget(train.device, machine)
    plan = memory_plan(config, train, budget[2]) if budget else None
    if budget is None or plan is None:
        return None
    where, free, _gpu = budget
    shape = plan.shape
    est = estimate_training_memory(plan.spec, shape)
    if est["total"] <= free * FITS_SHARE:
        return None
    fixed = est["weights"] + est["gradients"] + est["optimizer"]
    # "auto" on a CPU is fp32, or bf16 where the CPU runs it fast (known only once torch measures it): refuse only
    # what cannot fit at the lighter of the two
    low = estimate_training_memory(plan.spec, dataclasses.replace(shape, precision="bf16")) \
        if train.precision == "auto" and shape.precision == "fp32" else est
    cannot = fixed > free or (not plan.guessed_length and low["total"] * ESTIMATE_LOW > free)
    if shape.batch_size:
        tokens = f"for {shape.batch_size} × {shape.seq_len:,} tokens ({plan.length}) at {shape.precision}"
    else:
        tokens = "not counting the rollouts'"
    verdict = "It cannot work here." if cannot else "It may not fit: expect swapping or an out-of-memory stop."
    message = (f"Memory: this run needs about {human_bytes(est['total'])} (weights {human_bytes(est['weights'])}, "
               f"gradients {human_bytes(est['gradients'])}, optimizer state {human_bytes(est['optimizer'])}, "
               f"activations {human_bytes(est['activations'])} {tokens}) but {where} has {human_bytes(free)} free. "
               f"{verdict} {what_fits(plan, free)}")
    return Finding(ERROR if cannot else WARNING, "batch_size", message)


def what_fits(plan: MemoryPlan, free: int) -> str:
    """The least change of each kind that brings the estimate within FITS_SHARE of `free`, with its estimate: a
    smaller micro-batch and/or gradient checkpointing; for full fine-tuning LoRA, then QLoRA (alone, or with those).
    Where nothing fits, the least memory these settings get to."""
    groups = change_groups(plan, free)
    sized = [(label, _total(plan, s)) for group in groups for label, s in group]
    fitting = []
    for group in groups:
        fits = [(label, _total(plan, s)) for label, s in group if _total(plan, s) <= free * FITS_SHARE]
        if fits:
            fitting.append(f"{fits[0][0]}: about {human_bytes(fits[0][1])}")
    bigger = "" if plan.finetune else "; or a smaller model (Model tab)"
    if fitting:
        return "Would fit: " + "; ".join(fitting) + bigger + "."
    if not sized:
        return "A smaller model, or a machine with more memory, would fit."
    label, total = min(sized, key=lambda item: item[1])
    room = "tight, with little room for the rest of the machine" if total <= free else "still too much"
    return (f"The least these settings get to is {label}, about {human_bytes(total)}: {room}. A smaller model, "
            "or a machine with more memory, would fit.")


def change_groups(plan: MemoryPlan, free: int) -> list[list[tuple[str, TrainingShape]]]:
    """Changes that lower a run's memory, by kind, least change first within each: [(label, shape)]."""
    shape, rows = plan.shape, plan.rows
    replace = dataclasses.replace
    micro: list[tuple[str, TrainingShape]] = []
    smaller = [m for m in range(shape.batch_size // rows - 1, 0, -1) if plan.batch_size % m == 0]
    if smaller:
        fit = next((m for m in smaller if _total(plan, replace(shape, batch_size=m * rows)) <= free * FITS_SHARE),
                   smaller[-1])
        micro.append((f"a micro-batch of {fit} (Micro-batch size, advanced: the batch of {plan.batch_size} is "
                      "reached by accumulation)", replace(shape, batch_size=fit * rows)))
    checkpointing: list[tuple[str, TrainingShape]] = []
    if not shape.gradient_checkpointing:
        checkpointing.append(("gradient checkpointing (advanced; about 30% slower)",
                              replace(shape, gradient_checkpointing=True)))
        if micro:
            checkpointing.append((f"{micro[0][0].split(' (')[0]} with gradient checkpointing",
                                  replace(micro[0][1], gradient_checkpointing=True)))
    groups = [group for group in (micro, checkpointing) if group]
    if plan.finetune and shape.adapter == "none":
        least = (checkpointing or micro or [("", shape)])[-1]
        for kind, label in (("lora", "LoRA instead of full weights"), ("qlora", "QLoRA (a 4-bit base)")):
            group = [(label, replace(shape, adapter=kind))]
            if least[0]:
                group.append((f"{label}, {least[0].split(' (')[0]}", replace(least[1], adapter=kind)))
            groups.append(group)
    return groups


def _total(plan: MemoryPlan, shape: TrainingShape) -> int:
    return plan.total(shape)
