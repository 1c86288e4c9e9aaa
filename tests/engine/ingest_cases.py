"""The malformed-file corpus (and a few good files) the engine tests generate, with the expected verdicts."""

from __future__ import annotations

import codecs
import json
import os
import zipfile
from pathlib import Path

GOOD_TEXT = (
    "The quick brown fox jumps over the lazy dog.\nIt was a sunny day.\n\n"
    "Anna found a red ball in the park. She played with it all day.\n\n"
    "Ben: Hello!\nAnna: Hi, Ben. How are you?\n"
)
UNICODE_TEXT = ("Привет, мир! Как дела?\n\n你好，世界。今天天气很好。\n\n"
                "Emoji 🎉👍🏽 and mixed: naïve café 東京 Москва\n")


def _jsonl(rows: list[object]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def make_malformed_corpus(tmp_path: Path) -> dict[str, Path]:
    """name -> path of every case; the expected verdict of each is in EXPECTED_VERDICTS."""
    root = tmp_path / "corpus"
    root.mkdir()
    files: dict[str, Path] = {}

    def write(name: str, data: bytes) -> Path:
        path = root / name
        path.write_bytes(data)
        files[name] = path
        return path

    write("good.txt", GOOD_TEXT.encode())
    write("good_copy.txt", GOOD_TEXT.encode())  # duplicate of good.txt
    write("notes.md", b"# Title\n\nSome *markdown* text here.\n")
    write("unicode.txt", UNICODE_TEXT.encode())
    write("crlf.txt", b"Line one.\r\nLine two\twith a tab.\r\n\r\nSecond paragraph.\r\n")
    write("bom_utf8.txt", codecs.BOM_UTF8 + b"Text with a UTF-8 BOM.\n")
    write("bom_utf16le.txt", codecs.BOM_UTF16_LE + "UTF-16 little endian текст.\n".encode("utf-16-le"))
    write("bom_utf16be.txt", codecs.BOM_UTF16_BE + "UTF-16 big endian 文字.\n".encode("utf-16-be"))
    write("empty.txt", b"")
    write("whitespace.txt", b"  \n\t\n\r\n   \n")
    write("nul.txt", b"hello\x00world this has a NUL byte\n")
    write("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(64)))
    zbuf = root / "_tmp.zip"
    with zipfile.ZipFile(zbuf, "w") as zf:
        zf.writestr("a.txt", "zipped text")
    write("archive.txt", zbuf.read_bytes())
    zbuf.unlink()
    write("invalid_utf8.txt", b"good start \xff\xfe bad bytes\n")
    write("latin1.txt", "caf\u00e9 cr\u00e8me".encode("latin-1"))
    write("chat.jsonl", _jsonl([
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello!"}]},
        {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
    ]).encode())
    write("instruct.jsonl", _jsonl([
        {"instruction": "Add the numbers", "input": "2 3", "output": "5"},
        {"instruction": "Say hi", "output": "hi"},
    ]).encode())
    write("prefs.jsonl", _jsonl([{"prompt": "Colour of the sky?", "chosen": "Blue.", "rejected": "Green."}]).encode())
    write("texts.jsonl", _jsonl([{"text": "A document from JSONL."}, {"text": "Another one, with ünïcödé."}]).encode()
          + b"\n")
    write("bad_line.jsonl", (_jsonl([{"text": "fine"}, {"text": "fine too"}]) + '{"text": "broken\n').encode())
    write("bad_record.jsonl", _jsonl([{"messages": [{"role": "wizard", "content": "x"}]}]).encode())
    write("data.csv", b"a,b\n1,2\n")
    # Symlink loop: a -> b -> a.
    loop_a, loop_b = root / "loop_a.txt", root / "loop_b.txt"
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    files["loop_a.txt"], files["loop_b.txt"] = loop_a, loop_b
    os.symlink(root / "missing.txt", root / "dangling.txt")
    files["dangling.txt"] = root / "dangling.txt"
    sub = root / "nested" / "deeper"
    sub.mkdir(parents=True)
    write("nested/deeper/inner.md", b"Nested document text.\n")
    return files


EXPECTED_VERDICTS = {
    "good.txt": "ok",
    "good_copy.txt": "duplicate",
    "notes.md": "ok",
    "unicode.txt": "ok",
    "crlf.txt": "ok",
    "bom_utf8.txt": "ok",
    "bom_utf16le.txt": "ok",
    "bom_utf16be.txt": "ok",
    "empty.txt": "empty",
    "whitespace.txt": "whitespace-only",
    "nul.txt": "binary",
    "image.txt": "binary",
    "archive.txt": "binary",
    "invalid_utf8.txt": "invalid-encoding",
    "latin1.txt": "invalid-encoding",
    "chat.jsonl": "ok",
    "instruct.jsonl": "ok",
    "prefs.jsonl": "ok",
    "texts.jsonl": "ok",
    "bad_line.jsonl": "bad-jsonl",
    "bad_record.jsonl": "bad-jsonl",
    "data.csv": "unsupported",
    "loop_a.txt": "symlink-loop",
    "loop_b.txt": "symlink-loop",
    "dangling.txt": "not-found",
    "nested/deeper/inner.md": "ok",
}
