"""The small GGUF types (Q4_K_M, Q5_K_M, Q6_K) through llama.cpp's own quantizer.

llama.cpp's k-quants choose a type per tensor (Q4_K_M keeps some tensors at Q6_K, falls back to Q5_0/Q8_0 for
rows not divisible by 256, ...), which only its quantizer does right, so we do not reimplement it: we write an
f32 (or, above ~1B parameters, f16) GGUF ourselves and call `llama_model_quantize` from llama-cpp-python, the
optional `[llamacpp]` extra (built from source; see docs/formats.md). Without it these types are refused with the
install line.
"""

from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

from desktop_app.engine.errors import UserError

LLAMA_CPP_TYPES = {"q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
                   "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K"}
WRITTEN_TYPES = ("f32", "f16", "bf16", "q8_0")  # what export/gguf.py writes itself
GGUF_TYPES = (*WRITTEN_TYPES, *LLAMA_CPP_TYPES)  # every type an export offers (CLI, window, server), in one place
INSTALL_HINT = ("pip install --no-binary llama-cpp-python 'llama-cpp-python==0.3.36' (builds llama.cpp from source: "
                "cmake and a C++ compiler, ~5 minutes on 2 cores), or pip install -e .[llamacpp]")


def llama_cpp_available() -> bool:
    """llama-cpp-python imports (its shared library loads)."""
    try:
        import llama_cpp  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def quantize(source: Path, out: Path, gguf_type: str, threads: int | None = None) -> None:
    """Quantize the GGUF `source` (f32/f16) to `out` as `gguf_type` (a key of LLAMA_CPP_TYPES) with llama.cpp."""
    if gguf_type not in LLAMA_CPP_TYPES:
        raise UserError(f"llama.cpp quantization types are {', '.join(LLAMA_CPP_TYPES)}, not {gguf_type!r}")
    try:
        import llama_cpp
    except (ImportError, OSError) as exc:
        raise UserError(f"GGUF type {gguf_type} is made by llama.cpp's quantizer, which is not installed ({exc}): "
                        f"{INSTALL_HINT}") from None
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, LLAMA_CPP_TYPES[gguf_type])
    params.nthread = int(threads or min(os.cpu_count() or 1, 8))
    # llama-cpp-python prints llama.cpp's log (a line per tensor here) when its logger lets that level through
    logger = logging.getLogger("llama-cpp-python")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), ctypes.byref(params))
    finally:
        logger.setLevel(level)
    if status != 0 or not out.is_file():
        raise UserError(f"llama.cpp could not quantize {source.name} to {gguf_type} (status {status})")
