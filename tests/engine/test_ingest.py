"""File discovery, per-file verdicts (the malformed corpus), encodings and bounded-memory streaming."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from ingest_cases import EXPECTED_VERDICTS, GOOD_TEXT

from desktop_app.engine.data import ingest
from desktop_app.engine.data.ingest import Doc, Record, discover, inspect_file, read_items, scan
from desktop_app.engine.data.prepare import scan_paths


def _by_name(root: Path, infos: list) -> dict[str, object]:
    return {Path(i.path).relative_to(root).as_posix(): i for i in infos}


def test_every_malformed_case_gets_its_verdict(malformed_corpus: dict[str, Path]) -> None:
    root = malformed_corpus["good.txt"].parent
    infos = _by_name(root, list(scan([root])))
    assert {k: v.verdict for k, v in infos.items()} == EXPECTED_VERDICTS
    for name, info in infos.items():
        assert info.reason, f"{name} has no reason"


def test_reasons_name_line_and_offset(malformed_corpus: dict[str, Path]) -> None:
    root = malformed_corpus["good.txt"].parent
    infos = _by_name(root, list(scan([root])))
    assert infos["bad_line.jsonl"].line == 3 and "line 3" in infos["bad_line.jsonl"].reason
    assert "invalid JSON" in infos["bad_line.jsonl"].reason
    assert "role 'wizard'" in infos["bad_record.jsonl"].reason
    assert infos["invalid_utf8.txt"].offset == 11 and "byte offset 11" in infos["invalid_utf8.txt"].reason
    assert infos["latin1.txt"].offset == 3
    assert infos["nul.txt"].offset == 5 and "NUL" in infos["nul.txt"].reason
    assert "PNG" in infos["image.txt"].reason
    assert "ZIP" in infos["archive.txt"].reason
    assert "loop" in infos["loop_a.txt"].reason
    assert "broken symbolic link" in infos["dangling.txt"].reason
    assert ".csv" in infos["data.csv"].reason
    assert infos["good_copy.txt"].reason.startswith("same content as") and "good.txt" in infos["good_copy.txt"].reason
    assert "0 bytes" in infos["empty.txt"].reason
    assert "whitespace" in infos["whitespace.txt"].reason


def test_encodings_and_formats(malformed_corpus: dict[str, Path]) -> None:
    root = malformed_corpus["good.txt"].parent
    infos = _by_name(root, list(scan([root])))
    assert infos["bom_utf8.txt"].encoding == "utf-8-bom"
    assert infos["bom_utf16le.txt"].encoding == "utf-16-le-bom"
    assert infos["bom_utf16be.txt"].encoding == "utf-16-be-bom"
    assert infos["good.txt"].encoding == "utf-8"
    assert (infos["good.txt"].format, infos["good.txt"].documents) == ("text", 3)
    assert infos["chat.jsonl"].format == "chat" and infos["chat.jsonl"].records == {"chat": 2}
    assert infos["instruct.jsonl"].records == {"instruction": 2}
    assert infos["prefs.jsonl"].records == {"preference": 1}
    assert infos["texts.jsonl"].format == "jsonl-text" and infos["texts.jsonl"].documents == 2
    assert len(infos["good.txt"].sha256) == 64
    assert infos["good.txt"].sha256 == infos["good_copy.txt"].sha256


def test_decoded_text_of_boms_and_utf16(malformed_corpus: dict[str, Path]) -> None:
    docs = [d.text for d in read_items(malformed_corpus["bom_utf16le.txt"])]
    assert docs == ["UTF-16 little endian текст."]
    docs = [d.text for d in read_items(malformed_corpus["bom_utf16be.txt"])]
    assert docs == ["UTF-16 big endian 文字."]
    docs = [d.text for d in read_items(malformed_corpus["bom_utf8.txt"])]
    assert docs == ["Text with a UTF-8 BOM."]  # the BOM is not part of the text
    docs = [d.text for d in read_items(malformed_corpus["crlf.txt"])]
    assert docs == ["Line one.\r\nLine two\twith a tab.", "Second paragraph."]


def test_paragraph_documents(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text(GOOD_TEXT)
    docs = list(read_items(f))
    assert [d.text for d in docs] == [
        "The quick brown fox jumps over the lazy dog.\nIt was a sunny day.",
        "Anna found a red ball in the park. She played with it all day.",
        "Ben: Hello!\nAnna: Hi, Ben. How are you?",
    ]
    assert all(d.first and d.last for d in docs)


def test_records_are_normalised(malformed_corpus: dict[str, Path]) -> None:
    items = list(read_items(malformed_corpus["instruct.jsonl"]))
    assert all(isinstance(i, Record) for i in items)
    assert items[1].data == {"instruction": "Say hi", "input": "", "output": "hi"}
    chat = list(read_items(malformed_corpus["chat.jsonl"]))
    assert chat[0].data["messages"][0] == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize(("line", "reason"), [
    ('[1, 2]', "expected a JSON object"),
    ('{"foo": 1}', "no 'text'"),
    ('{"messages": []}', "non-empty list"),
    ('{"messages": [{"role": "user", "content": "hi"}]}', "assistant message"),
    ('{"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}', "no text 'content'"),
    ('{"prompt": "p", "chosen": "c"}', "'rejected'"),
    ('{"instruction": "i"}', "'output'"),
    ('{"instruction": "i", "output": "o", "input": 3}', "'input' must be text"),
])
def test_bad_jsonl_records(tmp_path: Path, line: str, reason: str) -> None:
    f = tmp_path / "x.jsonl"
    f.write_text('{"text": "ok"}\n\n' + line + "\n")
    info = inspect_file(f)
    assert info.verdict == "bad-jsonl"
    assert info.line == 3 and reason in info.reason


def test_mixed_jsonl_and_blank_jsonl(tmp_path: Path) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_text('{"text": "doc"}\n{"prompt": "p", "chosen": "c", "rejected": "r"}\n')
    info = inspect_file(f)
    assert info.ok and info.format == "mixed" and info.documents == 1 and info.records == {"preference": 1}
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n  \n")
    assert inspect_file(blank).verdict == "empty"


def test_jsonl_line_longer_than_limit_is_refused_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "MAX_JSONL_LINE", 1000)
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 256)
    f = tmp_path / "long.jsonl"
    f.write_text('{"text": "short"}\n{"text": "' + "x" * 5000 + '"}\n')
    info = inspect_file(f)
    assert info.verdict == "bad-jsonl" and info.line == 2 and "longer than" in info.reason


def test_unreadable_file_by_permissions(tmp_path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root can read chmod 000 files; covered by the mocked test below")
    f = tmp_path / "secret.txt"
    f.write_text("hidden")
    f.chmod(0)
    try:
        info = inspect_file(f)
    finally:
        f.chmod(0o644)
    assert info.verdict == "unreadable" and "permission denied" in info.reason


def test_unreadable_file_mocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = tmp_path / "good.txt", tmp_path / "secret.txt"
    good.write_text("fine text")
    bad.write_text("hidden")
    real_open = ingest._open_binary

    def fake_open(path: Path):
        if Path(path).name == "secret.txt":
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path)

    monkeypatch.setattr(ingest, "_open_binary", fake_open)
    infos = {Path(i.path).name: i for i in scan([tmp_path])}
    assert infos["secret.txt"].verdict == "unreadable" and "permission denied" in infos["secret.txt"].reason
    assert infos["good.txt"].ok


def test_unlistable_folder_mocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    real_scandir = os.scandir

    def fake_scandir(path):
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(ingest.os, "scandir", fake_scandir)
    found = list(discover([locked]))
    assert len(found) == 1 and found[0][1].verdict == "unreadable" and "cannot list folder" in found[0][1].reason


def test_missing_path_and_fifo_and_hidden(tmp_path: Path) -> None:
    (tmp_path / ".hidden.txt").write_text("secret")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x.txt").write_text("object")
    os.mkfifo(tmp_path / "pipe.txt")  # opening it would block forever: must not be opened
    infos = {Path(i.path).name: i for i in scan([tmp_path, tmp_path / "nope.txt"])}
    assert set(infos) == {"pipe.txt", "nope.txt"}
    assert infos["pipe.txt"].verdict == "unsupported" and "regular file" in infos["pipe.txt"].reason
    assert infos["nope.txt"].verdict == "not-found"


def test_folder_symlink_cycle_terminates(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "doc.txt").write_text("text")
    os.symlink(tmp_path / "a", tmp_path / "a" / "again")  # a/again -> a
    found = [p for p, _ in discover([tmp_path])]
    assert [p.name for p in found] == ["doc.txt"]


def test_same_file_given_twice_is_listed_once(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("text")
    assert len(list(scan([f, tmp_path, f]))) == 1


def test_scan_paths_yields_file_verdict_events(malformed_corpus: dict[str, Path]) -> None:
    events = list(scan_paths([malformed_corpus["good.txt"], malformed_corpus["nul.txt"]]))
    assert [e.type for e in events] == ["file", "file"]
    assert [e.verdict for e in events] == ["ok", "binary"]
    assert events[0].documents == 3 and events[0].to_dict()["path"].endswith("good.txt")


# ------------------------------------------------------------------------------ streaming, big inputs

def test_multibyte_characters_across_block_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 7)  # odd size: splits 2-, 3- and 4-byte characters
    text = "Привет 你好 🎉👍🏽 mixed " * 50
    for name, data in (("u8.txt", text.encode()), ("u16.txt", b"\xff\xfe" + text.encode("utf-16-le"))):
        f = tmp_path / name
        f.write_bytes(data)
        info = inspect_file(f)
        assert info.ok, info.reason
        assert "".join(d.text for d in read_items(f)) == text.rstrip("\n")


def test_invalid_byte_offset_deep_in_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 64)
    data = ("é" * 1000).encode() + b"\xc3(" + b"tail"
    f = tmp_path / "bad.txt"
    f.write_bytes(data)
    info = inspect_file(f)
    assert info.verdict == "invalid-encoding" and info.offset == 2000
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"a" * 1000 + b"\x00")
    assert inspect_file(nul).offset == 1000


def test_single_line_file_is_cut_into_bounded_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "PIECE_CHARS", 1000)
    monkeypatch.setattr(ingest, "BLOCK_BYTES", 333)
    words = " ".join(f"word{i}" for i in range(5000))
    f = tmp_path / "oneline.txt"
    f.write_text(words)
    docs = list(read_items(f))
    assert len(docs) > 20 and all(len(d.text) <= 1000 for d in docs)
    assert "".join(d.text for d in docs) == words  # nothing lost or duplicated
    assert docs[0].first and not docs[0].last and docs[-1].last
    assert sum(d.first for d in docs) == 1
    assert all(d.text[0] == " " for d in docs[1:])  # cut before whitespace, never inside a word
    # No whitespace at all: hard cuts between characters, still lossless.
    f.write_text("x" * 4500)
    assert [len(d.text) for d in read_items(f)] == [1000, 1000, 1000, 1000, 500]
    # A JSONL text longer than a piece is cut the same way.
    j = tmp_path / "long.jsonl"
    j.write_text('{"text": "' + words + '"}\n')
    jdocs = list(read_items(j))
    assert len(jdocs) > 1 and "".join(d.text for d in jdocs) == words and jdocs[-1].last


def test_big_single_line_file_streams_with_bounded_memory(tmp_path: Path) -> None:
    f = tmp_path / "big.txt"
    line = ("lorem ipsum dolor sit amet " * 40).encode()
    with open(f, "wb") as fh:
        for _ in range((24 << 20) // len(line)):
            fh.write(line)  # ~24 MB with no newline at all
    size = f.stat().st_size
    tracemalloc.start()
    try:
        pieces = 0
        chars = 0
        for item in read_items(f):
            assert isinstance(item, Doc)
            pieces += 1
            chars += len(item.text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert chars == size and pieces >= size // ingest.PIECE_CHARS
    assert peak < 12 << 20, f"peak Python memory {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB file"


def _reference_docs(text: str) -> list[str]:
    """Documents of a whole text, computed the obvious (non-streaming) way."""
    docs = []
    paragraph: list[str] = []
    for line in text.split("\n"):
        if line.strip():
            paragraph.append(line)
        elif paragraph:
            docs.append("\n".join(paragraph))
            paragraph = []
    if paragraph:
        docs.append("\n".join(paragraph))
    return [d[:-1] if d.endswith("\r") else d for d in docs]


@pytest.mark.parametrize("seed", range(200))
def test_streaming_documents_match_the_obvious_split(seed: int) -> None:
    import random

    r = random.Random(seed)
    alphabet = ["a", "b", "é", "🎉", " ", " ", "\t", "\n", "\n", "\r\n", "word", "  \n"]
    text = "".join(r.choice(alphabet) for _ in range(r.randint(0, 400)))
    expected = _reference_docs(text)
    blocks = []
    i = 0
    while i < len(text):
        n = r.randint(1, 12)
        blocks.append(text[i:i + n])
        i += n
    for limit in (10**9, r.randint(12, 40)):
        docs = list(ingest.iter_text_docs(iter(blocks), limit))
        joined, current = [], ""
        for d in docs:
            assert d.first == (current == "")
            current += d.text
            if d.last:
                joined.append(current)
                current = ""
        assert current == ""
        assert joined == expected, (text, limit)


def test_utf16_without_bom_gets_a_helpful_verdict(tmp_path: Path) -> None:
    f = tmp_path / "u16.txt"
    f.write_bytes("Plain English text saved as UTF-16.\n".encode("utf-16-le"))
    info = inspect_file(f)
    assert info.verdict == "invalid-encoding" and "UTF-16" in info.reason and "byte-order mark" in info.reason


def test_a_prepared_dataset_inside_an_input_folder_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text")
    ds = tmp_path / "ds"
    (ds / "records").mkdir(parents=True)
    (ds / "manifest.json").write_text("{}")
    (ds / "tokenizer.json").write_text("{}")
    (ds / "records" / "chat.jsonl").write_text("{}\n")
    assert [p.name for p, _ in discover([tmp_path])] == ["a.txt"]


@pytest.mark.parametrize(("data", "verdict", "words"), [
    (b"%PDF-1.7\n%binary", "binary", "PDF"),
    (b"\x1f\x8b\x08\x00compressed", "binary", "gzip"),
    (b"\xff\xd8\xff\xe0jpeg", "binary", "JPEG"),
    (b"\xff\xfe\x00\x00h\x00\x00\x00", "invalid-encoding", "UTF-32"),
    (b"\xef\xbb\xbf", "empty", "byte-order mark"),
])
def test_more_magic_numbers(tmp_path: Path, data: bytes, verdict: str, words: str) -> None:
    f = tmp_path / "renamed.txt"
    f.write_bytes(data)
    info = inspect_file(f)
    assert info.verdict == verdict and words in info.reason
