"""Which model the Generate tab uses and says it uses: the run that finished last unless the person chose one, each
reply named after its model with a line where the chat changed model, an exported GGUF chosen from the list
(no error from its chat template), and the mode buttons readable in a small window."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest


def _add_run(workspace, trained, name: str, finished_at: float, *, training: bool = False):
    """A copy of the tiny run as runs/NAME whose metrics file was last written at `finished_at`; `training`: its
    last record is a step, as while it still trains."""
    run = shutil.copytree(trained[1], workspace.folder("runs") / name)
    metrics = run / "metrics.jsonl"
    if training:
        with open(metrics, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"type": "step", "step": 7, "loss": 1.0}) + "\n")
    os.utime(metrics, (finished_at, finished_at))
    return run


def test_the_newest_finished_run_is_chosen_until_the_person_chooses(window, workspace, trained):
    gen = window.generate_tab
    box = gen.source_box
    now = time.time()
    first = _add_run(workspace, trained, "first", now - 100)
    window.train_tab.run_changed.emit(str(first))  # what the Train tab says when a run ends
    assert box.currentData() == str(first)
    second = _add_run(workspace, trained, "second", now - 50)
    window.train_tab.run_changed.emit(str(second))
    assert box.currentData() == str(second)  # the run that finished after it
    _add_run(workspace, trained, "still-training", now, training=True)
    window.ctx.workspace_items_changed.emit()
    assert box.currentData() == str(second)  # a run still training has not finished

    # The person picks the first run in the list: a run finishing later does not take its place.
    index = box.findData(str(first))
    box.setCurrentIndex(index)
    box.activated.emit(index)
    third = _add_run(workspace, trained, "third", now + 50)
    window.train_tab.run_changed.emit(str(third))
    assert box.currentData() == str(first) and box.findData(str(third)) >= 0


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A tiny random llama with a chat template and room for a few turns."""
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec

    folder = tmp_path_factory.mktemp("models") / "chatty"
    spec = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 128, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=3).save_pretrained(folder)
    hf_tokenizer(train_tokenizer(["the cat sat on the mat. hello, and then?"] * 30, "byte-bpe", 320)).save_pretrained(
        folder)
    return folder


def _reply(gen, qtbot, text: str):
    gen.set_chat_mode(True)
    assert gen.generate(text)
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not gen.ctx.errors, gen.ctx.errors
    return gen.chat_view.last("assistant")


def test_a_model_switch_is_marked_in_the_chat_and_each_reply_names_its_model(window, chat_model, qtbot):
    models = window.ctx.workspace.folder("models")
    one, two = (shutil.copytree(chat_model, models / name) for name in ("chatty", "other"))
    window.ctx.workspace_items_changed.emit()
    gen = window.generate_tab
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=4, temperature=0.0))
    gen.select_source(str(one))
    first = _reply(gen, qtbot, "hello")
    assert "chatty" in first.who.text() and first.line == "" and gen.chat_view.lines() == []
    assert _reply(gen, qtbot, "more").line == ""  # the same model: no line

    gen.select_source(str(two))
    switched = _reply(gen, qtbot, "and then?")
    assert switched.line == "model: other" and "other" in switched.who.text()
    assert len(gen.history) == 6  # the conversation goes on: the other model sees the first one's replies
    marker = switched.parentWidget().findChild(type(first.who), "modelLine")
    assert marker is not None and marker.isVisibleTo(gen) and marker.text() == "model: other"
    text = gen.output_text(0)
    assert "\n\nmodel: other\n\nModel: " in text and text.count("model: ") == 1
    # Regenerate with the first model again: the new reply is marked as the first model's.
    gen.select_source(str(one))
    gen.set_chat_mode(True)
    gen.chat_view.last("assistant").regen_btn.click()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert gen.chat_view.lines() == [] and "chatty" in gen.chat_view.last("assistant").who.text()
    gen.clear_btn.click()  # New chat: nothing to mark
    assert _reply(gen, qtbot, "hi").line == "" and gen.chat_view.lines() == []


