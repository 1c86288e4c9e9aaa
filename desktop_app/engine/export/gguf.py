"""Write a llama-family model as GGUF (llama.cpp, LM Studio, Ollama) with the `gguf` package.

What llama.cpp expects, and why the conversion is not a plain copy:
- Tensor names follow gguf's naming (token_embd, blk.N.attn_q, ...), shapes are written reversed
  (GGML order), 1-D tensors (norms) stay f32 whatever the file type.
- llama.cpp's LLAMA architecture applies rotary embeddings to *adjacent* pairs (x0,x1),(x2,x3)...
  while Hugging Face rotates the two halves of each head (x_i, x_{i+hd/2}). The Q and K projection
  rows are therefore permuted per head (the same `permute` as llama.cpp's convert_hf_to_gguf.py), which
  makes both compute the same attention scores.
- A byte-level BPE tokenizer is stored as tokenizer.ggml.model "gpt2" with the GPT-2 pre-tokenizer,
  its tokens in id order (padded with unused tokens up to the model's vocab size), token types and
  merges, plus the bos/eos/pad/unk ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Progress

GGUF_TYPES = ("f32", "f16", "q8_0")
Q8_BLOCK = 32  # q8_0 quantizes rows in blocks of 32 values


def permute_for_rope(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF (rotate-half) Q/K rows -> llama.cpp (interleaved pairs) order, per head (n_head of this projection)."""
    return (weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
            .swapaxes(1, 2)
            .reshape(weight.shape))


def _tensor_name(hf_name: str) -> tuple[str, str] | None:
    """(gguf name, role) for a LlamaForCausalLM state-dict name; role tells q/k (to permute)."""
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf_name in fixed:
        return fixed[hf_name], ""
    parts = hf_name.split(".")
    if len(parts) < 5 or parts[:2] != ["model", "layers"]:
        return None
    i, rest = parts[2], ".".join(parts[3:])
    table = {
        "self_attn.q_proj.weight": ("attn_q", "q"), "self_attn.k_proj.weight": ("attn_k", "k"),
        "self_attn.v_proj.weight": ("attn_v", ""), "self_attn.o_proj.weight": ("attn_output", ""),
        "mlp.gate_proj.weight": ("ffn_gate", ""), "mlp.up_proj.weight": ("ffn_up", ""),
        "mlp.down_proj.weight": ("ffn_down", ""), "input_layernorm.weight": ("attn_norm", ""),
        "post_attention_layernorm.weight": ("ffn_norm", ""),
    }
    if rest not in table:
        return None
    name, role = table[rest]
    return f"blk.{i}.{name}.weight", role


