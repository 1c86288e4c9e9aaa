"""A prepared dataset damaged or vanished after `prepare` (issue 41): refused or stopped with one line naming the
file (never numpy's "Size of available data is not a multiple of the data-type size", never "a bug"), the last
checkpoint intact, and a bit-exact resume once the file is back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from train_helpers import corpus, final_weights, make_dataset, metrics_losses, tiny_config

from desktop_app.cli import main
from desktop_app.engine import run_folder as rf
from desktop_app.engine.data import store_check
from desktop_app.engine.data.prepare import append_to_dataset, prepare_dataset
from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.errors import UserError
from desktop_app.engine.os_faults import DiskFault
from desktop_app.engine.specs import DataSpec
from desktop_app.engine.train.loop import train

SPEC = DataSpec(vocab_size=300, context_length=32, overlap=0, val_fraction=0.2, seed=3, min_frequency=1)
STEPS, SAVE_EVERY = 8, 3


def _prepare(folder: Path, texts: list[str]) -> Path:
    source = folder.parent / f"{folder.name}.txt"
    source.write_text("\n\n".join(texts), encoding="utf-8")
    events = list(prepare_dataset([source], folder, SPEC))
    assert events[-1].reason == "completed", events[-1]
    return folder


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return _prepare(tmp_path_factory.mktemp("damaged") / "ds", corpus(200))


@pytest.fixture
def dataset(prepared, tmp_path) -> Path:
    """A fresh copy of the prepared dataset for a test to damage."""
    copy = tmp_path / "ds"
    copy.mkdir()
    for f in prepared.iterdir():
        if f.is_file() and f.name != store_check.VERIFIED_NAME:
            (copy / f.name).write_bytes(f.read_bytes())
    return copy


def _one_line(message: str, file: Path) -> None:
    assert str(file) in message and "\n" not in message
    assert "multiple of the data-type size" not in message and "bug" not in message


def test_prepare_records_sizes_and_checksums(dataset):
    files = json.loads((dataset / "manifest.json").read_text())["files"]
    for split in ("train", "val"):
        entry = files[f"{split}.bin"]
        assert entry["size"] == (dataset / f"{split}.bin").stat().st_size > 0
        assert entry["blake2b"] == store_check.hash_prefix(dataset / f"{split}.bin", entry["size"]).hexdigest()


def test_train_bin_cut_in_half_is_one_line_from_the_cli(dataset, tmp_path, capsys):
    """The issue's example: train.bin cut in half (an odd byte count) -> one line naming it, exit 2, no run made."""
    train_bin = dataset / "train.bin"
    size = train_bin.stat().st_size
    os.truncate(train_bin, size // 2 | 1)
    config = tiny_config(dataset, steps=4)
    config.save(tmp_path / "run.json")
    code = main(["train", "--config", str(tmp_path / "run.json"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert err.startswith("error: the dataset file") and "cut short" in err and "prepare the dataset again" in err
    _one_line(err, train_bin)
    assert not (tmp_path / "run").exists() or not rf.list_committed(tmp_path / "run")  # refused before a step


def test_old_store_without_checksums_cut_short_is_named_too(tmp_path):
    old = make_dataset(tmp_path / "old")  # a manifest from before checksums: checked by size only
    os.truncate(old / "train.bin", (old / "train.bin").stat().st_size // 2 | 1)
    with pytest.raises(store_check.DamagedData) as err:
        list(train(tiny_config(old, steps=2), tmp_path / "run"))
    _one_line(str(err.value), old / "train.bin")
    with pytest.raises(store_check.DamagedData):
        TokenStore(old).tokens("train")  # every reader (perplexity, statistics) says the same


def test_old_store_without_checksums_trains_silently(tmp_path):
    old = make_dataset(tmp_path / "old")
    events = list(train(tiny_config(old, steps=2), tmp_path / "run"))
    assert events[-1].reason == "completed"
    assert not [e for e in events if e.type == "log" and e.level in ("warning", "error")]


def test_altered_byte_same_size_is_refused_naming_the_file(dataset, tmp_path):
    train_bin = dataset / "train.bin"
    data = bytearray(train_bin.read_bytes())
    data[len(data) // 2] ^= 0xFF
    train_bin.write_bytes(bytes(data))
    with pytest.raises(store_check.DamagedData) as err:
        list(train(tiny_config(dataset, steps=2), tmp_path / "run"))
    assert "checksum" in str(err.value) and "restore it from a backup" in str(err.value)
    _one_line(str(err.value), train_bin)


def test_a_verified_file_is_not_hashed_again_until_it_changes(dataset, monkeypatch):
    TokenStore(dataset).verify()
    assert (dataset / store_check.VERIFIED_NAME).is_file()
    calls = []
    real = store_check.hash_prefix
    monkeypatch.setattr(store_check, "hash_prefix", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    TokenStore(dataset).verify()
    assert calls == []  # unchanged since the last run: instant start
    val_bin = dataset / "val.bin"
    data = bytearray(val_bin.read_bytes())
    data[0] ^= 1
    val_bin.write_bytes(bytes(data))  # same size, new ctime: hashed again and refused
    with pytest.raises(store_check.DamagedData, match=r"val\.bin"):
        TokenStore(dataset).verify()
    assert calls == [val_bin]


def test_missing_val_bin_is_named(dataset):
    (dataset / "val.bin").unlink()
    with pytest.raises(DiskFault) as err:
        TokenStore(dataset).verify()
    assert "missing" in str(err.value)
    _one_line(str(err.value), dataset / "val.bin")


def test_append_to_a_damaged_store_is_refused_and_changes_nothing(dataset, tmp_path):
    train_bin = dataset / "train.bin"
    os.truncate(train_bin, train_bin.stat().st_size - 10)
    before = {f.name: f.read_bytes() for f in dataset.iterdir() if f.is_file()}
    more = tmp_path / "more.txt"
    more.write_text("\n\n".join(corpus(20, seed=9)), encoding="utf-8")
    with pytest.raises(UserError) as err:
        list(append_to_dataset(dataset, [more]))
    _one_line(str(err.value), train_bin)
    assert {f.name: f.read_bytes() for f in dataset.iterdir() if f.is_file()} == before


def test_append_keeps_the_checksums_right(dataset, tmp_path):
    more = tmp_path / "more.txt"
    more.write_text("\n\n".join(corpus(30, seed=9)), encoding="utf-8")
    assert list(append_to_dataset(dataset, [more]))[-1].reason == "completed"
    TokenStore(dataset).verify()  # the new manifest's checksums cover old and new tokens
    files = json.loads((dataset / "manifest.json").read_text())["files"]
    assert files["train.bin"]["size"] == (dataset / "train.bin").stat().st_size


@pytest.mark.parametrize("fault", ["moved", "cut"])
def test_dataset_vanishing_mid_run_stops_then_resumes_bit_exact(dataset, tmp_path, fault):
    config = tiny_config(dataset, steps=STEPS, save_every=SAVE_EVERY, keep_last=3)
    assert list(train(config, tmp_path / "ref"))[-1].reason == "completed"
    train_bin, aside = dataset / "train.bin", tmp_path / "train.bin.aside"
    run_dir = tmp_path / "run"
    events = train(config, run_dir)
    with pytest.raises(UserError) as err:
        for event in events:
            if event.type == "step" and event.step == 4:
                os.replace(train_bin, aside)  # the folder moved away / the drive went
                if fault == "cut":  # a new, shorter file in its place (a copy begun over it)
                    train_bin.write_bytes(aside.read_bytes()[:100])
    _one_line(str(err.value), train_bin)
    assert "resume the run" in str(err.value)
    committed = rf.list_committed(run_dir)
    assert [rf.step_of(p) for p in committed] == [3]
    rf.verify_checkpoint(committed[-1])  # the last checkpoint is intact
    os.replace(aside, train_bin)  # the data is back
    assert list(train(config, run_dir, resume=True))[-1].reason == "completed"
    assert metrics_losses(run_dir) == metrics_losses(tmp_path / "ref")
    ref = final_weights(tmp_path / "ref")
    weights = final_weights(run_dir)
    assert all(torch.equal(weights[k], ref[k]) for k in ref)


def test_a_cut_between_the_check_and_the_read_is_named_never_a_sigbus(dataset):
    """The per-batch stat passed, then the file was cut in place (same inode) before the windows were read: a memory
    map would end the process with SIGBUS there; the plain reads see a short read and name the file."""
    from desktop_app.engine.data.batches import WindowBatchSource

    store = TokenStore(dataset)
    source = WindowBatchSource(store, "train", seed=0)
    last = list(range(store.num_chunks("train") - 4, store.num_chunks("train")))
    assert last[0] * store.stride * 2 > 3 * 4096  # pages a memory map would have lost entirely
    windows = source.gather(last, 4)
    assert windows.dtype == torch.int64 and torch.equal(windows, torch.from_numpy(store.chunks("train", last)))
    source.watch.check = lambda: None  # the race: the stat came before the cut
    os.truncate(dataset / "train.bin", 64)  # in place: the same file, 32 tokens left
    with pytest.raises(UserError) as caught:
        source.gather(last, 4)
    _one_line(str(caught.value), dataset / "train.bin")
    assert "cut short" in str(caught.value)
