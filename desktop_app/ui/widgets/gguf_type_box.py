"""The GGUF type of a window export (Library → Export as GGUF): the engine's types in words, each saying its size and
what writes it; llama.cpp's k-quants need its quantizer (the [llamacpp] extra) and say so where it is missing."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox

from desktop_app.engine.export.gguf_quantize import INSTALL_HINT, LLAMA_CPP_TYPES, llama_cpp_available

WORDS = {"f32": "f32 (full precision, largest)", "f16": "f16 (half precision)", "bf16": "bf16 (half precision)",
         "q8_0": "q8_0 (8-bit, about half of f16)", "q4_k_m": "q4_k_m (4-bit, the usual choice for chat)",
         "q5_k_m": "q5_k_m (5-bit)", "q6_k": "q6_k (6-bit)"}
DEFAULT = "f16"  # the engine's own default (ExportSettings.gguf_type)


def gguf_type_box(types: tuple[str, ...]) -> QComboBox:
    """A combo of the GGUF types `types` (the engine's), f16 chosen; llama.cpp's types greyed out, with the
    install command in their tooltip, when its quantizer is not installed."""
    box = QComboBox()
    box.setObjectName("ggufTypeBox")
    box.setToolTip("What the GGUF file holds: full or half precision, or quantized (smaller, a little less exact)")
    quantizer = llama_cpp_available()
    model = box.model()
    for name in types:
        box.addItem(WORDS.get(name, name), name)
        if name in LLAMA_CPP_TYPES and not quantizer and isinstance(model, QStandardItemModel):
            item = model.item(box.count() - 1)
            item.setEnabled(False)
            item.setText(f"{WORDS.get(name, name)}: needs llama.cpp's quantizer")
            item.setData(f"needs llama.cpp's quantizer: {INSTALL_HINT}", Qt.ItemDataRole.ToolTipRole)
    box.setCurrentIndex(max(0, box.findData(DEFAULT)))
    return box
