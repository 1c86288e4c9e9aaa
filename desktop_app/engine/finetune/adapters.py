"""LoRA / QLoRA adapters with peft: which layers get them, wrapping, and their state in PEFT's own format.

Only adapter weights train; the base tensors are frozen and never written (a test checks them bit for
bit). A checkpoint of an adapter run holds `adapter_config.json` + `adapter_model.safetensors` exactly as
`PeftModel.save_pretrained` writes them, so `PeftModel.from_pretrained(base, folder)` loads it.

Default target modules: every linear projection of the family (attention and MLP; never the output
layer), found by looking at the model rather than from a table, so any family transformers loads works:
llama/mistral/qwen2/gemma -> q,k,v,o,gate,up,down_proj; gpt2 -> c_attn, c_proj, c_fc (Conv1D);
phi3 -> qkv_proj, o_proj, gate_up_proj, down_proj.

When `ensure_chat_tokens` had to add tokens, the new embedding rows (mean of the old ones) would stay
frozen under LoRA; they are made trainable with peft's `trainable_token_indices` (only those rows train;
peft then saves the resized embedding with the adapter).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.model import families
from desktop_app.engine.model.folders import adapter_base_path, is_adapter_folder
from desktop_app.engine.run_folder import CheckpointError, is_run_folder, list_committed, read_json

if TYPE_CHECKING:
    from desktop_app.engine.protocols import CausalLM


def family_targets(path: str | Path) -> list[str]:
    """The linear layers LoRA can target in the model at `path` (a run, checkpoint, export, adapter or HF folder), by
    its family (config.json's model_type, from the family table), without loading or hashing anything; [] when
    unknown."""

    folder = Path(path).expanduser()
    if is_run_folder(folder):
        committed = list_committed(folder)
        if not committed:
            return []
        folder = committed[-1]
    if is_adapter_folder(folder):
        try:
            return family_targets(adapter_base_path(folder))
        except UserError:
            return []
    config = read_json(folder / "config.json")
    family = families.family_of(config.get("model_type") if isinstance(config, dict) else None)
    return list(family.lora_targets) if family is not None else []


def is_peft_model(model: CausalLM) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _linear_types() -> tuple[type, ...]:
    import torch
    from transformers.pytorch_utils import Conv1D

    types: list[type] = [torch.nn.Linear, Conv1D]
    try:
        import bitsandbytes as bnb

        types += [bnb.nn.Linear4bit, bnb.nn.Linear8bitLt]
    except ImportError:  # pragma: no cover - bitsandbytes is a dependency
        pass
    return tuple(types)


def default_target_modules(model: CausalLM) -> list[str]:
    """Names (last component) of every linear projection inside the transformer blocks (not the output layer)."""
    out_layer = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    types = _linear_types()
    names: dict[str, None] = {}
    for full, module in model.named_modules():
        if module is out_layer or not isinstance(module, types):
            continue
        last = full.rsplit(".", 1)[-1]
        if last in ("lm_head", "score", "classifier"):
            continue
        names[last] = None
    if not names:
        raise UserError(f"found no linear layers to put LoRA adapters on in {type(model).__name__}")
    return sorted(names)


def apply_adapter(model: CausalLM, adapter: Any, *, seed: int, new_token_ids: list[int] | None = None,
                  quantized: bool = False, gradient_checkpointing: bool = False) -> tuple[Any, list[str]]:
    """Wrap `model` with LoRA adapters per `adapter` (an AdapterSpec). Returns (PeftModel, log lines).

    The adapters' random init is seeded with `seed` without moving the caller's RNG."""
    import torch
    from peft import LoraConfig, get_peft_model

    targets = list(adapter.target_modules) or default_target_modules(model)
    present = set()
    for full, _ in model.named_modules():
        present.add(full.rsplit(".", 1)[-1])
    unknown = [t for t in targets if t not in present]
    if unknown:
        raise UserError(f"adapter target module(s) {', '.join(unknown)} do not exist in this "
                        f"{getattr(model.config, 'model_type', 'model')} model; its linear layers are "
                        f"{', '.join(default_target_modules(model))}")
    if quantized:
        from peft import prepare_model_for_kbit_training

        keep_trainable_layout(model)

        # Casts the few non-quantized weights (norms) to fp32, freezes the base, and makes the input embeddings
        # produce gradients so checkpointed blocks still backpropagate into the adapters.
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing,
                                                gradient_checkpointing_kwargs={"use_reentrant": False})
    kwargs: dict[str, Any] = {}
    if new_token_ids:
        emb_name = _input_embedding_name(model)
        kwargs["trainable_token_indices"] = {emb_name: sorted(int(i) for i in new_token_ids)}
    is_conv1d = getattr(model.config, "model_type", "") == "gpt2"
    config = LoraConfig(r=int(adapter.rank), lora_alpha=float(adapter.alpha), lora_dropout=float(adapter.dropout),
                        target_modules=targets, bias="none", task_type="CAUSAL_LM", fan_in_fan_out=is_conv1d,
                        **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    if gradient_checkpointing and not quantized and hasattr(peft_model, "enable_input_require_grads"):
        peft_model.enable_input_require_grads()
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    notes = [f"{'QLoRA' if quantized else 'LoRA'} rank {adapter.rank}, alpha {adapter.alpha:g} on "
             f"{', '.join(targets)}: {trainable:,} trainable parameters of {total:,} "
             f"({100.0 * trainable / max(1, total):.2f}%)"]
    if new_token_ids:
        notes.append(f"the {len(new_token_ids)} added chat token embedding row(s) train too")
    return peft_model, notes


def keep_trainable_layout(model: CausalLM) -> None:
    """Keep bitsandbytes' 4-bit weights in the layout its autograd path understands.

    On a CPU with AVX512-BF16, bitsandbytes 0.50 repacks a 4-bit weight for fast inference the first time the
    layer runs in eval mode (our evaluations and samples); later training forwards then go through a kernel
    without a backward ("an autograd kernel was not registered"), so gradients through the frozen base would be
    wrong, and layers narrower than a 64-value block fail outright. Training never wants that layout."""
    try:
        import bitsandbytes as bnb
        from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse
    except ImportError:  # pragma: no cover
        return
    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False
            state = getattr(module.weight, "quant_state", None)
            if state is not None and getattr(state, "packing_format_for_cpu", False):
                module.weight.data, module.weight.quant_state = _convert_weight_packed_for_cpu_inverse(
                    module.weight.data, state)


def _input_embedding_name(model: Any) -> str:
    emb = model.get_input_embeddings()
    for name, module in model.named_modules():
        if module is emb:
            return name.rsplit(".", 1)[-1]
    return "embed_tokens"


def adapter_state(model: CausalLM, full_state: dict[str, Any] | None = None) -> dict[str, Any]:
    """The adapter's tensors under PEFT's saved names (what adapter_model.safetensors holds), on the CPU.
    full_state: the whole model's state when the model holds only a shard of it (FSDP)."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, state_dict=full_state, save_embedding_layers="auto")
    return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}