@pytest.fixture(scope="module")
def exported_gguf(tmp_path_factory, trained):
    """The tiny run exported by the app as a GGUF file (f32)."""
    from desktop_app.engine.export.hf import export_model

    out = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    assert list(export_model(trained[1], "gguf", out, gguf_type="f32"))[-1].reason == "completed"
    return out


def test_choosing_an_exported_gguf_reads_its_template_from_the_file(window, workspace, exported_gguf, qtbot,
                                                                     monkeypatch):
    import desktop_app.ui.widgets.gguf_models as gguf_models
    from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF

    listed = shutil.copy(exported_gguf, workspace.folder("exports") / "tiny.gguf")
    gen = window.generate_tab
    window.tabs.setCurrentWidget(gen)  # the mode is chosen once the tab shows
    gen.refresh_sources()
    box = gen.source_box
    # "GGUF file…" then the exported file (an exception in the slot would fail the test)
    monkeypatch.setattr(gguf_models.QFileDialog, "getOpenFileName", lambda *a, **k: (str(exported_gguf), ""))
    index = box.findData(CHOOSE_GGUF)
    box.setCurrentIndex(index)
    box.activated.emit(index)
    assert box.currentData() == str(exported_gguf) and not window.ctx.errors
    # the export listed in the workspace, picked from the list
    index = box.findData(str(listed))
    box.setCurrentIndex(index)
    box.activated.emit(index)
    assert box.currentData() == str(listed) and not window.ctx.errors
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=4, chat=False))
    assert gen.generate("the cat")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    assert gen.stats and gen.output_text(0) == gen.stats[0].text



def test_opens_in_chat_takes_any_entry_of_the_model_list(exported_gguf):
    from desktop_app.ui.generate_support import opens_in_chat
    from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF

    # the export of a pretraining run: its GGUF carries only the template every tokenizer trained here gets, which
    # is no sign that the model can chat, so it completes text (as the run itself does)
    assert not opens_in_chat(exported_gguf)
    assert not opens_in_chat(CHOOSE_GGUF) and not opens_in_chat("")  # "GGUF file…", "Choose a model…"


@pytest.mark.parametrize("size", [(1024, 700), (1366, 768)])
def test_the_mode_buttons_fit_their_text_in_a_small_window(window, qtbot, size):
    from PySide6.QtGui import QFont, QFontMetrics
    from PySide6.QtWidgets import QPushButton

    from desktop_app.ui.theme import QSS

    window.setStyleSheet(QSS)  # the app's theme: a checked mode button's text is bold
    gen = window.generate_tab
    window.tabs.setCurrentWidget(gen)
    window.resize(*size)
    for chat in (False, True):
        gen.set_chat_mode(chat)
        qtbot.wait(20)
        for b in (gen.chat_btn, gen.complete_btn):
            plain = QPushButton(b.text(), window)  # the theme's padding around the same text, not bold
            bold = QFont(b.font())
            bold.setWeight(QFont.Weight.DemiBold)  # the theme's font-weight: 600
            wider = QFontMetrics(bold).horizontalAdvance(b.text()) - b.fontMetrics().horizontalAdvance(b.text())
            assert b.sizeHint().width() <= b.geometry().width(), (b.text(), size)
            assert plain.sizeHint().width() + wider <= b.geometry().width(), (b.text(), size)
            plain.deleteLater()


def test_a_gguf_with_a_chat_template_of_its_own_opens_in_chat(tmp_path):
    import json

    from desktop_app.engine.data.tokenization import save_tokenizer, train_tokenizer
    from desktop_app.engine.export.hf import export_model
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec
    from desktop_app.ui.generate_support import opens_in_chat

    tok = train_tokenizer(["the cat sat on the mat and the dog ran " * 4] * 20, "byte-bpe", 300, 2)
    build_model(ModelSpec("llama", 300, 32, 1, 2, 2, 64, 64), seed=0).save_pretrained(tmp_path / "src")
    save_tokenizer(tok, tmp_path / "src")
    own = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}<|assistant|>"
    (tmp_path / "src" / "tokenizer_config.json").write_text(json.dumps({"chat_template": own}), encoding="utf-8")
    out = tmp_path / "chatty.gguf"
    assert list(export_model(tmp_path / "src", "gguf", out, gguf_type="f32"))[-1].reason == "completed"
    assert opens_in_chat(out)
