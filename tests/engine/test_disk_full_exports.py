"""A full disk while exporting (Hugging Face folder, GGUF, llama.cpp quantization), preparing a token store and
saving evaluations: refused before the first byte when the size is known (one line: folder, needed, free); when
the disk fills anyway, one line, the partial files removed and nothing earlier touched. Faults are injected at the
lowest level (shutil.disk_usage, safetensors' save, gguf's tensor write, the token writer, os.fdopen)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from gguf_helpers import byte_bpe, trained_folder

from desktop_app.engine.data import prepare as prepare_module
from desktop_app.engine.data.prepare import append_to_dataset, prepare_dataset
from desktop_app.engine.data.token_store import TokenWriter
from desktop_app.engine.evaluate.results import RESULTS_FILE, append_result, read_results
from desktop_app.engine.events import Finished
from desktop_app.engine.export import space
from desktop_app.engine.export.hf import export_model
from desktop_app.engine.os_faults import DiskFault, NotEnoughSpace
from desktop_app.engine.specs import DataSpec

Usage = namedtuple("Usage", "total used free")
FULL = "(os error 28)"


def _free(monkeypatch, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(10**12, 10**12 - free, free))


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return trained_folder(tmp_path_factory.mktemp("src"), "llama", byte_bpe(), steps=2)


def test_export_sizes_follow_the_format():
    weights = 1_000_000
    assert space.export_bytes(weights, "hf") == 4 * weights + space.TEXT_FILES
    assert space.export_bytes(weights, "zip") == 2 * (4 * weights + space.TEXT_FILES)
    assert space.export_bytes(weights, "gguf", "f16") == 2 * weights + space.TEXT_FILES
    # a k-quant: llama.cpp's output and our f32 file it reads from, side by side
    assert space.export_bytes(weights, "gguf", "q4_k_m") == int(weights * (4.9 / 8 + 4)) + space.TEXT_FILES
    big = 2_000_000_000
    assert space.export_bytes(big, "gguf", "q6_k") == int(big * (6.6 / 8 + 2)) + space.TEXT_FILES


@pytest.mark.parametrize("fmt, gguf_type, what", [("hf", "f16", "the Hugging Face folder export"),
                                                  ("zip", "f16", "the zipped export"),
                                                  ("gguf", "q8_0", "the Q8_0 GGUF export")])
def test_an_export_that_cannot_fit_is_refused_before_writing(monkeypatch, model_folder, tmp_path, fmt, gguf_type,
                                                             what):
    out_dir = tmp_path / "exports"
    out_dir.mkdir()
    _free(monkeypatch, 5_000_000)  # less than the 8 MB of text files alone
    with pytest.raises(NotEnoughSpace) as info:
        list(export_model(model_folder, fmt, out_dir / "m.gguf", gguf_type=gguf_type))
    message = str(info.value)
    assert message.startswith(f"{what} needs about ") and f"only 5.0 MB is free in {out_dir}: free some" in message
    assert _entries(out_dir) == set()


def test_a_quantization_counts_its_intermediate_file(monkeypatch, tmp_path):
    _free(monkeypatch, 28_000_000)
    space.check_export_space(tmp_path, 1_000_000, "gguf", "q8_0")  # 1.1 MB + 8.4 MB text + 16.8 MB margin fits
    with pytest.raises(NotEnoughSpace, match="the Q4_K_M GGUF export needs about 13 MB"):
        space.check_export_space(tmp_path, 1_000_000, "gguf", "q4_k_m")  # + our f32 file: 4 MB more


def test_a_disk_that_fills_during_the_hf_export_leaves_the_earlier_export_intact(monkeypatch, model_folder, tmp_path):
    import safetensors
    import transformers.modeling_utils as modeling_utils

    out = tmp_path / "exports" / "model"
    assert list(export_model(model_folder, "hf", out))[-1].reason == "completed"
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full_disk(_state, filename, metadata=None):
        with open(filename, "wb") as fh:
            fh.write(b"\0" * 1000)  # the part that fitted
        raise safetensors.SafetensorError(f"Error while serializing: I/O error: No space left on device {FULL}")

    monkeypatch.setattr(modeling_utils, "safe_save_file", full_disk)
    with pytest.raises(DiskFault) as info:
        list(export_model(model_folder, "hf", out, overwrite=True))
    message = str(info.value)
    assert message.startswith("exporting the model failed: the disk is full") and "\n" not in message
    assert message.endswith("free some space or choose a folder on another disk")
    assert _entries(out.parent) == {"model"}  # no temporary folder left
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_disk_that_fills_during_the_gguf_write_leaves_no_partial_file(monkeypatch, model_folder, tmp_path):
    import gguf

    out_dir = tmp_path / "exports"
    out_dir.mkdir()
    (out_dir / "older.gguf").write_bytes(b"GGUF older")

    def full_disk(self, *, progress=False):
        for fout in self.fout:
            fout.write(b"\0" * 4096)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", full_disk)
    with pytest.raises(DiskFault, match=r"^exporting the model failed: the disk is full"):
        list(export_model(model_folder, "gguf", out_dir / "m.gguf", gguf_type="f32"))
    assert _entries(out_dir) == {"older.gguf"}
    assert (out_dir / "older.gguf").read_bytes() == b"GGUF older"


@pytest.fixture
def text_files(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "in", "park"]
    for i in range(3):
        docs = [" ".join(words[j] for j in rng.integers(0, 10, 40)) for _ in range(60)]
        (folder / f"{i}.txt").write_text("\n\n".join(docs), encoding="utf-8")
    return folder


SMALL = DataSpec(vocab_size=300, context_length=32)


def test_a_token_store_too_big_for_the_disk_is_refused_early_and_the_partial_folder_removed(monkeypatch, text_files,
                                                                                          tmp_path):
    monkeypatch.setattr(prepare_module, "BATCH_CHARS", 4000)  # several batches from a small input
    _free(monkeypatch, 2_000_000)
    out = tmp_path / "datasets" / "data"
    with pytest.raises(NotEnoughSpace) as info:
        list(prepare_dataset([text_files], out, SMALL))
    assert str(info.value).startswith("the rest of the tokenized dataset needs about ")
    assert f"only 2.0 MB is free in {out.parent}: free some space" in str(info.value)
    assert _entries(out.parent) == set()


def test_a_disk_that_fills_while_tokenizing_is_one_line_and_leaves_nothing(monkeypatch, text_files, tmp_path):
    monkeypatch.setattr(prepare_module, "BATCH_CHARS", 4000)
    real = TokenWriter.write_batch
    calls = []

    def fills(self, split, docs, ends):
        calls.append(split)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path / f"{split}.bin"))
        return real(self, split, docs, ends)

    monkeypatch.setattr(TokenWriter, "write_batch", fills)
    out = tmp_path / "datasets" / "data"
    with pytest.raises(DiskFault) as info:
        list(prepare_dataset([text_files], out, SMALL))
    assert str(info.value).startswith("preparing the dataset failed: the disk is full (")
    assert _entries(out.parent) == set()


def test_an_append_refused_for_space_leaves_the_dataset_as_committed(monkeypatch, text_files, tmp_path):
    out = tmp_path / "data"
    first = sorted(text_files.iterdir())
    assert list(prepare_dataset(first[:1], out, SMALL))[-1].reason == "completed"
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    monkeypatch.setattr(prepare_module, "BATCH_CHARS", 4000)
    _free(monkeypatch, 1_000_000)
    with pytest.raises(NotEnoughSpace, match=f"is free in {out}: free some space"):
        list(append_to_dataset(out, first[1:]))
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    monkeypatch.undo()
    events = list(append_to_dataset(out, first[1:]))  # with space again the same append works
    assert isinstance(events[-1], Finished) and events[-1].reason == "completed"


def test_evaluations_on_a_full_disk_are_one_line_and_the_file_stays(monkeypatch, tmp_path):
    append_result(tmp_path, {"model": "m", "metrics": {"ppl": 3.0}})
    before = (tmp_path / RESULTS_FILE).read_bytes()
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, _data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))
    with pytest.raises(DiskFault) as info:
        append_result(tmp_path, {"model": "m", "metrics": {"ppl": 2.0}})
    assert str(info.value).startswith(f"saving the evaluation results failed: the disk is full "
                                      f"({tmp_path / RESULTS_FILE}")
    monkeypatch.undo()
    assert (tmp_path / RESULTS_FILE).read_bytes() == before
    assert _entries(tmp_path) == {RESULTS_FILE}
    assert [r["metrics"] for r in read_results(tmp_path)] == [{"ppl": 3.0}]
    assert json.loads(before)["format_version"] == 1
