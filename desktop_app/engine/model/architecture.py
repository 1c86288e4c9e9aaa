"""ModelSpec -> a real PyTorch model that *is* a Hugging Face model (lossless export by construction).

We use transformers' own classes (LlamaForCausalLM, GPT2LMHeadModel) instead of a hand-written GPT:
on this CPU they train at the same speed, and every weight already carries its Hugging Face name, so
a checkpoint folder is a loadable HF folder and export is a copy. Sizing (parameter count, memory,
FLOPs) lives in sizing.py, which needs no torch.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import ModelSpec, SpecError

if TYPE_CHECKING:  # heavy imports only for type checkers; callers pay for torch only when they build
    from transformers import PretrainedConfig, PreTrainedModel

# Token-id contract shared with tokenization.py: special tokens are added first, in this order.
PAD_TOKEN_ID = 0
BOS_TOKEN_ID = 1
EOS_TOKEN_ID = 2

_DEFAULT_ROPE_THETA = ModelSpec().rope_theta

# Vocabulary sizes of models trained from scratch are rounded up to this: the output projection is the largest
# matmul of a small model, and a GPU runs it on its fast kernels only when the size is a multiple of 64 (measured on
# an H100: gpt2-small with 50257 tokens spent ~30 ms a step in fallback kernels; 50304 trained 28% faster). The
# extra rows are never a target, so training pushes their logits down; the tokenizer keeps its real size, and exports
# carry the padded matrices (the GGUF writer names the extra ids as unused tokens).
VOCAB_MULTIPLE = 64


def padded_vocab(tokens: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """`tokens` rounded up to a multiple of `multiple` (the model's vocab_size for a tokenizer of that size)."""
    return -(-int(tokens) // multiple) * multiple


def hf_config(spec: ModelSpec, *, pad_token_id: int | None = PAD_TOKEN_ID, bos_token_id: int | None = BOS_TOKEN_ID,
              eos_token_id: int | None = EOS_TOKEN_ID) -> PretrainedConfig:
    """The transformers config (LlamaConfig / GPT2Config) equivalent to `spec` (which must be valid)."""
    spec.check()
    ids = {"pad_token_id": pad_token_id, "bos_token_id": bos_token_id, "eos_token_id": eos_token_id}
    if spec.family == "llama":
        from transformers import LlamaConfig

        # HF's Llama has dropout only on the attention probabilities (no residual/embedding dropout).
        config = LlamaConfig(
            vocab_size=spec.vocab_size, hidden_size=spec.d_model, intermediate_size=spec.ffn_dim,
            num_hidden_layers=spec.n_layers, num_attention_heads=spec.n_heads,
            num_key_value_heads=spec.n_kv_heads, head_dim=spec.head_dim, hidden_act="silu",
            max_position_embeddings=spec.context_length, initializer_range=spec.init_std,
            rms_norm_eps=spec.norm_eps, tie_word_embeddings=spec.tie_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": float(spec.rope_theta)},
            attention_bias=False, mlp_bias=False, attention_dropout=spec.dropout, use_cache=True, **ids)
    else:
        from transformers import GPT2Config

        config = GPT2Config(
            vocab_size=spec.vocab_size, n_positions=spec.context_length, n_embd=spec.d_model,
            n_layer=spec.n_layers, n_head=spec.n_heads, n_inner=spec.ffn_dim, activation_function="gelu_new",
            resid_pdrop=spec.dropout, embd_pdrop=spec.dropout, attn_pdrop=spec.dropout,
            layer_norm_epsilon=spec.norm_eps, initializer_range=spec.init_std,
            tie_word_embeddings=spec.tie_embeddings, use_cache=True, **ids)
    config.architectures = ["LlamaForCausalLM" if spec.family == "llama" else "GPT2LMHeadModel"]
    return config


def _get(config: Any, key: str, default: Any = None) -> Any:
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def spec_from_hf_config(config: PretrainedConfig | dict[str, Any]) -> ModelSpec:
    """The ModelSpec of a llama or gpt2 transformers config (object or config.json dict).

    Raises UserError for other architectures or for llama variants a ModelSpec cannot describe
    (biases, rope scaling, a head size other than d_model / n_heads), naming each feature.
    """
    model_type = _get(config, "model_type")
    if model_type == "llama":
        d, heads = _get(config, "hidden_size"), _get(config, "num_attention_heads")
        unsupported = []
        if _get(config, "attention_bias") or _get(config, "mlp_bias"):
            unsupported.append("linear-layer biases")
        head_dim = _get(config, "head_dim")
        if head_dim is not None and d and heads and head_dim != d // heads:
            unsupported.append(f"head_dim {head_dim} != hidden_size / heads")
        rope = _get(config, "rope_parameters") or _get(config, "rope_scaling") or {}
        if isinstance(rope, dict) and rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            unsupported.append(f"rope scaling {rope.get('rope_type', rope.get('type'))!r}")
        if _get(config, "hidden_act", "silu") != "silu":
            unsupported.append(f"activation {_get(config, 'hidden_act')!r}")
        if unsupported:
            raise UserError("this llama model uses features the model designer cannot describe: "
                            + ", ".join(unsupported))
        theta = (rope.get("rope_theta") if isinstance(rope, dict) else None) or _get(config, "rope_theta")
        spec = ModelSpec(
            family="llama", vocab_size=_get(config, "vocab_size"), d_model=d,
            n_layers=_get(config, "num_hidden_layers"), n_heads=heads,
            n_kv_heads=_get(config, "num_key_value_heads") or heads, ffn_dim=_get(config, "intermediate_size"),
            context_length=_get(config, "max_position_embeddings"),
            dropout=float(_get(config, "attention_dropout", 0.0) or 0.0),
            rope_theta=float(theta or _DEFAULT_ROPE_THETA),
            tie_embeddings=bool(_get(config, "tie_word_embeddings", False)),
            norm_eps=float(_get(config, "rms_norm_eps", 1e-6)),
            init_std=float(_get(config, "initializer_range", 0.02)))
    elif model_type == "gpt2":
        d = _get(config, "n_embd")
        act = _get(config, "activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
            raise UserError(f"this gpt2 model uses activation {act!r}, which the model designer cannot describe")
        spec = ModelSpec(
            family="gpt2", vocab_size=_get(config, "vocab_size"), d_model=d, n_layers=_get(config, "n_layer"),
            n_heads=_get(config, "n_head"), n_kv_heads=_get(config, "n_head"),
            ffn_dim=_get(config, "n_inner") or 4 * d, context_length=_get(config, "n_positions"),
            dropout=float(_get(config, "resid_pdrop", 0.0) or 0.0), rope_theta=_DEFAULT_ROPE_THETA,
            tie_embeddings=bool(_get(config, "tie_word_embeddings", True)),
            norm_eps=float(_get(config, "layer_norm_epsilon", 1e-5)),
            init_std=float(_get(config, "initializer_range", 0.02)))
    else:
        raise UserError(f"model type {model_type!r} is not supported by the model designer (llama or gpt2 only)")
    problems = spec.validate()
    if problems:
        raise SpecError(problems)
    return spec


def model_spec_from_folder(path: str | Path) -> ModelSpec:
    """The ModelSpec of a model folder (checkpoint, export or HF folder), read from its config.json."""
    folder = Path(path)
    config_path = folder / "config.json" if folder.is_dir() else folder
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{folder} has no config.json: not a model folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{config_path} is not a readable JSON config: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{config_path} must hold a JSON object")
    return spec_from_hf_config(data)


def _init_weights(model: PreTrainedModel, spec: ModelSpec) -> None:
    """Normal(0, init_std) for matrices and embeddings, ones/zeros for norms and biases, and the GPT-2
    scaled init (std / sqrt(2 * n_layers)) for the projections that write into the residual stream,
    so the residual's variance does not grow with depth. Done here, not by transformers, so both
    families get the same scheme and a seed fully determines the weights."""
    import torch

    std = spec.init_std
    residual_std = std / math.sqrt(2 * spec.n_layers)
    residual_suffixes = ("o_proj.weight", "down_proj.weight", "attn.c_proj.weight", "mlp.c_proj.weight")
    with torch.no_grad():
        for name, param in model.named_parameters():  # tied weights appear once
            if "norm" in name or ".ln_" in name or name.startswith("transformer.ln_f"):
                if name.endswith("bias"):
                    param.zero_()
                else:
                    param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            elif name.endswith(residual_suffixes):
                param.normal_(0.0, residual_std)
            else:
                param.normal_(0.0, std)


def is_plain_llama(model: Any) -> bool:
    """True for a transformers llama causal LM with standard layers: silu MLP, plain nn.Linear projections
    (not LoRA or quantised wrappers), no tensor-parallel split. The lean decoder (generation.py) and the
    fused training forward (fused_llama.py) cover exactly these."""
    import torch

    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) != "llama" or getattr(cfg, "hidden_act", "silu") != "silu":
        return False
    if (getattr(cfg, "pretraining_tp", 1) or 1) > 1:
        return False
    core = getattr(model, "model", None)
    layers = getattr(core, "layers", None)
    if not layers or not hasattr(core, "rotary_emb") or not hasattr(model, "lm_head"):
        return False
    linear = torch.nn.Linear
    attn, mlp = layers[0].self_attn, layers[0].mlp
    return all(type(m) is linear for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj,
                                           mlp.up_proj, mlp.down_proj, model.lm_head))


def build_model(spec: ModelSpec, *, seed: int | None = None, pad_token_id: int | None = PAD_TOKEN_ID,
                bos_token_id: int | None = BOS_TOKEN_ID, eos_token_id: int | None = EOS_TOKEN_ID) -> PreTrainedModel:
    """A freshly initialised LlamaForCausalLM / GPT2LMHeadModel (fp32, SDPA attention, training mode off).

    The same spec and seed give bit-identical weights. seed=None uses torch's global generator.
    """
    import torch

    config = hf_config(spec, pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    config._attn_implementation = "sdpa"
    if spec.family == "llama":
        from transformers import LlamaForCausalLM as cls
    else:
        from transformers import GPT2LMHeadModel as cls
    # fork_rng keeps a seeded build from disturbing the caller's random stream.
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        model = cls(config)
        _init_weights(model, spec)
    if spec.tie_embeddings:
        model.tie_weights()
    model.eval()
    return model
