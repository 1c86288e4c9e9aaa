"""The GGUF models the window remembers opening, as the Library lists them: those still there and still GGUF, each
once, in the order remembered, less the workspace's own (listed under Models and Exports already)."""

from __future__ import annotations

from desktop_app.engine.workspace import remembered_gguf_files


def _gguf(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF" + bytes(60))  # the magic is what marks a GGUF file (Ollama's blobs have no suffix)
    return path


def test_existing_gguf_files_are_kept_once_in_order(tmp_path):
    a, b = _gguf(tmp_path / "a.gguf"), _gguf(tmp_path / "store" / "blobs" / "sha256-0123")
    assert remembered_gguf_files([str(b), str(a), str(b), a]) == [b, a]
    assert remembered_gguf_files([str(tmp_path / "store" / ".." / "a.gguf")]) == [tmp_path / "store" / ".." / "a.gguf"]


def test_folders_missing_files_and_other_files_are_left_out(tmp_path):
    a = _gguf(tmp_path / "a.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    paths = ["", "   ", "\x00choose-gguf", str(tmp_path), str(tmp_path / "gone.gguf"), str(text), str(empty), str(a)]
    assert remembered_gguf_files(paths) == [a]
    assert remembered_gguf_files([]) == []


def test_files_listed_elsewhere_are_excluded_however_they_are_spelled(tmp_path):
    mine, other = _gguf(tmp_path / "exports" / "mine.gguf"), _gguf(tmp_path / "other.gguf")
    spelled = tmp_path / "exports" / "." / "mine.gguf"
    assert remembered_gguf_files([str(spelled), str(other)], exclude=[mine]) == [other]
