"""`folder_chat_template` on what a model list can hold besides folders: a GGUF file (its template is in its
metadata), any other file, a GGUF file cut short, and a choice's data that is no path at all (a NUL in it)."""

from __future__ import annotations

import shutil


def test_a_gguf_file_gives_the_template_in_its_metadata(tiny_gguf, tmp_path):
    from desktop_app.engine.data.tokenization import CHAT_TEMPLATE
    from desktop_app.engine.model.folders import folder_chat_template, gguf_chat_template
    from desktop_app.engine.model.gguf_file import read_header

    assert read_header(tiny_gguf).chat_template  # the export carries the tokenizer's template
    assert folder_chat_template(tiny_gguf) == gguf_chat_template(tiny_gguf) == CHAT_TEMPLATE.strip()
    blob = shutil.copy(tiny_gguf, tmp_path / "sha256-0123")  # Ollama's blobs have no .gguf suffix
    assert folder_chat_template(blob) == CHAT_TEMPLATE.strip()


def test_files_that_are_no_model_and_paths_that_are_none_give_no_template(tiny_gguf, tmp_path):
    from desktop_app.engine.model.folders import folder_chat_template, gguf_chat_template

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:40])  # the magic, then a header that stops short
    text = tmp_path / "tiny.Modelfile"
    text.write_text("FROM ./tiny.gguf\n")
    assert folder_chat_template(cut) == "" and gguf_chat_template(cut) == ""
    assert folder_chat_template(text) == "" and gguf_chat_template(text) == ""
    assert folder_chat_template("\x00choose-gguf") == ""  # was: ValueError: embedded null byte
    assert folder_chat_template(tmp_path / "bad\x00name") == ""

