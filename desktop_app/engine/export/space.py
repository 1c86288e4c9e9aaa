"""How much disk an export takes, known before the first byte (torch-free): the weights' size in the format written,
plus what the temporary files need at the same time (a zip is built from a whole temporary folder; a llama.cpp
quantization reads our f32/f16 GGUF while it writes the small one).
"""

from __future__ import annotations

from pathlib import Path

from desktop_app.engine.os_faults import check_free_space

# bytes per weight of each GGUF type; llama.cpp's k-quants mix types per tensor: their measured averages
# (Q4_K_M ~4.9 bits, Q5_K_M ~5.7, Q6_K ~6.6 bits per weight, llama.cpp's quantize README)
GGUF_BYTES_PER_WEIGHT = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32,
                         "q4_k_m": 4.9 / 8, "q5_k_m": 5.7 / 8, "q6_k": 6.6 / 8}
HF_BYTES_PER_WEIGHT = 4  # the model is saved as loaded for export: fp32
TEXT_FILES = 8 << 20  # tokenizer, configs, model card, Modelfile, GGUF metadata: a few MB at most
BIG_MODEL = 1e9  # above this many weights the file llama.cpp quantizes from is f16, not f32 (gguf export)


def export_bytes(weights: int, fmt: str, gguf_type: str = "f16") -> int:
    """About how many bytes exporting a model of `weights` parameters as `fmt` ("hf", "zip", "gguf") occupies at its
    largest (the output and the temporaries that exist beside it)."""
    if fmt == "gguf":
        total = weights * GGUF_BYTES_PER_WEIGHT[gguf_type]
        if gguf_type in ("q4_k_m", "q5_k_m", "q6_k"):  # our f32/f16 file exists while llama.cpp writes
            total += weights * (2.0 if weights >= BIG_MODEL else 4.0)
        return int(total) + TEXT_FILES
    folder = weights * HF_BYTES_PER_WEIGHT + TEXT_FILES
    return folder * 2 if fmt == "zip" else folder  # the zip is written while its folder still exists


def check_export_space(folder: Path, weights: int, fmt: str, gguf_type: str = "f16") -> None:
    """Refuse an export into `folder` before writing when its disk has less free than export_bytes (NotEnoughSpace:
    one line naming the folder, what is needed and what is free)."""
    what = f"the {gguf_type.upper()} GGUF export" if fmt == "gguf" else (
        "the zipped export" if fmt == "zip" else "the Hugging Face folder export")
    check_free_space(folder, export_bytes(weights, fmt, gguf_type), what)
