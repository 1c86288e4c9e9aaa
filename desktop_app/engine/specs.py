"""Plain, validated descriptions of what to build and run (stdlib only, so the UI can import it fast).

Every spec is a dataclass with per-field help text and display hints (spec_base.py), a JSON round trip
(`to_dict` / `from_dict`, unknown keys refused by name) and `validate()`, which returns *every*
problem at once in words a person understands. An empty list means valid. The methods' own options are in
method_options.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.column_roles import columns_problems
from desktop_app.engine.method_options import method_options
from desktop_app.engine.spec_base import (
    SpecError,
    SpecMixin,
    check_choice,
    check_positive,
    check_range,
    load_json,
    save_json,
    spec_field,
)

MODEL_FAMILIES = ("llama", "gpt2")
TOKENIZER_KINDS = ("byte-bpe", "bpe", "wordpiece", "unigram")
LR_SCHEDULES = ("cosine", "linear", "constant")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("auto", "cpu", "cuda", "mps")
# How a GPU computes a training step (model/fast_path.py): the measured fastest, torch.compile, Liger's kernels, or
# transformers' own modules.
TRAIN_KERNELS = ("auto", "compile", "liger", "eager")
NONFINITE_POLICIES = ("skip", "rollback")
# Training methods (objectives/; methods.py names them as the window and the CLI show them).
OBJECTIVES = ("causal_lm", "sft", "dpo", "grpo", "selfplay")
# Objectives that fine-tune a base model on record files (`data`) instead of a prepared dataset.
FINETUNE_OBJECTIVES = ("sft", "dpo")
# Reinforcement methods: they start from a base model and make their own episodes (grpo reads prompt files as
# `data`; selfplay needs no data).
RL_OBJECTIVES = ("grpo", "selfplay")
ADAPTER_KINDS = ("none", "lora", "qlora")
QUANT_TYPES = ("nf4", "fp4")
OPTIMIZERS = ("auto", "adamw", "adamw8bit", "paged_adamw8bit")
DISTRIBUTED_STRATEGIES = ("ddp", "fsdp")
DISTRIBUTED_BACKENDS = ("auto", "gloo", "nccl")
FSDP_PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# Where a run's metrics also go, besides metrics.jsonl (engine/train/tracking.py).
TRACKERS = ("tensorboard", "mlflow", "wandb")

_f = spec_field  # short: the declarations below read as a table


@dataclass
class ModelSpec(SpecMixin):
    """A decoder-only transformer. Maps 1:1 onto LlamaForCausalLM or GPT2LMHeadModel."""

    family: str = _f("llama", "Architecture family: 'llama' (RMSNorm, RoPE, grouped-query attention, "
                     "SwiGLU) or 'gpt2' (LayerNorm, learned positions, GELU).", choices=MODEL_FAMILIES,
                     label="Architecture")
    vocab_size: int = _f(4096, "Number of distinct tokens. Must match the tokenizer; larger vocabularies "
                         "shorten sequences but cost embedding parameters.", minimum=2,
                         label="Vocabulary size", unit="tokens")
    d_model: int = _f(256, "Width of the residual stream (hidden size). Must divide evenly by the number "
                      "of attention heads.", minimum=8, label="Hidden size (width)")
    n_layers: int = _f(4, "Number of transformer blocks stacked on top of each other.", minimum=1,
                       label="Layers (blocks)")
    n_heads: int = _f(4, "Attention heads per block. Each head has d_model / n_heads dimensions.", minimum=1,
                      label="Attention heads")
    n_kv_heads: int = _f(4, "Key/value heads (llama only). Fewer than n_heads gives grouped-query "
                         "attention: a smaller KV cache at little quality cost. Must divide n_heads.",
                         minimum=1, label="Key/value heads")
    ffn_dim: int = _f(688, "Hidden width of each block's feed-forward network (llama: SwiGLU, usually "
                      "about 8/3 x d_model; gpt2: GELU MLP, usually 4 x d_model).", minimum=1,
                      label="Feed-forward width")
    context_length: int = _f(256, "Longest sequence (in tokens) the model reads at once.", minimum=8,
                             label="Context length", unit="tokens")
    dropout: float = _f(0.0, "Probability of zeroing activations during training (0 disables; small "
                        "models on small data may benefit from 0.1).", minimum=0.0, maximum=0.9,
                        label="Dropout", zero="off")
    rope_theta: float = _f(10000.0, "Base of the rotary position embedding (llama only). Larger values "
                           "suit longer contexts.", minimum=1.0, label="RoPE base (theta)", advanced=True)
    tie_embeddings: bool = _f(True, "Share the input embedding matrix with the output layer: fewer "
                              "parameters, usually no quality loss for small models.",
                              label="Tie input and output embeddings", advanced=True)
    norm_eps: float = _f(1e-5, "Epsilon of the normalisation layers (numerical safety).", minimum=1e-12,
                         label="Normalisation epsilon", advanced=True)
    init_std: float = _f(0.02, "Standard deviation of the initial weights.", minimum=1e-6,
                         label="Initial weight scale (std)", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_choice(p, "family", self.family, MODEL_FAMILIES)
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "context_length"):
            check_positive(p, name, getattr(self, name))
        if p:
            return p
        if self.vocab_size < 2:
            p.append(f"vocab_size {self.vocab_size} is too small: a model needs at least 2 tokens")
        if self.d_model % self.n_heads:
            p.append(f"d_model {self.d_model} is not divisible by {self.n_heads} heads")
        elif (self.d_model // self.n_heads) % 2 and self.family == "llama":
            p.append(f"head size {self.d_model // self.n_heads} (d_model / n_heads) must be even for "
                     "rotary position embeddings")
        if self.family == "llama" and self.n_heads % self.n_kv_heads:
            p.append(f"{self.n_heads} heads cannot be shared evenly among {self.n_kv_heads} key/value heads "
                     "(n_heads must be a multiple of n_kv_heads)")
        if self.n_kv_heads > self.n_heads:
            p.append(f"n_kv_heads {self.n_kv_heads} cannot exceed n_heads {self.n_heads}")
        if self.family == "gpt2" and self.n_kv_heads != self.n_heads:
            p.append("gpt2 has no grouped-query attention: set n_kv_heads equal to n_heads")
        check_range(p, "dropout", self.dropout, 0.0, 0.9)
        check_range(p, "rope_theta", self.rope_theta, 1.0, 1e9)
        check_range(p, "norm_eps", self.norm_eps, 1e-12, 1e-1)
        check_range(p, "init_std", self.init_std, 1e-6, 1.0)
        if self.context_length < 8:
            p.append(f"context_length {self.context_length} is too short: use at least 8 tokens")
        return p

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass
class DataSpec(SpecMixin):
    """How input files become a tokenized dataset."""

    tokenizer: str = _f("byte-bpe", "Tokenizer algorithm to train on your files: byte-bpe (never fails on "
                        "any text; default), bpe, wordpiece or unigram.", choices=TOKENIZER_KINDS, label="Tokenizer")
    tokenizer_file: str = _f("", "Use this existing tokenizer.json (or a Hugging Face model folder) "
                             "instead of training a new one.",
                             label="Existing tokenizer", widget="file", advanced=True)
    vocab_size: int = _f(4096, "Vocabulary size of the tokenizer to train.", minimum=64,
                         label="Vocabulary size", unit="tokens")
    context_length: int = _f(256, "Tokens per training window; should equal the model's context length.",
                             minimum=8, label="Window length", unit="tokens")
    overlap: int = _f(0, "Tokens shared by consecutive windows (0 = no overlap). Overlap yields more "
                      "windows from little data.", minimum=0,
                      label="Overlap between windows", unit="tokens", zero="none")
    val_fraction: float = _f(0.05, "Share of documents held out for validation (split by document, "
                             "deterministic for a given seed).", minimum=0.0, maximum=0.5,
                             label="Held out for validation", unit="share")
    seed: int = _f(1337, "Seed of the train/validation split.", label="Split seed", minimum=0, advanced=True)
    min_frequency: int = _f(2, "A merge or token must occur this often to enter the vocabulary.", minimum=1,
                            label="Minimum frequency", unit="times", advanced=True)
    columns: dict = _f({}, "Which column of a table (CSV, Parquet, a datasets folder) or JSON Lines file plays which "
                       "part, e.g. {\"text\": \"body\"} or {\"instruction\": \"q\", \"output\": \"a\"}; empty: "
                       "guessed from common column names. Set in the Data tab's column panel or with --columns.",
                       label="Column mapping", hidden=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        if not self.tokenizer_file:
            check_choice(p, "tokenizer", self.tokenizer, TOKENIZER_KINDS)
        check_positive(p, "vocab_size", self.vocab_size)
        check_positive(p, "context_length", self.context_length)
        check_positive(p, "min_frequency", self.min_frequency)
        if isinstance(self.vocab_size, int) and self.vocab_size < 64 and not self.tokenizer_file:
            p.append(f"vocab_size {self.vocab_size} is too small for a tokenizer: use at least 64")
        if not isinstance(self.overlap, int) or self.overlap < 0:
            p.append(f"overlap must be a whole number of 0 or more, got {self.overlap!r}")
        elif isinstance(self.context_length, int) and self.overlap >= self.context_length:
            p.append(f"overlap {self.overlap} must be smaller than the context length {self.context_length}")
        check_range(p, "val_fraction", self.val_fraction, 0.0, 0.5)
        p += columns_problems(self.columns)
        return p

    @property
    def stride(self) -> int:
        return self.context_length - self.overlap


@dataclass
class TrainSpec(SpecMixin):
    """Hyperparameters and controls of one training run."""

    steps: int = _f(200, "Optimizer steps to run.", minimum=1, label="Training steps", unit="steps")
    batch_size: int = _f(16, "Sequences per optimizer step (the effective batch).", minimum=1,
                         label="Batch size", unit="sequences")
    micro_batch_size: int = _f(0, "Sequences per forward pass; the batch is reached by gradient "
                               "accumulation. 0 = same as batch size.", minimum=0,
                               label="Micro-batch size", unit="sequences", zero="same as the batch", advanced=True)
    lr: float = _f(1e-3, "Peak learning rate.", minimum=0.0, label="Learning rate")
    min_lr_ratio: float = _f(0.1, "Final learning rate as a fraction of the peak (cosine/linear).",
                             minimum=0.0, maximum=1.0, label="Final learning rate", unit="x peak", advanced=True)
    warmup_steps: int = _f(20, "Steps of linear warm-up from 0 to the peak learning rate.", minimum=0,
                           label="Warm-up", unit="steps", zero="none")
    schedule: str = _f("cosine", "Learning-rate schedule after warm-up.", choices=LR_SCHEDULES,
                       label="Learning-rate schedule")
    weight_decay: float = _f(0.1, "AdamW weight decay (not applied to norms, biases or embeddings).",
                             minimum=0.0, label="Weight decay", zero="off", advanced=True)
    beta1: float = _f(0.9, "AdamW beta1.", minimum=0.0, maximum=0.999999,
                      label="Adam beta1 (momentum)", advanced=True)
    beta2: float = _f(0.95, "AdamW beta2.", minimum=0.0, maximum=0.999999, label="Adam beta2", advanced=True)
    grad_clip: float = _f(1.0, "Clip the global gradient norm to this value (0 disables).", minimum=0.0,
                          label="Gradient clipping (max norm)", zero="off", advanced=True)
    eval_every: int = _f(50, "Evaluate on the validation split every N steps (0 disables).", minimum=0,
                         label="Evaluate every", unit="steps", zero="never")
    eval_batches: int = _f(8, "Validation batches per evaluation.", minimum=1,
                           label="Validation batches per evaluation", unit="batches", advanced=True)
    log_every: int = _f(1, "Report training metrics every N steps.", minimum=1,
                        label="Report metrics every", unit="steps", advanced=True)
    save_every: int = _f(100, "Save a checkpoint every N steps (0 = only at the end).", minimum=0,
                         label="Save a checkpoint every", unit="steps", zero="only at the end")
    keep_last: int = _f(3, "Checkpoints to keep (plus the best by validation loss).", minimum=1,
                        label="Checkpoints kept", unit="checkpoints", advanced=True)
    precision: str = _f("auto", "Numeric precision: auto picks bf16/fp16 autocast only where the hardware "
                        "runs it fast, else fp32.", choices=PRECISIONS, label="Precision", advanced=True)
    device: str = _f("auto", "Where to train: auto picks CUDA, then MPS, then CPU.", choices=DEVICES,
                     label="Device", advanced=True)
    threads: int = _f(0, "CPU threads for torch (0 = automatic: leaves a core for the window).", minimum=0,
                      label="CPU threads", unit="threads", zero="auto", advanced=True)
    compile: bool = _f(False, "Compile the model with torch.compile on any device (slow start). On a GPU, kernels "
                       "'auto' already compiles where that was measured fastest.",
                       label="Compile the model (torch.compile)", advanced=True)
    kernels: str = _f("auto", "How a GPU computes each step: auto (the fastest measured for the model's family and "
                      "size: torch.compile of a fused forward), compile, liger (Liger Kernel's Triton kernels; the "
                      "optional gpu extra) or eager (transformers' own modules). The output projection and loss are "
                      "fused in chunks either way. CPUs keep their own fused path.", choices=TRAIN_KERNELS,
                      label="GPU kernels", advanced=True)
    gradient_checkpointing: bool = _f(False, "Recompute activations in the backward pass: less memory, "
                                      "about 30% slower.",
                                      label="Gradient checkpointing (less memory)", advanced=True)
    early_stopping_patience: int = _f(0, "Stop when validation loss (self-play: the held-out solve "
                                      "rate) has not improved for this many evaluations (0 disables).", minimum=0,
                                      label="Early stopping after", unit="evaluations", zero="off", advanced=True)
    nonfinite_policy: str = _f("skip", "On a NaN/Inf loss or gradient: skip the step, or roll back to the "
                               "last good checkpoint with a lower learning rate.", choices=NONFINITE_POLICIES,
                               label="On a NaN or Inf loss", advanced=True)
    max_nonfinite: int = _f(5, "Stop the run after this many non-finite steps.", minimum=1,
                            label="Give up after", unit="bad steps", advanced=True)
    optimizer: str = _f("auto", "Optimizer: auto (AdamW; 8-bit AdamW for QLoRA, paged on CUDA), adamw, adamw8bit or "
                        "paged_adamw8bit (bitsandbytes: ~4x smaller optimizer state).", choices=OPTIMIZERS,
                        label="Optimizer", advanced=True)
    sample_prompts: list = _f([""], "Prompts to sample from at each evaluation ('' = start of text).",
                              label="Sample prompts", widget="lines", advanced=True)
    sample_tokens: int = _f(48, "Tokens generated per sample at each evaluation (0 disables).", minimum=0,
                            label="Sample length", unit="tokens", zero="no samples", advanced=True)
    sample_temperature: float = _f(0.8, "Randomness of those samples (0 = always the most likely token).",
                                   minimum=0.0, label="Sample temperature", advanced=True)
    sample_top_k: int = _f(50, "Those samples draw only among the K most likely tokens (0: among all).", minimum=0,
                           label="Sample top-k", zero="all tokens", advanced=True)
    auto_micro_batch: bool = _f(False, "Find the largest micro-batch that fits in memory (a search on CUDA, a "
                                "memory model on CPU) and reach the batch size by gradient accumulation.",
                                label="Find the largest micro-batch that fits", advanced=True)
    time_budget_s: float = _f(0.0, "Train for at most this long (earlier sessions of a resumed run included), then "
                              "save and finish, whichever comes first with the steps (0 = no limit). A cosine or "
                              "linear schedule decays over whichever of the two comes first (by the clock: from "
                              "the end of the first step, which holds the one-off compilation).", minimum=0.0,
                              label="Time limit", unit="s", zero="no limit")
    trackers: list = _f(["tensorboard"], "Where the run's metrics, settings and samples also go: tensorboard (event "
                        "files in the run folder; skipped where not installed), mlflow (RUN/mlruns, or "
                        "MLFLOW_TRACKING_URI), wandb (offline in RUN/wandb unless WANDB_MODE says otherwise). The "
                        "optional tracking extra installs them; a resumed run continues its tracked run.",
                        label="Also track the run in", widget="checklist", choices=TRACKERS, advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        p += tracker_problems(self.trackers)
        if not isinstance(self.auto_micro_batch, bool):
            p.append(f"auto_micro_batch must be true or false, got {self.auto_micro_batch!r}")
        for name in ("steps", "batch_size", "eval_batches", "log_every", "keep_last", "max_nonfinite"):
            check_positive(p, name, getattr(self, name))
        for name in ("micro_batch_size", "warmup_steps", "eval_every", "save_every", "threads",
                     "early_stopping_patience", "sample_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                p.append(f"{name} must be a whole number of 0 or more, got {value!r}")
        check_range(p, "lr", self.lr, 0.0, 10.0)
        check_range(p, "min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        check_range(p, "weight_decay", self.weight_decay, 0.0, 10.0)
        check_range(p, "beta1", self.beta1, 0.0, 0.999999)
        check_range(p, "beta2", self.beta2, 0.0, 0.999999)
        check_range(p, "grad_clip", self.grad_clip, 0.0, 1e6)
        check_choice(p, "schedule", self.schedule, LR_SCHEDULES)
        check_choice(p, "precision", self.precision, PRECISIONS)
        check_choice(p, "device", self.device, DEVICES)
        check_choice(p, "kernels", self.kernels, TRAIN_KERNELS)
        check_choice(p, "nonfinite_policy", self.nonfinite_policy, NONFINITE_POLICIES)
        check_choice(p, "optimizer", self.optimizer, OPTIMIZERS)
        if isinstance(self.micro_batch_size, int) and isinstance(self.batch_size, int) and self.micro_batch_size:
            if self.micro_batch_size > self.batch_size:
                p.append(f"micro_batch_size {self.micro_batch_size} cannot exceed batch_size {self.batch_size}")
            elif self.batch_size % self.micro_batch_size:
                p.append(f"batch_size {self.batch_size} is not a multiple of micro_batch_size "
                         f"{self.micro_batch_size}")
        if not isinstance(self.sample_prompts, list) or not all(isinstance(s, str) for s in self.sample_prompts):
            p.append("sample_prompts must be a list of strings")
        return p

    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.batch_size

    @property
    def accumulation_steps(self) -> int:
        return self.batch_size // self.micro_batch


def tracker_problems(trackers: Any) -> list[str]:
    """What is wrong with TrainSpec.trackers: a list of distinct names of TRACKERS."""
    if not isinstance(trackers, list) or any(t not in TRACKERS for t in trackers) or len(
            {str(t) for t in trackers}) != len(trackers):
        return [f"trackers must be distinct names among {', '.join(TRACKERS)}, got {trackers!r}"]
    return []


@dataclass
class GenerateSpec(SpecMixin):
    """Sampling settings for text generation."""

    max_new_tokens: int = _f(128, "Most tokens to generate.", minimum=1, label="Longest reply", unit="tokens")
    temperature: float = _f(0.8, "Randomness: 0 = always the most likely token (greedy); higher = more "
                            "varied.", minimum=0.0, maximum=5.0, label="Temperature", zero="greedy")
    top_k: int = _f(50, "Sample only among the K most likely tokens (0 disables).", minimum=0,
                    label="Top-k", unit="tokens", zero="off")
    top_p: float = _f(1.0, "Sample among the most likely tokens whose probabilities add up to P "
                      "(1 disables).", minimum=0.0, maximum=1.0, label="Top-p")
    min_p: float = _f(0.0, "Drop tokens less likely than this fraction of the most likely one (0 disables).",
                      minimum=0.0, maximum=1.0, label="Min-p", zero="off", advanced=True)
    repetition_penalty: float = _f(1.0, "Above 1 discourages repeating tokens already in the text.",
                                   minimum=0.1, maximum=5.0, label="Repetition penalty")
    stop: list = _f([], "Stop when any of these strings appears (it is not shown).",
                    label="Stop at", widget="lines", advanced=True)
    samples: int = _f(1, "Completions generated at once for the same prompt.", minimum=1, maximum=64,
                      label="Completions at once")
    seed: int = _f(0, "Seed of the sampler (same seed + settings = same text).", label="Seed", minimum=0)
    chat: bool = _f(False, "Wrap the prompt in the model's chat template.", label="Chat", hidden=True)
    num_beams: int = _f(1, "Beam search: keep this many candidate texts and return the most likely (1 = off: "
                        "sample, or greedy at temperature 0). Beams pick tokens without randomness, so they need "
                        "temperature 0; samples then returns the best N beams.", minimum=1, maximum=64,
                        label="Beams", advanced=True)
    length_penalty: float = _f(1.0, "Beam search: a finished text scores log-probability / length ^ this. Above "
                               "0 favours longer texts, below 0 shorter ones.", minimum=-10.0, maximum=10.0,
                               label="Length penalty (beams)", advanced=True)
    early_stopping: str = _f("false", "Beam search: when to stop. false: once no running beam can beat the "
                             "finished ones (the usual); true: as soon as num_beams texts have finished; never: "
                             "only when no beam could improve even at the longest length.",
                             choices=("false", "true", "never"), label="Beam stopping rule", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_positive(p, "max_new_tokens", self.max_new_tokens)
        check_positive(p, "samples", self.samples)
        check_positive(p, "num_beams", self.num_beams)
        check_range(p, "length_penalty", self.length_penalty, -10.0, 10.0)
        if self.early_stopping not in ("false", "true", "never", False, True):
            p.append(f"early_stopping must be one of false, true, never, got {self.early_stopping!r}")
        if isinstance(self.num_beams, int) and not isinstance(self.num_beams, bool) and self.num_beams > 1:
            if self.num_beams > 64:
                p.append(f"num_beams {self.num_beams} is too many: at most 64")
            if isinstance(self.temperature, (int, float)) and self.temperature > 0:
                p.append(f"beam search (num_beams {self.num_beams}) picks tokens without randomness: set "
                         f"temperature to 0 (got {self.temperature!r}); top_k, top_p, min_p and seed do not apply")
            if isinstance(self.samples, int) and self.samples > self.num_beams:
                p.append(f"samples {self.samples} cannot exceed num_beams {self.num_beams}: with beam search, "
                         "samples is how many of the best beams are returned")
        check_range(p, "temperature", self.temperature, 0.0, 5.0)
        check_range(p, "top_p", self.top_p, 0.0, 1.0)
        check_range(p, "min_p", self.min_p, 0.0, 1.0)
        check_range(p, "repetition_penalty", self.repetition_penalty, 0.1, 5.0)
        if not isinstance(self.top_k, int) or self.top_k < 0:
            p.append(f"top_k must be a whole number of 0 or more, got {self.top_k!r}")
        if isinstance(self.samples, int) and self.samples > 64:
            p.append(f"samples {self.samples} is too many: at most 64 at once")
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            p.append("stop must be a list of non-empty strings")
        return p


@dataclass
class AdapterSpec(SpecMixin):
    """What trains when fine-tuning: every weight (none), LoRA adapters, or LoRA on a 4-bit base (QLoRA)."""

    kind: str = _f("none", "none: every weight trains (full fine-tuning). lora: small low-rank adapters train "
                   "and the base stays frozen (far less memory). qlora: LoRA on a 4-bit (NF4) copy of the base: "
                   "the least memory.", choices=ADAPTER_KINDS, label="Weights that train")
    rank: int = _f(8, "LoRA rank r: width of each adapter. Higher learns more and costs more (4-64 is usual).",
                   minimum=1, label="LoRA rank (r)")
    alpha: float = _f(16.0, "LoRA alpha: the adapter's output is scaled by alpha / rank (usually 1-2x the rank).",
                      minimum=0.0, label="LoRA alpha")
    dropout: float = _f(0.0, "Dropout on the adapter's input during training (0 disables).", minimum=0.0,
                        maximum=0.9, label="Adapter dropout", zero="off", advanced=True)
    target_modules: list = _f([], "Layers that get adapters, by name (e.g. q_proj, v_proj). Empty = every linear "
                              "projection of the model's family (attention and MLP), the usual best choice.",
                              label="Layers with adapters", widget="modules", advanced=True)
    quant_type: str = _f("nf4", "QLoRA only: 4-bit data type of the frozen base (nf4 is the QLoRA paper's).",
                         choices=QUANT_TYPES, label="4-bit data type")
    double_quant: bool = _f(True, "QLoRA only: quantize the quantization constants too (saves ~0.4 bits per "
                            "weight).", label="Double quantization", advanced=True)

    def validate(self) -> list[str]:
        p: list[str] = []
        check_choice(p, "kind", self.kind, ADAPTER_KINDS)
        check_positive(p, "rank", self.rank)
        check_range(p, "alpha", self.alpha, 0.0, 1e6)
        check_range(p, "dropout", self.dropout, 0.0, 0.9)
        if not isinstance(self.target_modules, list) or not all(
                isinstance(t, str) and t.strip() for t in self.target_modules):
            p.append("target_modules must be a list of layer names (empty = all linear projections)")
        check_choice(p, "quant_type", self.quant_type, QUANT_TYPES)
        if not isinstance(self.double_quant, bool):
            p.append(f"double_quant must be true or false, got {self.double_quant!r}")
        return p


@dataclass
class DistributedSpec(SpecMixin):
    """How a run spreads over several processes when launched by torchrun (ignored in a single process).

    The batch size stays the global batch: each of N processes takes batch_size / N sequences of every step
    (its own rows of the same seeded order), so a run's data and maths do not depend on N.
    """

    strategy: str = _f("ddp", "ddp: every process holds the whole model and gradients are averaged (fastest when "
                       "the model fits). fsdp: parameters, gradients and optimizer state are sharded across "
                       "processes (FSDP2), for models that do not fit on one device.",
                       choices=DISTRIBUTED_STRATEGIES, label="Strategy")
    backend: str = _f("auto", "Communication backend: auto = nccl on CUDA, gloo on CPU.",
                      choices=DISTRIBUTED_BACKENDS, label="Communication backend", advanced=True)
    nproc_per_node: int = _f(1, "Processes per machine (usually the number of GPUs): more than 1 starts the run on "
                             "that many processes (torchrun) when you press Start.", minimum=1,
                             label="Processes per machine", unit="processes")
    fsdp_precision: str = _f("auto", "FSDP only: parameter dtype for compute (auto = the run's precision; bf16 "
                             "halves communication on GPUs). Gradients are reduced in fp32.", choices=FSDP_PRECISIONS,
                             label="FSDP compute precision", advanced=True)
    fsdp_cpu_offload: bool = _f(False, "FSDP only: keep sharded parameters and optimizer state in CPU memory "
                                "(fits far larger models on a GPU, slower).",
                                label="FSDP: offload to CPU memory", advanced=True)
    fsdp_reshard_after_forward: bool = _f(True, "FSDP only: free gathered parameters after each layer's forward "
                                          "(less memory; gathers them again for backward).",
                                          label="FSDP: free gathered weights after forward", advanced=True)
    timeout_s: int = _f(300, "Seconds a process waits for the others at a collective before the run ends with "
                        "an error (a process that died).", minimum=10, label="Timeout at a collective", unit="s")

    def validate(self) -> list[str]:
        p: list[str] = []
        check_choice(p, "strategy", self.strategy, DISTRIBUTED_STRATEGIES)
        check_choice(p, "backend", self.backend, DISTRIBUTED_BACKENDS)
        check_positive(p, "nproc_per_node", self.nproc_per_node)
        check_choice(p, "fsdp_precision", self.fsdp_precision, FSDP_PRECISIONS)
        for name in ("fsdp_cpu_offload", "fsdp_reshard_after_forward"):
            if not isinstance(getattr(self, name), bool):
                p.append(f"{name} must be true or false, got {getattr(self, name)!r}")
        check_range(p, "timeout_s", self.timeout_s, 10, 86400)
        return p


@dataclass
class RunConfig(SpecMixin):
    """Everything needed to reproduce a run: written as run.json into each run folder.

    GUI and CLI both write and read this file, so `python -m desktop_app train --config run.json`
    reproduces a run started in the window.
    """

    model: dict = _f({}, "The ModelSpec (as a JSON object) of a model trained from scratch.", label="Model spec")
    base_model: str = _f("", "Start from this model instead of a fresh ModelSpec: a run of ours (its newest good "
                         "checkpoint), a checkpoint, an export or a local Hugging Face folder. Never modified.",
                         label="Base model")
    dataset: str = _f("", "Path of the prepared dataset folder (holds manifest.json); pretraining only.",
                      label="Dataset")
    objective: str = _f("causal_lm", "Training method: causal_lm (pretraining), sft (supervised fine-tuning on "
                        "chats or instructions) or dpo (preference optimisation).", choices=OBJECTIVES,
                        label="Method")
    train: dict = _f({}, "The TrainSpec (as a JSON object).", label="Training settings")
    seed: int = _f(1337, "Seed of initialisation, data order and dropout: same seed, same run on CPU.",
                   label="Seed", minimum=0)
    format_version: int = _f(1, "Version of this file's layout.", label="File format version")
    data: list = _f([], "Fine-tuning data files (chat, ShareGPT or Alpaca JSONL for sft; preference JSONL for dpo).",
                    label="Data files", widget="files")
    adapter: dict = _f({}, "The AdapterSpec (as a JSON object): full fine-tuning, LoRA or QLoRA.", label="Adapter")
    method_options: dict = _f({}, "Options of the method (method_options.py: SFTOptions, DPOOptions, GRPOOptions, "
                              "SelfPlayOptions), as a JSON "
                              "object; unset options take their defaults.", label="Method options")
    base_model_sha256: str = _f("", "Checksum of the base model's weights, recorded when the run starts: a run "
                                "refuses to resume on a base that changed.", label="Base model checksum")
    distributed: dict = _f({}, "The DistributedSpec (as a JSON object): DDP or FSDP when launched by torchrun.",
                           label="Distributed settings")
    columns: dict = _f({}, "Which column of a table data file (CSV, Parquet, a datasets folder) plays which part, e.g. "
                       "{\"instruction\": \"q\", \"output\": \"a\"}; empty: guessed from common column names.",
                       label="Column mapping", hidden=True)

    def model_spec(self) -> ModelSpec:
        return ModelSpec.from_dict(self.model)

    def train_spec(self) -> TrainSpec:
        return TrainSpec.from_dict(self.train)

    def adapter_spec(self) -> AdapterSpec:
        return AdapterSpec.from_dict(self.adapter)

    def distributed_spec(self) -> DistributedSpec:
        return DistributedSpec.from_dict(self.distributed)

    def options(self) -> Any:
        """The typed method options (method_options.py; None for causal_lm, which has none)."""
        return method_options(self.objective, self.method_options)

    @property
    def is_finetune(self) -> bool:
        return self.objective in FINETUNE_OBJECTIVES

    @property
    def is_rl(self) -> bool:
        return self.objective in RL_OBJECTIVES

    def validate(self) -> list[str]:
        p: list[str] = []
        if self.model and self.base_model:
            p.append("give either a model spec (train from scratch) or a base model, not both")
        if not self.model and not self.base_model:
            p.append("a run needs either a model spec or a base model")
        if self.model:
            p += _nested_problems("model", lambda: self.model_spec().validate())
        p += _nested_problems("train", lambda: self.train_spec().validate())
        check_choice(p, "objective", self.objective, OBJECTIVES)
        p += self._method_problems()
        p += _nested_problems("adapter", self._adapter_problems)
        if self.objective in OBJECTIVES:
            try:
                options = self.options()
                if options is not None:
                    p += [f"method_options: {m}" for m in options.validate()]
            except SpecError as exc:
                p += [m if m.startswith("method_options") else f"method_options: {m}" for m in exc.problems]
        p += _nested_problems("distributed", lambda: self.distributed_spec().validate())
        p += columns_problems(self.columns)
        sha = self.base_model_sha256
        if sha and (not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha)):
            p.append("base_model_sha256 must be 64 lowercase hex digits (or empty)")
        return p

    def _method_problems(self) -> list[str]:
        """What the objective needs and the config lacks: a base model, data files (or none), a dataset."""
        p: list[str] = []
        if self.objective in RL_OBJECTIVES:
            if not self.base_model:
                p.append(f"the {self.objective} method improves a base model: set base_model (a run, checkpoint, "
                         "export or Hugging Face folder)")
            if self.objective == "grpo" and not (self.data or (isinstance(self.method_options, dict)
                                                              and self.method_options.get("prompts"))):
                p.append("data is not set: give the prompt files (JSONL with a \"prompt\" per line) for grpo")
            if self.objective == "selfplay" and self.data:
                p.append("selfplay makes its own tasks: it takes no data files")
            if not isinstance(self.method_options, dict):
                p.append("method_options must be a JSON object")
        elif self.objective in FINETUNE_OBJECTIVES:
            if not self.base_model:
                p.append(f"the {self.objective} method fine-tunes a base model: set base_model (a run, checkpoint, "
                         "export or Hugging Face folder)")
            if not isinstance(self.data, list) or not self.data or not all(isinstance(d, str) and d
                                                                           for d in self.data):
                what = "preference" if self.objective == "dpo" else "chat, ShareGPT or Alpaca"
                p.append(f"data is not set: give the {what} files (JSONL) to fine-tune on")
        elif not self.dataset:
            p.append("dataset is not set: prepare a dataset first")
        elif self.data:
            p.append(f"data files are for fine-tuning methods ({', '.join(FINETUNE_OBJECTIVES)}); pretraining "
                     "reads the prepared dataset")
        return p

    def _adapter_problems(self) -> list[str]:
        adapter = self.adapter_spec()
        p = list(adapter.validate())
        if adapter.kind != "none" and not self.base_model:
            p.append(f"{adapter.kind} trains adapters on a base model: set base_model")
        return p

    def save(self, path: str | Path) -> None:
        save_json(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(load_json(path))


def _nested_problems(name: str, validate: Callable[[], list[str]]) -> list[str]:
    """A nested spec's problems (`validate` parses and checks it), each prefixed with the spec's name."""
    try:
        return [f"{name}: {m}" for m in validate()]
    except SpecError as exc:
        return [f"{name}: {m}" for m in exc.problems]
