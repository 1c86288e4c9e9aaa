"""The training methods as a person picks them, in one table (stdlib only): names, what each one needs, the
learning rate it starts from, and the run config it maps onto. The window's method list, the CLI's --method and
the Library read it from here.

    Pretraining -> causal_lm      SFT -> sft        LoRA -> sft + lora      QLoRA -> sft + qlora
    DPO -> dpo (+ optional adapter)   GRPO -> grpo (+ adapter)   Self-play -> selfplay (+ adapter)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desktop_app.engine.method_options import METHOD_OPTIONS

# What a method's data files hold: "" (none: pretraining reads a prepared dataset, self-play makes its own
# tasks), chat records (sft), preference pairs (dpo) or prompts (grpo).
DATA_KINDS = ("", "sft", "dpo", "grpo")
PRETRAINING_LR = 1e-3  # TrainSpec's default
# Bigger models want smaller steps: a fine-tuning rate is scaled by this factor from these sizes (parameters) up,
# for full weights and for adapters. Full SFT: 5e-5 to 1.5B, 2e-5 to 10B, 1e-5 above; LoRA 2e-4, 1e-4 above 15B
# (the rates common recipes use at those sizes).
LR_BY_SIZE = {"none": ((10e9, 0.2), (1.5e9, 0.4)), "adapter": ((15e9, 0.5),)}


@dataclass(frozen=True)
class Method:
    key: str  # what the selector and the CLI's --method call it
    label: str
    objective: str  # RunConfig.objective
    adapter: str | None  # fixed adapter kind, or None: the user picks (full weights / LoRA / QLoRA)
    data: str  # one of DATA_KINDS
    data_label: str  # what the data files must hold, in words
    help: str
    # Learning rate it starts from, by adapter kind: full fine-tuning moves every weight, so it wants a far
    # smaller step than LoRA; DPO smaller still.
    lr: tuple[tuple[str, float], ...] = ()

    @property
    def finetune(self) -> bool:
        """Starts from a base model (everything but pretraining)."""
        return self.key != "pretraining"

    @property
    def options_spec(self) -> type | None:
        """The dataclass of its options (method_options.py), or None."""
        return METHOD_OPTIONS.get(self.objective)

    def default_lr(self, adapter: str = "none", parameters: int = 0) -> float:
        """The learning rate a run of this method with `adapter` starts from; fine-tuning a model of `parameters`
        (0: unknown) starts lower the bigger the model (LR_BY_SIZE)."""
        kind = self.adapter or adapter
        table = dict(self.lr)
        lr = table.get(kind, table.get("none", PRETRAINING_LR))
        if not self.finetune:
            return lr
        steps = LR_BY_SIZE["none" if kind == "none" else "adapter"]
        return lr * next((scale for size, scale in steps if parameters > size), 1.0)


_SFT_LR = (("none", 5e-5), ("lora", 2e-4), ("qlora", 2e-4))
METHODS: tuple[Method, ...] = (
    Method("pretraining", "Pretraining", "causal_lm", "none", "", "",
           "Next-token prediction on a prepared dataset: a model from the Model tab's spec, trained from scratch "
           "(or continued from the Model tab's base).", (("none", PRETRAINING_LR),)),
    Method("sft", "SFT (full fine-tuning)", "sft", "none", "sft", "chat, ShareGPT or Alpaca records",
           "Supervised fine-tuning on chats or instructions: every weight of the base model trains. Loss falls "
           "on the assistant's replies only (see the record preview).", _SFT_LR),
    Method("lora", "LoRA", "sft", "lora", "sft", "chat, ShareGPT or Alpaca records",
           "SFT with low-rank adapters: the base stays frozen and only small adapter matrices train. Far less "
           "memory and a small result (PEFT format); merge it into the base when exporting.", _SFT_LR),
    Method("qlora", "QLoRA", "sft", "qlora", "sft", "chat, ShareGPT or Alpaca records",
           "LoRA on a 4-bit (NF4) copy of the base: the least memory. Needs bitsandbytes.", _SFT_LR),
    Method("dpo", "DPO", "dpo", None, "dpo", "preference pairs (prompt, chosen, rejected)",
           "Direct preference optimisation on pairs of answers (prompt, chosen, rejected): the model learns to "
           "prefer the chosen answer, staying close to the base (the reference).",
           (("none", 5e-6), ("lora", 5e-5), ("qlora", 5e-5))),
    Method("grpo", "GRPO", "grpo", None, "grpo", "prompts (JSONL: prompt, optional answer)",
           "Reinforcement learning with reward functions: a group of completions per prompt is scored "
           "(answer match, format, length, diversity, your own reward file) and the better ones are reinforced.",
           (("none", 1e-5), ("lora", 5e-5), ("qlora", 5e-5))),
    Method("selfplay", "Self-play", "selfplay", None, "", "",
           "Absolute Zero self-play: the model proposes tasks (deduction, abduction, induction), solves them, "
           "and a task world checks every answer; rewards flow to both roles. No data needed.",
           (("none", 2e-4), ("lora", 5e-4), ("qlora", 5e-4))),
)
METHOD_BY_KEY = {m.key: m for m in METHODS}
FINETUNE_METHODS = tuple(m.key for m in METHODS if m.finetune)  # the CLI's --method choices
# Not a method of one run: a list of stages, each one of METHODS (the window lists it after them).
PIPELINE = Method("pipeline", "Pipeline", "pipeline", None, "", "",
                  "Several stages in a row (e.g. pretraining -> SFT -> DPO), each one of the methods above with its "
                  "own data and settings; each stage starts from the previous stage's output. Stop it any time: "
                  "Resume continues the interrupted stage.")


def method_key(objective: str, adapter_kind: str = "none") -> str:
    """The method a run config trains with: (objective, adapter kind) -> pretraining / sft / lora / ..."""
    if objective == "causal_lm":
        return "pretraining"
    if objective == "sft":
        return {"lora": "lora", "qlora": "qlora"}.get(adapter_kind, "sft")
    return objective if objective in METHOD_BY_KEY else "pretraining"


def method_of(config: Any) -> Method:
    """The Method of a RunConfig (or of its dict)."""
    data = config if isinstance(config, dict) else config.to_dict()
    adapter = data.get("adapter") if isinstance(data.get("adapter"), dict) else {}
    return METHOD_BY_KEY[method_key(str(data.get("objective", "causal_lm")), str(adapter.get("kind", "none")))]


def default_lr(objective: str, adapter_kind: str = "none", parameters: int = 0) -> float:
    """The learning rate a run of `objective` with `adapter_kind` on a model of `parameters` (0: unknown) starts from
    when none is given."""
    return METHOD_BY_KEY[method_key(objective, adapter_kind)].default_lr(adapter_kind, parameters)
