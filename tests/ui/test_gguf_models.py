"""GGUF models in the window: the Library lists Ollama's and LM Studio's models (size, architecture, weight type)
and opens them in Generate; the Generate tab and the base picker offer the workspace's .gguf files, the stores'
models and "GGUF file…", and a chosen GGUF generates text."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from ui_helpers import ollama_store


@pytest.fixture
def stores(tmp_path, tiny_gguf, monkeypatch):
    """An Ollama store (a manifest naming the blob) and an LM Studio folder, found through their variables."""
    data = tiny_gguf.read_bytes()
    ollama = tmp_path / "ollama"
    blob = ollama_store(ollama, data)
    lms = tmp_path / "lmstudio" / "someone" / "tiny-GGUF"
    lms.mkdir(parents=True)
    (lms / "tiny-F32.gguf").write_bytes(data)
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setenv("LMSTUDIO_MODELS", str(tmp_path / "lmstudio"))
    return {"ollama": blob, "lmstudio": lms / "tiny-F32.gguf"}


def test_library_lists_store_models_and_opens_them_in_generate(window, stores, qtbot):
    from desktop_app.ui.widgets.gguf_models import STORE_KIND

    lib = window.library_tab
    lib.refresh()
    assert sorted(lib.items(STORE_KIND)) == sorted([str(stores["ollama"]), str(stores["lmstudio"])])
    top = next(lib.tree.topLevelItem(i) for i in range(lib.tree.topLevelItemCount())
               if lib.tree.topLevelItem(i).text(0).startswith("Ollama and LM Studio"))
    labels = [top.child(j).text(0) for j in range(top.childCount())]
    assert "tiny:latest · llama F32" in labels and any("someone/tiny-GGUF/tiny-F32.gguf" in t for t in labels)
    assert lib.select(str(stores["ollama"]))
    details = lib.details.toPlainText()
    assert "Ollama" in details and "llama" in details and "F32" in details and "MB" in details
    assert "works here\nchat, LoRA, QLoRA (dequantized to fine-tune)" in details
    assert lib.generate_btn.isEnabled() and lib.export_btn.isEnabled()
    with qtbot.waitSignal(lib.generate_requested) as sig:
        lib.generate_btn.click()
    assert sig.args == [str(stores["ollama"])]


def test_generate_tab_offers_ggufs_and_generates_with_a_chosen_file(window, workspace, stores, tiny_gguf, qtbot,
                                                                    monkeypatch):
    import shutil

    import desktop_app.ui.widgets.gguf_models as gguf_models
    from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF

    shutil.copy(tiny_gguf, workspace.folder("models") / "mine.gguf")
    gen = window.generate_tab
    gen.refresh_sources()
    box = gen.source_box
    data = [box.itemData(i) for i in range(box.count())]
    assert str(workspace.folder("models") / "mine.gguf") in data and str(stores["ollama"]) in data
    assert data[-1] == CHOOSE_GGUF and box.currentData() != CHOOSE_GGUF
    # "GGUF file…": cancelled keeps the choice; a file is added and selected
    before = box.currentIndex()
    monkeypatch.setattr(gguf_models.QFileDialog, "getOpenFileName", lambda *a, **k: ("", ""))
    box.activated.emit(box.count() - 1)
    assert box.currentIndex() == before
    monkeypatch.setattr(gguf_models.QFileDialog, "getOpenFileName", lambda *a, **k: (str(tiny_gguf), ""))
    box.setCurrentIndex(box.count() - 1)
    box.activated.emit(box.count() - 1)
    assert box.currentData() == str(tiny_gguf)
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=6, chat=False))
    assert gen.generate("the cat")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    assert gen.output_text(0) and gen.stats and len(gen.stats[0].token_ids) >= 1


def test_base_picker_offers_store_models_and_a_gguf_file(qtbot, workspace, settings, stores, tiny_gguf, monkeypatch):
    import desktop_app.ui.widgets.gguf_models as gguf_models
    from desktop_app.ui.widgets.base_picker import BasePicker
    from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF

    mine = workspace.folder("exports") / "mine.gguf"
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_bytes(tiny_gguf.read_bytes())
    picker = BasePicker(lambda: workspace, settings)
    qtbot.addWidget(picker)
    box = picker.box
    data = [box.itemData(i) for i in range(box.count())]
    assert str(mine) in data and str(stores["lmstudio"]) in data and CHOOSE_GGUF in data
    assert data.count(str(mine)) == 1
    seen = []
    picker.changed.connect(seen.append)
    monkeypatch.setattr(gguf_models.QFileDialog, "getOpenFileName", lambda *a, **k: ("", ""))
    box.activated.emit(box.findData(CHOOSE_GGUF))
    assert picker.path() == "" and seen == []
    monkeypatch.setattr(gguf_models.QFileDialog, "getOpenFileName", lambda *a, **k: (str(tiny_gguf), ""))
    box.activated.emit(box.findData(CHOOSE_GGUF))
    assert picker.path() == str(tiny_gguf) and seen == [str(tiny_gguf)]
    assert picker.recent()[0] == str(tiny_gguf) and box.currentData() == str(tiny_gguf)
    assert box.itemData(box.currentIndex(), Qt.ItemDataRole.ToolTipRole) in (str(tiny_gguf), None)
    assert Path(picker.path_label.text()) == tiny_gguf