def save_adapter(model: CausalLM, folder: Path, state: dict[str, Any] | None = None) -> None:
    """adapter_config.json + adapter_model.safetensors (PEFT's own format and file names) into `folder`.
    state: the whole model's state when the model holds only a shard of it (FSDP)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "setting save_embedding_layers to True": intended when rows were added
        model.save_pretrained(str(folder), safe_serialization=True, state_dict=state)
    readme = folder / "README.md"  # peft's generated card names no data; the checkpoint's files say it all
    if readme.exists():
        readme.unlink()


def load_adapter_state(model: CausalLM, state: dict[str, Any]) -> None:
    """Put saved adapter tensors back into a PeftModel of the same configuration (exactly)."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    # With tied embeddings peft saves the output layer's copy of the trainable token rows too; it is the same
    # parameter as the input embedding's, which loading fills, so the tied copy shows as unexpected/missing.
    tied = bool(getattr(model.get_base_model().config, "tie_word_embeddings", False))

    def tied_copy(key: str) -> bool:
        return tied and ".token_adapter." in key and key.split(".token_adapter.", 1)[0].endswith("lm_head")

    unexpected = [k for k in getattr(result, "unexpected_keys", []) or [] if not tied_copy(k)]
    if unexpected:

        raise CheckpointError(f"the checkpoint's adapter does not fit this model (unexpected {unexpected[:5]}): "
                              "was the run's adapter configuration changed?")
    missing = [k for k in getattr(result, "missing_keys", []) or []
               if ("lora_" in k or "trainable_tokens" in k) and not tied_copy(k)]
    if missing:

        raise CheckpointError(f"the checkpoint's adapter lacks weights of this model ({missing[:5]})")


def base_state_snapshot(model: CausalLM) -> dict[str, Any]:
    """Copies of the frozen base tensors of a PeftModel (tests check they are unchanged after training)."""
    base = model.get_base_model() if is_peft_model(model) else model
    return {n: p.detach().clone() for n, p in base.named_parameters() if not p.requires_grad}
