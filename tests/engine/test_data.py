"""prepare_dataset / append_to_dataset / dataset_stats: content round trip, overlap, splits, cancel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ingest_cases import EXPECTED_VERDICTS

from desktop_app.engine.data import ingest
from desktop_app.engine.data import prepare as data_mod
from desktop_app.engine.data.dataset_stats import dataset_stats
from desktop_app.engine.data.prepare import append_to_dataset, prepare_dataset, split_of
from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.data.tokenization import load_tokenizer, save_tokenizer, tokenizer_sha256, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, FileVerdict, Finished, Log, Progress
from desktop_app.engine.specs import DataSpec, SpecError

WORDS = ["apple", "banana", "cherry", "dog", "elephant", "fox", "grape", "house", "island", "jungle", "kite",
         "lemon", "mountain", "night", "ocean", "river", "stone", "tree", "umbrella", "valley", "water", "yellow",
         "zebra"]


def make_docs(n: int, seed: int = 0, prefix: str = "") -> list[str]:
    rng = np.random.default_rng(seed)
    docs = []
    for i in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(5, 40)))
        docs.append(f"{prefix}Doc {i}: " + " ".join(words) + ".")
    return docs


def write_docs(path: Path, docs: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def run(gen) -> tuple[Finished, list]:
    events = list(gen)
    assert isinstance(events[-1], Finished)
    assert sum(isinstance(e, Finished) for e in events) == 1
    return events[-1], events


SPEC = DataSpec(vocab_size=320, context_length=16, overlap=0, val_fraction=0.2, seed=7, min_frequency=1)


def decoded_docs(store: TokenStore, split: str) -> list[str]:
    """Split a stream at EOS and decode each document."""
    tok = load_tokenizer(store.tokenizer_path)
    eos = store.manifest["tokenizer"]["eos_id"]
    ids = np.asarray(store.tokens(split), dtype=np.int64)
    ends = np.flatnonzero(ids == eos)
    out, start = [], 0
    for end in ends:
        out.append(tok.decode(ids[start:end].tolist(), skip_special_tokens=False))
        start = end + 1
    assert start == len(ids), "the stream must end with EOS"
    return out


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, list[str]]:
    docs = make_docs(120)
    return write_docs(tmp_path / "in" / "docs.txt", docs), docs


def test_prepare_round_trips_every_document(corpus, tmp_path: Path) -> None:
    path, docs = corpus
    fin, events = run(prepare_dataset([path], tmp_path / "ds", SPEC))
    assert fin.reason == "completed", fin.message
    store = TokenStore(tmp_path / "ds")
    train, val = decoded_docs(store, "train"), decoded_docs(store, "val")
    assert sorted(train + val) == sorted(docs)  # nothing lost, nothing duplicated, exact text
    assert 0 < len(val) < len(docs) * 0.4
    for split, texts in (("train", train), ("val", val)):
        assert all(split_of(t, SPEC.seed, SPEC.val_fraction) == split for t in texts)
        lengths = store.doc_lengths(split)
        assert len(lengths) == len(texts) and lengths.sum() == len(store.tokens(split))
    m = store.manifest
    assert m["format_version"] == 1 and m["dtype"] == "uint16" and store.dtype == np.uint16
    assert m["chunking"] == {**m["chunking"], "context_length": 16, "overlap": 0, "stride": 16}
    assert m["tokenizer"]["sha256"] == tokenizer_sha256(tmp_path / "ds" / "tokenizer.json")
    assert m["tokenizer"]["vocab_size"] == store.vocab_size <= 320
    assert m["splits"]["train"]["bytes"] + m["splits"]["val"]["bytes"] == sum(len(d.encode()) for d in docs)
    assert m["sources"][0]["sha256"] and m["sources"][0]["verdict"] == "ok"
    # Result dict (what `prepare --json` prints).
    r = fin.result
    assert r["tokens"]["train"] == len(store.tokens("train")) and r["chunks"]["val"] == store.num_chunks("val")
    assert r["files"][0]["tokens"] == len(store.tokens("train")) + len(store.tokens("val"))
    assert Path(r["manifest"]).is_file() and Path(r["tokenizer"]).is_file()
    # Progress covers the stages; nothing but the dataset is left in the parent folder.
    stages = {e.stage for e in events if isinstance(e, Progress)}
    assert {"scan", "tokenizer", "encode"} <= stages
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "in"]


def test_unicode_crlf_and_bom_files_round_trip_exactly(malformed_corpus, tmp_path: Path) -> None:
    names = ["unicode.txt", "crlf.txt", "bom_utf8.txt", "bom_utf16le.txt", "bom_utf16be.txt", "texts.jsonl"]
    fin, _ = run(prepare_dataset([malformed_corpus[n] for n in names], tmp_path / "ds",
                                 SPEC.replace(val_fraction=0.0)))
    assert fin.reason == "completed"
    got = decoded_docs(TokenStore(tmp_path / "ds"), "train")
    expected = []
    for n in names:
        expected += [d.text for d in ingest.read_items(malformed_corpus[n]) if isinstance(d, ingest.Doc)]
    assert got == expected
    assert "Line one.\r\nLine two\twith a tab." in got and "Emoji 🎉👍🏽 and mixed: naïve café 東京 Москва" in got


def test_special_token_text_in_documents_is_not_an_eos(tmp_path: Path) -> None:
    f = write_docs(tmp_path / "a.txt", ["text with <|endoftext|> inside it", "second <|user|> doc"] * 10)
    run(prepare_dataset([f], tmp_path / "ds", SPEC.replace(val_fraction=0.0)))
    store = TokenStore(tmp_path / "ds")
    assert len(store.doc_lengths("train")) == 20
    assert int((np.asarray(store.tokens("train")) == store.manifest["tokenizer"]["eos_id"]).sum()) == 20
    assert decoded_docs(store, "train")[0] == "text with <|endoftext|> inside it"


def test_bad_files_in_the_batch_do_not_stop_the_good_ones(malformed_corpus, tmp_path: Path) -> None:
    root = malformed_corpus["good.txt"].parent
    fin, events = run(prepare_dataset([root], tmp_path / "ds", SPEC))
    assert fin.reason == "completed", fin.message
    verdicts = {Path(f["path"]).relative_to(root).as_posix(): f for f in fin.result["files"]}
    assert {k: v["verdict"] for k, v in verdicts.items()} == EXPECTED_VERDICTS
    for name, f in verdicts.items():
        if f["verdict"] == "ok" and f["documents"]:
            assert f["tokens"] > 0, name
        if f["verdict"] != "ok":
            assert f["tokens"] == 0 and f["reason"], name
    assert verdicts["bad_line.jsonl"]["line"] == 3 and verdicts["invalid_utf8.txt"]["offset"] == 11
    assert fin.result["records"] == {"chat": 2, "instruction": 2, "preference": 1}
    chat = [json.loads(x) for x in (tmp_path / "ds" / "records" / "chat.jsonl").read_text().splitlines()]
    assert chat[1]["messages"] == [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    assert all(c["split"] in ("train", "val") for c in chat)
    file_events = [e for e in events if isinstance(e, FileVerdict)]
    assert {e.verdict for e in file_events} >= {"ok", "binary", "bad-jsonl", "symlink-loop"}
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert len(manifest["sources"]) == len(EXPECTED_VERDICTS)


def test_no_usable_file_fails_without_writing(malformed_corpus, tmp_path: Path) -> None:
    bad = [malformed_corpus[n] for n in ("empty.txt", "nul.txt", "image.txt", "bad_line.jsonl")]
    fin, _ = run(prepare_dataset(bad, tmp_path / "ds", SPEC))
    assert fin.reason == "failed" and "none of the 4 file(s) can be used" in fin.message
    assert "1 binary" not in fin.message and "2 binary" in fin.message
    assert not (tmp_path / "ds").exists()
    assert [f["verdict"] for f in fin.result["files"]] == ["empty", "binary", "binary", "bad-jsonl"]
    fin, _ = run(prepare_dataset([tmp_path / "nothing_here"], tmp_path / "ds", SPEC))
    assert fin.reason == "failed"


def test_settings_mistakes_raise_before_any_work(corpus, tmp_path: Path) -> None:
    path, _ = corpus
    with pytest.raises(SpecError, match="overlap 16 must be smaller"):
        list(prepare_dataset([path], tmp_path / "a", SPEC.replace(overlap=16)))
    with pytest.raises(UserError, match="too small for a byte-bpe"):
        list(prepare_dataset([path], tmp_path / "b", SPEC.replace(vocab_size=100)))
    with pytest.raises(UserError, match="does not exist"):
        list(prepare_dataset([path], tmp_path / "c", SPEC.replace(tokenizer_file=str(tmp_path / "no.json"))))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("precious")
    with pytest.raises(UserError, match="already exists and is not empty"):
        list(prepare_dataset([path], tmp_path / "full", SPEC))
    assert (tmp_path / "full" / "keep.txt").read_text() == "precious"
    with pytest.raises(UserError, match="no input"):
        list(prepare_dataset([], tmp_path / "d", SPEC))


def test_empty_existing_folder_is_accepted(corpus, tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    fin, _ = run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC))
    assert fin.reason == "completed" and (tmp_path / "ds" / "manifest.json").is_file()


def test_overlap_windows(corpus, tmp_path: Path) -> None:
    fin, _ = run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC.replace(overlap=5, val_fraction=0.0)))
    store = TokenStore(tmp_path / "ds")
    assert store.stride == 11
    stream = np.asarray(store.tokens("train"), dtype=np.int64)
    n = store.num_chunks("train")
    assert n == (len(stream) - 17) // 11 + 1 == fin.result["chunks"]["train"]
    for i in range(n - 1):
        a, b = store.chunk("train", i), store.chunk("train", i + 1)
        assert len(a) == 17 and np.array_equal(a, stream[i * 11:i * 11 + 17])
        assert np.array_equal(a[11:], b[:6])  # 5 overlapping input tokens + the shared target token
    # The last window ends inside the stream; the next one would not fit.
    assert (n - 1) * 11 + 17 <= len(stream) < n * 11 + 17

    stats = dataset_stats(tmp_path / "ds", preview_chunks=3)
    tok = load_tokenizer(store.tokenizer_path)
    for p in stats["preview"]:
        i = p["index"]
        assert p["overlap_tokens"] == 5
        assert p["overlap_text"] == tok.decode(stream[i * 11 + 11:i * 11 + 16].tolist(), skip_special_tokens=False)
        assert p["text"] == tok.decode(stream[i * 11:i * 11 + 16].tolist(), skip_special_tokens=False)


def test_dataset_stats(corpus, tmp_path: Path) -> None:
    run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC))
    stats = dataset_stats(tmp_path / "ds", preview_chunks=2)
    store = TokenStore(tmp_path / "ds")
    assert stats["splits"]["train"]["documents"] + stats["splits"]["val"]["documents"] == 120
    assert stats["splits"]["train"]["tokens"] == len(store.tokens("train"))
    assert stats["splits"]["val"]["chunks"] == store.num_chunks("val")
    hist = stats["doc_length_histogram"]
    assert sum(hist["counts"]) == 120 and len(hist["edges"]) == len(hist["counts"]) + 1
    assert len(stats["preview"]) == 2 and stats["preview"][0]["overlap_tokens"] == 0
    assert stats["sources"] == {"ok": 1, "problems": 0}
    json.dumps(stats)  # plain JSON types only (the UI and --json can use it as is)


def test_split_is_deterministic_and_stable_when_files_are_added(corpus, tmp_path: Path) -> None:
    path, _ = corpus
    run(prepare_dataset([path], tmp_path / "a", SPEC))
    run(prepare_dataset([path], tmp_path / "b", SPEC.replace(tokenizer_file=str(tmp_path / "a"))))
    for split in ("train", "val"):
        assert (tmp_path / "a" / f"{split}.bin").read_bytes() == (tmp_path / "b" / f"{split}.bin").read_bytes()
    # Adding another file later keeps every old document in its split.
    extra = write_docs(tmp_path / "in2" / "more.txt", make_docs(80, seed=1, prefix="More "))
    run(prepare_dataset([path, extra], tmp_path / "c", SPEC.replace(tokenizer_file=str(tmp_path / "a"))))
    a_val = set(decoded_docs(TokenStore(tmp_path / "a"), "val"))
    c_val = set(decoded_docs(TokenStore(tmp_path / "c"), "val"))
    assert a_val <= c_val and (c_val - a_val) <= set(make_docs(80, seed=1, prefix="More "))
    # Another seed gives another split.
    run(prepare_dataset([path], tmp_path / "d", SPEC.replace(seed=8, tokenizer_file=str(tmp_path / "a"))))
    assert set(decoded_docs(TokenStore(tmp_path / "d"), "val")) != a_val
    # No validation at all.
    fin, _ = run(prepare_dataset([path], tmp_path / "e", SPEC.replace(val_fraction=0.0)))
    assert fin.result["tokens"]["val"] == 0 and fin.result["documents"]["train"] == 120


def test_given_tokenizer_is_used_as_is(corpus, tmp_path: Path) -> None:
    tok = train_tokenizer(iter(make_docs(50, seed=3)), "byte-bpe", vocab_size=300)
    tok_path = save_tokenizer(tok, tmp_path / "tok" / "tokenizer.json")
    fin, events = run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC.replace(tokenizer_file=str(tok_path))))
    assert fin.reason == "completed"
    assert "tokenizer" not in {e.stage for e in events if isinstance(e, Progress)}  # no training
    m = TokenStore(tmp_path / "ds").manifest
    assert m["tokenizer"]["sha256"] == tokenizer_sha256(tok_path) and m["tokenizer"]["kind"] == "given"


def test_large_vocab_uses_uint32(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(70000)}
    vocab.update({"<|endoftext|>": 70000, "a": 70001, "b": 70002, " ": 70003})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="a"))
    from tokenizers import pre_tokenizers

    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    tok_path = save_tokenizer(tok, tmp_path / "big" / "tokenizer.json")
    f = write_docs(tmp_path / "a.txt", ["t69999 t5 b"] * 3)
    run(prepare_dataset([f], tmp_path / "ds", SPEC.replace(tokenizer_file=str(tok_path), val_fraction=0.0)))
    store = TokenStore(tmp_path / "ds")
    assert store.dtype == np.uint32
    assert np.asarray(store.tokens("train")).tolist()[:4] == [69999, 5, 70002, 70000]


def test_long_single_line_document_is_encoded_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "PIECE_CHARS", 2000)
    monkeypatch.setattr(data_mod, "BATCH_CHARS", 5000)
    text = " ".join(make_docs(300, seed=4)).replace("\n", " ")  # one line, ~ 50 kB
    f = tmp_path / "one.txt"
    f.write_text(text)
    fin, _ = run(prepare_dataset([f], tmp_path / "ds", SPEC.replace(val_fraction=0.5)))
    store = TokenStore(tmp_path / "ds")
    # One document: all pieces land in one split, with a single EOS at the end.
    assert fin.result["documents"]["train"] + fin.result["documents"]["val"] == 1
    split = "train" if fin.result["documents"]["train"] else "val"
    assert decoded_docs(store, split) == [text]


def test_cancel_while_encoding_leaves_nothing(corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_mod, "BATCH_CHARS", 200)  # many batches -> many cancel points
    controls = Controls()
    events = []
    for event in prepare_dataset([corpus[0]], tmp_path / "ds", SPEC, controls):
        events.append(event)
        if isinstance(event, Progress) and event.stage == "encode":
            controls.stop.set()
    assert isinstance(events[-1], Finished) and events[-1].reason == "cancelled"
    assert not (tmp_path / "ds").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no hidden partial folder either


def test_cancel_while_training_tokenizer(corpus, tmp_path: Path) -> None:
    controls = Controls()
    events = []
    for event in prepare_dataset([corpus[0]], tmp_path / "ds", SPEC, controls):
        events.append(event)
        if isinstance(event, Log) and "training" in event.message:
            controls.stop.set()
    assert events[-1].reason == "cancelled" and "tokenizer" in events[-1].message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_cancel_while_scanning(corpus, tmp_path: Path) -> None:
    controls = Controls()
    controls.stop.set()
    fin, _ = run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC, controls))
    assert fin.reason == "cancelled" and not (tmp_path / "ds").exists()


def test_append_adds_only_new_files(corpus, tmp_path: Path) -> None:
    path, docs = corpus
    run(prepare_dataset([path], tmp_path / "ds", SPEC))
    before = {s: (tmp_path / "ds" / f"{s}.bin").read_bytes() for s in ("train", "val")}
    tok_hash = tokenizer_sha256(tmp_path / "ds")
    extra_docs = make_docs(40, seed=9, prefix="Extra ")
    extra = write_docs(tmp_path / "in2" / "extra.txt", extra_docs)
    chat = tmp_path / "in2" / "chat.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "yo"}]}) + "\n")
    fin, _ = run(append_to_dataset(tmp_path / "ds", [path, extra, chat]))
    assert fin.reason == "completed", fin.message
    verdicts = {Path(f["path"]).name: f["verdict"] for f in fin.result["files"]}
    assert verdicts == {"docs.txt": "duplicate", "extra.txt": "ok", "chat.jsonl": "ok"}
    store = TokenStore(tmp_path / "ds")
    for s in ("train", "val"):
        after = (tmp_path / "ds" / f"{s}.bin").read_bytes()
        assert after[:len(before[s])] == before[s]  # old data untouched, new data appended
    assert sorted(decoded_docs(store, "train") + decoded_docs(store, "val")) == sorted(docs + extra_docs)
    assert all(split_of(t, SPEC.seed, SPEC.val_fraction) == "val" for t in decoded_docs(store, "val"))
    assert tokenizer_sha256(tmp_path / "ds") == tok_hash
    assert len(store.manifest["sources"]) == 3 and store.manifest["records"]["chat"]["count"] == 1
    assert fin.result["records"] == {"chat": 1}
    # Appending the same files again adds nothing and says why.
    fin, _ = run(append_to_dataset(tmp_path / "ds", [extra]))
    assert fin.reason == "failed" and "duplicate" in fin.message
    assert "already in the dataset" in fin.result["files"][0]["reason"]


def test_cancelled_append_leaves_dataset_unchanged(corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC))
    snapshot = {p.name: p.read_bytes() for p in (tmp_path / "ds").iterdir() if p.is_file()}
    extra = write_docs(tmp_path / "in2" / "extra.txt", make_docs(200, seed=5))
    chat = tmp_path / "in2" / "chat.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "a"},
                                             {"role": "assistant", "content": "b"}]}) + "\n")
    monkeypatch.setattr(data_mod, "BATCH_CHARS", 300)
    controls = Controls()
    events = []
    for event in append_to_dataset(tmp_path / "ds", [chat, extra], controls):
        events.append(event)
        if isinstance(event, Progress) and event.stage == "encode" and event.done > 2000:
            controls.stop.set()
    assert events[-1].reason == "cancelled"
    now = {p.name: p.read_bytes() for p in (tmp_path / "ds").iterdir() if p.is_file()}
    assert now == snapshot
    assert not (tmp_path / "ds" / "records" / "chat.jsonl").exists() or \
        (tmp_path / "ds" / "records" / "chat.jsonl").read_bytes() == b""


def test_interrupted_append_tail_is_ignored_then_repaired(corpus, tmp_path: Path) -> None:
    run(prepare_dataset([corpus[0]], tmp_path / "ds", SPEC))
    train_bin = tmp_path / "ds" / "train.bin"
    committed = train_bin.read_bytes()
    with open(train_bin, "ab") as fh:  # what a crash in the middle of an append leaves behind
        fh.write(np.arange(50, dtype=np.uint16).tobytes())
    store = TokenStore(tmp_path / "ds")
    assert len(store.tokens("train")) == len(committed) // 2  # readers see only committed tokens
    extra = write_docs(tmp_path / "in2" / "extra.txt", make_docs(10, seed=11))
    fin, _ = run(append_to_dataset(tmp_path / "ds", [extra]))
    assert fin.reason == "completed"
    after = train_bin.read_bytes()
    assert after[:len(committed)] == committed
    assert len(after) // 2 == TokenStore(tmp_path / "ds").manifest["splits"]["train"]["tokens"]


def test_append_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a prepared dataset"):
        list(append_to_dataset(tmp_path, [tmp_path]))


def test_sample_corpus_is_generated_deterministically_and_committed(tmp_path: Path) -> None:
    from desktop_app.engine.data.sample_corpus import generate, sample_corpus_files, write_corpus
    from desktop_app.engine.paths import sample_corpus_dir

    first, second = generate(), generate()
    assert first == second
    total = sum(len(t.encode()) for t in first.values())
    assert 1_000_000 <= total <= 2_000_000
    committed = {p.name: p.read_text(encoding="utf-8") for p in sample_corpus_files()}
    assert committed == first, "resources/sample_corpus is out of date: rerun the generator"
    assert sample_corpus_dir().with_suffix(".md").is_file()
    assert not list(sample_corpus_dir().glob("*.md"))  # the folder holds only corpus text
    written = write_corpus(tmp_path / "sc")
    assert [p.name for p in written] == list(first)
    assert generate(seed=1) != first


def test_sample_corpus_prepares_into_training_windows(tmp_path: Path) -> None:
    from desktop_app.engine.data.sample_corpus import sample_corpus_files

    fin, _ = run(prepare_dataset(sample_corpus_files()[:2], tmp_path / "ds",
                                 DataSpec(vocab_size=512, context_length=64)))
    assert fin.reason == "completed"
    assert fin.result["chunks"]["train"] > 500 and fin.result["chunks"]["val"] > 10


def test_token_writer_single_and_batch_writes_then_rollback(tmp_path: Path) -> None:
    from desktop_app.engine.data.token_store import TokenWriter

    w = TokenWriter(tmp_path, np.uint16, eos_id=2)
    w.write("train", [10, 11])
    w.write("train", [12], end_of_document=False)
    w.write_batch("train", [[13], [14, 15], [16]], [True, False, True])
    w.write_batch("val", [[20]], [True])
    w.close()
    assert np.fromfile(tmp_path / "train.bin", dtype=np.uint16).tolist() == [10, 11, 2, 12, 13, 2, 14, 15, 16, 2]
    assert np.load(tmp_path / "train.docs.npy").tolist() == [3, 3, 4]
    assert np.load(tmp_path / "val.docs.npy").tolist() == [2]
    w2 = TokenWriter(tmp_path, np.uint16, eos_id=2)
    assert w2.tokens == {"train": 10, "val": 2} and w2.documents == {"train": 3, "val": 1}
    w2.write_batch("train", [[99, 98]], [True])
    w2.rollback()
    assert np.fromfile(tmp_path / "train.bin", dtype=np.uint16).tolist()[-1] == 2
    assert (tmp_path / "train.bin").stat().st_size == 20


def test_records_only_dataset_warns_that_pretraining_needs_text(tmp_path: Path) -> None:
    import json

    from desktop_app.engine.data.prepare import prepare_dataset
    from desktop_app.engine.events import Finished, Log
    from desktop_app.engine.specs import DataSpec

    chat = tmp_path / "chat.jsonl"
    chat.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": f"hi {i}"},
                                                       {"role": "assistant", "content": f"hello {i}"}]})
                              for i in range(40)) + "\n", encoding="utf-8")
    events = list(prepare_dataset([chat], tmp_path / "ds", DataSpec(vocab_size=300, context_length=16)))
    warnings = [e.message for e in events if isinstance(e, Log) and e.level == "warning"]
    assert any("no plain text" in w and "records/" in w for w in warnings), warnings
    assert isinstance(events[-1], Finished)
