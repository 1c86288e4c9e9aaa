"""A GGUF file as untrusted input: read its header with bounds checks before anything else touches it.

A GGUF file (llama.cpp's format; Ollama's blobs and LM Studio's downloads are GGUF) is: magic "GGUF", a version,
a tensor count and a metadata count; the metadata (key, typed value; strings and arrays carry their own lengths);
the tensor table (name, dims, type, offset); then the aligned tensor data. Every count and length in it is a
claim. `read_header` checks each one against the bytes the file really has and against sane limits *before*
reading or allocating anything of that size, so a truncated file, a header that claims a billion tensors, a
metadata string of gigabytes or a tensor pointing past the end is refused with one clear line. Only after it
passed is the file handed to the `gguf` package / transformers' GGUF loader (model/loading.py), which
dequantize it. Nothing in a GGUF is executed: its chat template is a string, rendered later in the sandboxed
Jinja environment transformers uses.

`check_loadable` then says whether this app can use it (architecture, tensor types), naming what is supported.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from desktop_app.engine.errors import UserError

MAGIC = b"GGUF"
# Limits far above any real model (Llama-3-405B: ~1,100 tensors, ~40 metadata keys, 128k-token arrays).
MAX_TENSORS = 1 << 16
MAX_KV = 1 << 16
MAX_STRING = 16 << 20  # one metadata string (a chat template is a few KB)
MAX_KEY = 1 << 16
MAX_ARRAY = 1 << 24  # elements in one metadata array (vocabularies are <= ~260k)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ELEMENTS = 1 << 40
KEEP_STRING = 1 << 20  # metadata strings longer than this are checked and skipped, not kept

# GGUF value types: (struct format, size) for the fixed-size ones; 8 = string, 9 = array.
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
            7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9

# llama.cpp architecture -> transformers model_type, for the families transformers' GGUF loader reads and this
# app fine-tunes (causal LMs; no mixture-of-experts, encoders or state-space models).
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
                 "gemma2": "gemma2", "gemma3": "gemma3_text", "gpt2": "gpt2", "starcoder2": "starcoder2",
                 "stablelm": "stablelm"}
# Tensor types transformers dequantizes (through gguf's NumPy quantizers).
LOADABLE_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                  "Q6_K")


@dataclass(frozen=True)
class ArrayValue:
    """A metadata array, by element type and length (its contents are not kept)."""

    element_type: int
    count: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGML order (fastest-varying first)
    type_name: str  # F32, F16, Q4_K, ...
    offset: int  # absolute, in the file
    nbytes: int


@dataclass
class GGUFInfo:
    """What a GGUF file's header says, every claim checked against the file."""

    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any]  # scalars and strings (strings over KEEP_STRING dropped); arrays as ArrayValue
    tensors: list[TensorInfo] = field(default_factory=list)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def name(self) -> str:
        value = self.metadata.get("general.name")
        return value if isinstance(value, str) and value else self.path.stem

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) and value else None

    @property
    def parameters(self) -> int:
        total = 0
        for t in self.tensors:
            n = 1
            for d in t.shape:
                n *= d
            total += n
        return total

    @property
    def tensor_types(self) -> dict[str, int]:
        """How many tensors of each type."""
        counts: dict[str, int] = {}
        for t in self.tensors:
            counts[t.type_name] = counts.get(t.type_name, 0) + 1
        return counts

    @property
    def quantization(self) -> str:
        """The file's weight type in words (general.file_type, else the most common matrix type)."""
        import gguf

        file_type = self.metadata.get("general.file_type")
        if isinstance(file_type, int):
            try:
                return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
            except ValueError:
                pass
        matrices = [t.type_name for t in self.tensors if len(t.shape) > 1]
        return max(set(matrices), key=matrices.count) if matrices else "?"


