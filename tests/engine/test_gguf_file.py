"""GGUF files in: the header is checked before anything large is read or allocated (truncated files, absurd
counts and sizes, tensors past the end, unsupported architectures and types: one clear line each), our own
exports load back as models and bases (same logits, tokenizer, chat template, the file's checksum recorded), and
Ollama's / LM Studio's stores are listed."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest
import torch
from gguf_helpers import HELD_OUT, byte_bpe, trained_folder

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.gguf_file import check_loadable, is_gguf_file, read_header

# --- hand-made headers ---------------------------------------------------------------------------------------

def _str(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def kv_str(key: str, value: str) -> bytes:
    return _str(key) + struct.pack("<I", 8) + _str(value)


def kv_u32(key: str, value: int) -> bytes:
    return _str(key) + struct.pack("<II", 4, value)


def tensor_info(name: str, dims: tuple[int, ...], type_id: int = 0, offset: int = 0) -> bytes:
    return _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", type_id, offset)


def gguf_bytes(kvs: list[bytes], tensors: list[bytes], data: bytes, *, n_tensors: int | None = None,
               n_kv: int | None = None, magic: bytes = b"GGUF", version: int = 3) -> bytes:
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv) + b"".join(kvs) + b"".join(tensors)
    return head + b"\0" * (-len(head) % 32) + data


GOOD_KV = [kv_str("general.architecture", "llama"), kv_str("tokenizer.ggml.model", "gpt2")]
GOOD_TENSOR = [tensor_info("token_embd.weight", (32, 4))]
GOOD_DATA = b"\0" * (32 * 4 * 4)


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_good_hand_made_header_reads(tmp_path):
    info = read_header(write(tmp_path, gguf_bytes(GOOD_KV, GOOD_TENSOR, GOOD_DATA)))
    assert info.architecture == "llama" and info.parameters == 128 and info.tensor_types == {"F32": 1}
    assert check_loadable(info) == "llama"


HOSTILE = {
    "not GGUF": (b"PK\3\4" + b"\0" * 60, "is not a GGUF file"),
    "version 7": (gguf_bytes(GOOD_KV, GOOD_TENSOR, GOOD_DATA, version=7), "GGUF version 7"),
    "billions of tensors": (gguf_bytes(GOOD_KV, GOOD_TENSOR, GOOD_DATA, n_tensors=1 << 40), "claims 1,099,511,627,776 "
                                                                                             "tensors"),
    "billions of entries": (gguf_bytes(GOOD_KV, GOOD_TENSOR, GOOD_DATA, n_kv=1 << 33), "metadata entries"),
    "more entries than bytes": (gguf_bytes(GOOD_KV, GOOD_TENSOR, GOOD_DATA, n_kv=60_000), "truncated"),
    "a 3 GB string": (gguf_bytes([_str("general.name") + struct.pack("<IQ", 8, 3 << 30)], [], b""),
                      "of 3,221,225,472 bytes"),
    "a string past the end": (gguf_bytes([_str("general.name") + struct.pack("<IQ", 8, 10 << 20)], [], b""),
                              "truncated"),
    "a huge array": (gguf_bytes([_str("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 1 << 40)], [], b""),
                     "elements in metadata"),
    "an array past the end": (gguf_bytes([_str("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 1 << 20)], [],
                                         b""), "truncated"),
    "a giant key": (struct.pack("<4sIQQ", b"GGUF", 3, 0, 1) + struct.pack("<Q", 1 << 35) + b"\0" * 64,
                    "(the limit is"),
    "a tensor past the end": (gguf_bytes(GOOD_KV, [tensor_info("token_embd.weight", (32, 4), 0, 4096)], GOOD_DATA),
                              "reaches past the end"),
    "a tensor larger than the file": (gguf_bytes(GOOD_KV, [tensor_info("w", (1 << 20, 1 << 19))], GOOD_DATA),
                                      "reaches past the end"),
    "an absurd shape": (gguf_bytes(GOOD_KV, [tensor_info("w", (1 << 30, 1 << 30, 1 << 30))], GOOD_DATA),
                        "beyond any real model"),
    "nine dimensions": (gguf_bytes(GOOD_KV, [tensor_info("w", (1,) * 9)], GOOD_DATA), "9 dimensions"),
    "an unknown tensor type": (gguf_bytes(GOOD_KV, [tensor_info("w", (32, 4), 999)], GOOD_DATA), "unknown type 999"),
    "a misaligned tensor": (gguf_bytes(GOOD_KV, [tensor_info("w", (32, 1), 0, 4)], GOOD_DATA), "not aligned"),
    "two tensors of one name": (gguf_bytes(GOOD_KV, GOOD_TENSOR * 2, GOOD_DATA), "two tensors named"),
    "an unknown value type": (gguf_bytes([_str("x") + struct.pack("<I", 77)], [], b""), "unknown value type 77"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_or_damaged_headers_are_refused_before_any_large_allocation(tmp_path, case):
    data, needle = HOSTILE[case]
    path = write(tmp_path, data)
    tracemalloc.start()
    try:
        with pytest.raises(UserError, match=re.escape(needle)) as exc:
            read_header(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{case}: {peak:,} bytes allocated before refusing"
    assert "\n" not in str(exc.value)


def test_truncated_exports_are_refused_at_every_cut(tmp_path, exported):
    data = exported["llama"].read_bytes()
    for cut in (3, 10, 30, 200, len(data) // 3, len(data) - 1):
        path = write(tmp_path, data[:cut], f"cut-{cut}.gguf")
        with pytest.raises(UserError, match=r"truncated|not a GGUF"):
            read_header(path)
    assert is_gguf_file(tmp_path / "cut-10.gguf") and not is_gguf_file(tmp_path / "cut-3.gguf")


def test_unsupported_architecture_and_types_name_what_is_supported(tmp_path):
    mamba = write(tmp_path, gguf_bytes([kv_str("general.architecture", "mamba"), GOOD_KV[1]], GOOD_TENSOR, GOOD_DATA))
    with pytest.raises(UserError, match=r"architecture 'mamba' is not supported; supported: llama, qwen2, qwen3"):
        check_loadable(read_header(mamba))
    iq2 = write(tmp_path, gguf_bytes(GOOD_KV, [tensor_info("token_embd.weight", (256, 1), 16)], b"\0" * 66), "iq.gguf")
    with pytest.raises(UserError, match=r"IQ2_XXS, which cannot be dequantized here; supported: F32, F16, BF16"):
        check_loadable(read_header(iq2))
    no_tok = write(tmp_path, gguf_bytes(GOOD_KV[:1], GOOD_TENSOR, GOOD_DATA), "notok.gguf")
    with pytest.raises(UserError, match="no tokenizer"):
        check_loadable(read_header(no_tok))


def test_the_cli_says_one_line_for_a_damaged_gguf(tmp_path, capsys):
    import desktop_app.cli as cli

    path = write(tmp_path, gguf_bytes(GOOD_KV, [tensor_info("token_embd.weight", (32, 4), 0, 1 << 20)], GOOD_DATA))
    code = cli.main(["generate", str(path), "--prompt", "hi", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and "reaches past the end" in err and err.count("\n") == 1


# --- our exports, loaded back ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok():
    return byte_bpe()


@pytest.fixture(scope="module")
def sources(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("gguf-src")
    return {family: trained_folder(root, family, tok, steps=10) for family in ("llama", "gpt2")}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, sources):
    from desktop_app.engine.export.hf import export_model

    root = tmp_path_factory.mktemp("gguf-out")
    out = {}
    for family, src in sources.items():
        out[family] = root / f"{family}.gguf"
        assert list(export_model(src, "gguf", out[family], gguf_type="f32"))[-1].reason == "completed"
        out[family, "q8_0"] = root / f"{family}-q8.gguf"
        assert list(export_model(src, "gguf", out[family, "q8_0"], gguf_type="q8_0"))[-1].reason == "completed"
    return out


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_gguf_loads_as_a_model_with_its_tokenizer_and_chat_template(sources, exported, tok, family):
    from desktop_app.engine.model.loading import load_model

    src, gguf = load_model(sources[family], device="cpu"), load_model(exported[family], device="cpu")
    assert gguf.kind == "gguf" and gguf.path == exported[family]
    shape = {k: v for k, v in gguf.spec.to_dict().items() if k not in ("init_std", "norm_eps")}  # f32 eps in GGUF
    assert shape == {k: v for k, v in src.spec.to_dict().items() if k not in ("init_std", "norm_eps")}
    assert not hasattr(gguf.model.config, "quantization_config")
    ids = tok.encode(HELD_OUT).ids
    assert gguf.tokenizer(HELD_OUT)["input_ids"] == ids
    assert gguf.tokenizer.decode(ids) == HELD_OUT
    assert gguf.tokenizer.chat_template == src.tokenizer.chat_template
    with torch.no_grad():
        expected = src.model(torch.tensor([ids])).logits
        assert torch.equal(gguf.model(torch.tensor([ids])).logits, expected)  # f32: bit for bit
        q8 = load_model(exported[family, "q8_0"], device="cpu").model(torch.tensor([ids])).logits
    assert (q8 - expected).abs().max() < 0.1 and (q8.argmax(-1) == expected.argmax(-1)).float().mean() > 0.9


def test_a_gguf_load_parses_the_file_once_and_leaves_the_gguf_library_as_it_was(exported, monkeypatch):
    """transformers builds a GGUFReader for the tokenizer, the config and the weights: one parse serves all three,
    and overlapping loads (chat and an evaluation at once) restore the library when the last one ends."""
    import threading

    import gguf

    from desktop_app.engine.model.gguf_reading import parse_once
    from desktop_app.engine.model.loading import load_model

    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    parses: list[str] = []

    class CountingReader(original_reader):
        def __init__(self, path, mode="r"):
            parses.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    loaded = load_model(exported["llama"], device="cpu")
    assert loaded.kind == "gguf" and len(parses) == 1  # three readers asked for, one parse
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is original_map

    inside, release = threading.Event(), threading.Event()

    def other_load() -> None:
        with parse_once():
            inside.set()
            release.wait(10)

    other = threading.Thread(target=other_load)
    other.start()
    assert inside.wait(10)
    with parse_once():
        assert gguf.GGUFReader is not CountingReader
        assert gguf.GGUFReader(exported["gpt2"]) is gguf.GGUFReader(exported["gpt2"])
    assert gguf.GGUFReader is not CountingReader  # the other load is still inside
    release.set()
    other.join(10)
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is original_map


def test_the_workspace_lists_gguf_files(tmp_path, exported):
    from desktop_app.engine.workspace import Workspace, list_generatable

    ws = Workspace(tmp_path / "ws")
    ws.folder("models").mkdir(parents=True)
    shutil.copy(exported["gpt2"], ws.folder("models") / "mine.gguf")
    found = [(c.kind, c.name) for c in list_generatable(ws)]
    assert ("gguf", "mine.gguf") in found


# --- other apps' stores ----------------------------------------------------------------------------------------

def _ollama_store(root: Path, gguf: Path, template: str = "{{ .Prompt }}") -> Path:
    data = gguf.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    tdigest = hashlib.sha256(template.encode()).hexdigest()
    (root / "blobs").mkdir(parents=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    (root / "blobs" / f"sha256-{tdigest}").write_text(template)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)},
        {"mediaType": "application/vnd.ollama.image.template", "digest": f"sha256:{tdigest}"}]}))
    hostile = root / "manifests" / "registry.ollama.ai" / "library" / "evil" / "latest"
    hostile.parent.mkdir(parents=True)
    hostile.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                               "digest": "sha256:../../../../etc/passwd"}]}))
    (root / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "broken").write_text("{not json")
    return root / "blobs" / f"sha256-{digest}"


def test_ollama_and_lm_studio_stores_are_listed_and_their_models_load(tmp_path, exported):
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.model.model_stores import find_store_models

    blob = _ollama_store(tmp_path / "ollama", exported["llama"])
    lms = tmp_path / "home" / ".lmstudio" / "models" / "someone" / "tiny-GGUF"
    lms.mkdir(parents=True)
    shutil.copy(exported["gpt2", "q8_0"], lms / "tiny-Q8_0.gguf")
    (lms / "mmproj-tiny.gguf").write_bytes(b"GGUF")  # a vision projector: not listed
    (lms / "broken.gguf").write_bytes(exported["gpt2"].read_bytes()[:100])
    found = find_store_models({"OLLAMA_MODELS": str(tmp_path / "ollama")}, tmp_path / "home")
    by_name = {m.name: m for m in found}
    assert set(by_name) == {"tiny:latest", "someone/tiny-GGUF/tiny-Q8_0.gguf", "someone/tiny-GGUF/broken.gguf"}
    tiny = by_name["tiny:latest"]
    assert (tiny.source, tiny.path, tiny.architecture, tiny.quantization, tiny.usable) == \
        ("ollama", blob, "llama", "F32", True)
    assert tiny.size == blob.stat().st_size and tiny.parameters > 0 and tiny.template is not None
    q8 = by_name["someone/tiny-GGUF/tiny-Q8_0.gguf"]
    assert (q8.source, q8.architecture, q8.quantization, q8.usable) == ("lmstudio", "gpt2", "Q8_0", True)
    assert "truncated" in by_name["someone/tiny-GGUF/broken.gguf"].problem
    assert load_model(blob, device="cpu").kind == "gguf"  # an Ollama blob has no .gguf suffix
    assert find_store_models({}, tmp_path / "nobody") == []


def test_generate_serve_and_export_verbs_take_a_gguf(exported, tmp_path, capsys):
    import desktop_app.cli as cli
    from desktop_app.server.serving import load_served

    gguf = exported["gpt2"]
    assert cli.main(["generate", str(gguf), "--prompt", "the cat", "--max-new-tokens", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    served = load_served(str(gguf), device="cpu")
    assert served.id == "gpt2.gguf" and served.loaded.kind == "gguf"
    out = tmp_path / "again.gguf"
    assert cli.main(["export", str(gguf), "--format", "gguf", "--gguf-type", "Q8_0", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out) and f"ollama create NAME -f {tmp_path / 'again.Modelfile'}" in captured.err