def tokenizer_metadata(tokenizer_json: dict[str, Any], vocab_size: int, special_ids: dict[str, int | None]
                       ) -> dict[str, Any]:
    """tokens, token types, merges and pre-tokenizer of a byte-level BPE tokenizer.json (as a dict).

    Raises UserError for tokenizers llama.cpp's "gpt2" vocabulary cannot represent.
    """
    import gguf

    model = tokenizer_json.get("model") or {}
    pre = tokenizer_json.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        kind = f"{model.get('type', '?')} with pre-tokenizer {pre.get('type', 'none')}"
        raise UserError("GGUF export supports byte-level BPE tokenizers (the default 'byte-bpe'); this model's "
                        f"tokenizer is {kind}: export it as a Hugging Face folder instead")
    by_id: dict[int, str] = {int(i): t for t, i in model.get("vocab", {}).items()}
    added = {int(a["id"]): a for a in tokenizer_json.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if by_id and max(by_id) >= vocab_size:
        raise UserError(f"the tokenizer has ids up to {max(by_id)} but the model only has {vocab_size} "
                        "embedding rows: they do not belong together")
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(int(gguf.TokenType.CONTROL if added[i].get("special", True) else gguf.TokenType.USER_DEFINED))
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(int(gguf.TokenType.NORMAL))
        else:  # embedding rows no token uses (model vocab rounded up): llama.cpp needs one entry per row
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": "gpt-2", "special_ids": special_ids}


def _convert(array: np.ndarray, gguf_type: str) -> tuple[np.ndarray, Any]:
    """(data, raw_dtype) for one tensor; 1-D stays f32, rows not divisible by 32 fall back to f16 for q8_0."""
    import gguf

    if array.ndim == 1 or gguf_type == "f32":
        return array.astype(np.float32), None
    if gguf_type == "q8_0" and array.shape[-1] % Q8_BLOCK == 0:
        qtype = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(array.astype(np.float32), qtype), qtype
    return array.astype(np.float16), None


def write_gguf(
    state: dict[str, np.ndarray],
    config: dict[str, Any],
    tokenizer_json: dict[str, Any],
    out: Path,
    gguf_type: str = "f16",
    *,
    name: str = "model",
    special_ids: dict[str, int | None] | None = None,
    chat_template: str | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Event]:
    """Write `out` (a .gguf file) from a llama state dict (HF names, fp32 numpy) and its config.json dict.

    Yields Progress per tensor; returns early (writing nothing) when should_stop() turns true.
    The caller writes to a temporary path and renames (atomic for the user).
    """
    import gguf

    if gguf_type not in GGUF_TYPES:
        raise UserError(f"GGUF type must be one of {', '.join(GGUF_TYPES)}, got {gguf_type!r}")
    if config.get("model_type") != "llama":
        raise UserError(f"GGUF export supports llama-family models; this is a {config.get('model_type')!r} model: "
                        "export it as a Hugging Face folder (--format hf) or zip instead")
    from desktop_app.engine.model.architecture import spec_from_hf_config

    spec = spec_from_hf_config(config)  # refuses llama variants we cannot describe (biases, rope scaling)
    special_ids = special_ids or {}
    meta = tokenizer_metadata(tokenizer_json, spec.vocab_size, special_ids)

    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[gguf_type]
    writer = gguf.GGUFWriter(str(out), "llama")
    try:
        writer.add_name(name)
        writer.add_context_length(spec.context_length)
        writer.add_embedding_length(spec.d_model)
        writer.add_block_count(spec.n_layers)
        writer.add_feed_forward_length(spec.ffn_dim)
        writer.add_head_count(spec.n_heads)
        writer.add_head_count_kv(spec.n_kv_heads)
        writer.add_rope_freq_base(float(spec.rope_theta))
        writer.add_layer_norm_rms_eps(float(spec.norm_eps))
        writer.add_rope_dimension_count(spec.head_dim)
        writer.add_vocab_size(spec.vocab_size)
        writer.add_file_type(int(file_type))
        if gguf_type == "q8_0":
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(meta["pre"])
        writer.add_token_list(meta["tokens"])
        writer.add_token_types(meta["types"])
        writer.add_token_merges(meta["merges"])
        for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                          ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
            if special_ids.get(role) is not None:
                add(int(special_ids[role]))
        # Our tokenizers add no BOS/EOS when encoding; llama.cpp must tokenize prompts the same way.
        writer.add_add_bos_token(False)
        writer.add_add_eos_token(False)
        if chat_template:
            writer.add_chat_template(chat_template)

        names = [n for n in state if not (n == "lm_head.weight" and spec.tie_embeddings)]
        unknown = [n for n in names if _tensor_name(n) is None]
        if unknown:
            raise UserError(f"GGUF export does not know the tensors {', '.join(unknown[:5])}")
        for done, hf_name in enumerate(names):
            if should_stop():
                return
            gguf_name, role = _tensor_name(hf_name)  # type: ignore[misc]
            array = np.asarray(state[hf_name], dtype=np.float32)
            if role == "q":
                array = permute_for_rope(array, spec.n_heads)
            elif role == "k":
                array = permute_for_rope(array, spec.n_kv_heads)
            data, raw_dtype = _convert(array, gguf_type)
            if raw_dtype is None:
                writer.add_tensor(gguf_name, data)
            else:
                writer.add_tensor(gguf_name, data, raw_dtype=raw_dtype)
            yield Progress("convert", done + 1, len(names), "tensors", gguf_name)
        if should_stop():
            return
        yield Progress("write", 0, 1, "files", f"{name}.gguf")
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
        yield Progress("write", 1, 1, "files", f"{name}.gguf")
    finally:
        writer.close()


def read_tokenizer_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable tokenizer.json: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a tokenizer.json (not a JSON object)")
    return data