class _Reader:
    """Reads a file front to back; every read is checked against the bytes left."""

    def __init__(self, fh: BinaryIO, size: int, what: str) -> None:
        self.fh, self.size, self.what, self.pos = fh, size, what, 0

    def need(self, n: int, claim: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise UserError(f"{self.what} is truncated or damaged: {claim} needs {n:,} bytes at offset {self.pos:,} "
                            f"but the file has {self.size:,} bytes")

    def read(self, n: int, claim: str) -> bytes:
        self.need(n, claim)
        data = self.fh.read(n)
        if len(data) != n:
            raise UserError(f"{self.what} is truncated: could not read {claim}")
        self.pos += n
        return data

    def skip(self, n: int, claim: str) -> None:
        self.need(n, claim)
        self.fh.seek(n, 1)
        self.pos += n

    def scalar(self, fmt: str, size: int, claim: str) -> Any:
        return struct.unpack(fmt, self.read(size, claim))[0]

    def u32(self, claim: str) -> int:
        return int(self.scalar("<I", 4, claim))

    def u64(self, claim: str) -> int:
        return int(self.scalar("<Q", 8, claim))

    def string(self, claim: str, limit: int, keep: bool = True) -> str | None:
        length = self.u64(f"the length of {claim}")
        if length > limit:
            raise UserError(f"{self.what} claims {claim} of {length:,} bytes (the limit is {limit:,}): refused as "
                            "damaged or hostile")
        self.need(length, claim)
        if not keep or length > KEEP_STRING:
            self.skip(length, claim)
            return None
        try:
            return self.read(length, claim).decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{self.what}: {claim} is not valid UTF-8") from None


def _value(r: _Reader, vtype: int, key: str, depth: int = 0) -> Any:
    if vtype in _SCALARS:
        fmt, size = _SCALARS[vtype]
        return r.scalar(fmt, size, f"the value of {key!r}")
    if vtype == _STRING:
        return r.string(f"the string value of {key!r}", MAX_STRING)
    if vtype == _ARRAY:
        if depth > 1:
            raise UserError(f"{r.what}: metadata {key!r} nests arrays too deeply")
        element = r.u32(f"the element type of {key!r}")
        count = r.u64(f"the length of {key!r}")
        if count > MAX_ARRAY:
            raise UserError(f"{r.what} claims {count:,} elements in metadata {key!r} (the limit is {MAX_ARRAY:,}): "
                            "refused as damaged or hostile")
        if element in _SCALARS:
            r.skip(count * _SCALARS[element][1], f"the {count:,} elements of {key!r}")
        elif element == _STRING:
            r.need(count * 8, f"the {count:,} strings of {key!r}")  # each has at least its 8-byte length
            for _ in range(count):
                r.string(f"an element of {key!r}", MAX_STRING, keep=False)
        elif element == _ARRAY:
            r.need(count * 12, f"the {count:,} arrays of {key!r}")
            for _ in range(count):
                _value(r, _ARRAY, key, depth + 1)
        else:
            raise UserError(f"{r.what}: metadata {key!r} has an unknown element type {element}")
        return ArrayValue(element, count)
    raise UserError(f"{r.what}: metadata {key!r} has an unknown value type {vtype}")


def is_gguf_file(path: str | Path) -> bool:
    """A regular file that starts with the GGUF magic (Ollama's blobs have no .gguf suffix)."""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        with open(p, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return False


def read_header(path: str | Path) -> GGUFInfo:
    """The checked header of a GGUF file; UserError naming the first claim the file does not back."""
    p = Path(path)
    try:
        size = p.stat().st_size
        fh = open(p, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UserError(f"cannot read {p}: {exc.strerror or exc}") from None
    with fh:
        r = _Reader(fh, size, f"the GGUF file {p}")
        magic = fh.read(4)
        r.pos = len(magic)
        if magic != MAGIC:
            raise UserError(f"{p} is not a GGUF file (it does not start with 'GGUF')")
        version, n_tensors, n_kv = _counts(r)
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = r.string("a metadata key", MAX_KEY) or ""
            metadata[key] = _value(r, r.u32(f"the type of {key!r}"), key)
        alignment = _alignment(r, metadata)
        names: set[str] = set()
        raw = [_tensor_entry(r, k, names, alignment) for k in range(n_tensors)]
        tensors = _placed(r, raw, alignment)
    return GGUFInfo(p, version, size, metadata, tensors)


def _counts(r: _Reader) -> tuple[int, int, int]:
    """(version, tensor count, metadata count), each within limits and backed by the bytes left."""
    version = r.u32("the version")
    if version not in (2, 3):
        raise UserError(f"{r.what} has GGUF version {version}; versions 2 and 3 are supported")
    n_tensors, n_kv = r.u64("the tensor count"), r.u64("the metadata count")
    if n_tensors > MAX_TENSORS:
        raise UserError(f"{r.what} claims {n_tensors:,} tensors (the limit is {MAX_TENSORS:,}): refused as "
                        "damaged or hostile")
    if n_kv > MAX_KV:
        raise UserError(f"{r.what} claims {n_kv:,} metadata entries (the limit is {MAX_KV:,}): refused as "
                        "damaged or hostile")
    r.need(n_kv * 12 + n_tensors * 24, f"{n_kv:,} metadata entries and {n_tensors:,} tensors")
    return version, n_tensors, n_kv


def _alignment(r: _Reader, metadata: dict[str, Any]) -> int:
    import gguf

    alignment = metadata.get("general.alignment", gguf.GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 20:
        raise UserError(f"{r.what} has an invalid alignment {alignment!r}")
    return alignment


def _tensor_entry(r: _Reader, k: int, names: set[str], alignment: int) -> tuple[str, tuple[int, ...], str, int, int]:
    """Tensor k of the table: (name, shape, type name, offset in the data, bytes), every claim checked."""
    import gguf

    what = r.what
    name = r.string(f"the name of tensor {k}", MAX_KEY) or ""
    if name in names:
        raise UserError(f"{what} has two tensors named {name!r}")
    names.add(name)
    n_dims = r.u32(f"the rank of tensor {name!r}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise UserError(f"{what}: tensor {name!r} claims {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    shape = tuple(r.u64(f"a dimension of tensor {name!r}") for _ in range(n_dims))
    elements = 1
    for d in shape:
        elements *= d
        if elements > MAX_ELEMENTS:
            raise UserError(f"{what}: tensor {name!r} claims the shape {shape}, beyond any real model")
    type_id = r.u32(f"the type of tensor {name!r}")
    try:
        qtype = gguf.GGMLQuantizationType(type_id)
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise UserError(f"{what}: tensor {name!r} has an unknown type {type_id}") from None
    if shape[0] % block:
        raise UserError(f"{what}: tensor {name!r} of type {qtype.name} has rows of {shape[0]} values, not a "
                        f"multiple of its block of {block}")
    offset = r.u64(f"the offset of tensor {name!r}")
    if offset % alignment:
        raise UserError(f"{what}: tensor {name!r} starts at offset {offset}, not aligned to {alignment}")
    return name, shape, qtype.name, offset, elements // block * type_size


def _placed(r: _Reader, raw: list[tuple[str, tuple[int, ...], str, int, int]], alignment: int) -> list[TensorInfo]:
    """The tensors at their absolute offsets (the data starts at the next aligned byte after the header), each
    within the file."""
    data_start = -(-r.pos // alignment) * alignment
    tensors = []
    for name, shape, type_name, offset, nbytes in raw:
        if data_start + offset + nbytes > r.size:
            raise UserError(f"{r.what} is truncated or damaged: tensor {name!r} ({nbytes:,} bytes at "
                            f"{data_start + offset:,}) reaches past the end of the file ({r.size:,} bytes)")
        tensors.append(TensorInfo(name, shape, type_name, data_start + offset, nbytes))
    return tensors


def model_type_of(info: GGUFInfo) -> str:
    """The transformers model_type of a GGUF's architecture; UserError naming the supported ones."""
    arch = info.architecture  # a Mistral is filed under llama by llama.cpp, and loaded as llama here
    if arch not in ARCHITECTURES:
        raise UserError(f"{info.path.name}: GGUF architecture {arch or '(none)'!r} is not supported; supported: "
                        f"{', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[arch]


def check_loadable(info: GGUFInfo) -> str:
    """The model_type of a GGUF this app can load (architecture and every tensor type supported), else UserError."""
    model_type = model_type_of(info)
    if not info.tensors:
        raise UserError(f"{info.path.name} holds no tensors: it is not a model")
    unsupported = sorted({t.type_name for t in info.tensors} - set(LOADABLE_TYPES))
    if unsupported:
        raise UserError(f"{info.path.name} uses the tensor type(s) {', '.join(unsupported)}, which cannot be "
                        f"dequantized here; supported: {', '.join(LOADABLE_TYPES)}")
    if "tokenizer.ggml.model" not in info.metadata:
        raise UserError(f"{info.path.name} has no tokenizer in its metadata (tokenizer.ggml.model): a model cannot "
                        "generate text without the tokenizer it was trained with")
    return model_type
