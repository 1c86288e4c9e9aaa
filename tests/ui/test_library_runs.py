"""The Library's runs: a demo folder's pretrain and self-play runs are listed under it and its actions reach them
(curves, a model to chat with, its checkpoints), details say method, status and loss in words, Resume is off for a
completed run, and a run that ended offers its next steps (chat, export, fine-tune)."""

from __future__ import annotations

import json
import shutil

import pytest
from ui_helpers import ollama_store

from desktop_app.engine.events import Finished


def _demo(workspace, run):
    """A self-play demo's folder as the demo writes it: corpus, dataset, pretrain/ and selfplay/ runs; the self-play
    run's run.json names no method (the demo passes its objective to train() directly) but it writes rounds."""
    demo = workspace.folder("runs") / "selfplay-demo-20260101-120000"
    (demo / "corpus").mkdir(parents=True)
    (demo / "dataset").mkdir()
    shutil.copytree(run, demo / "pretrain")
    shutil.copytree(run, demo / "selfplay")
    (demo / "selfplay" / "selfplay.jsonl").write_text(json.dumps({"round": 1, "rollouts": [
        {"role": "solver", "type": "deduction", "prompt": "f(2)?", "answer": "3", "verdict": "correct", "reward": 1.0,
         "reason": ""}], "proposals": []}) + "\n", encoding="utf-8")
    with open(demo / "selfplay" / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "step", "step": 7, "total_steps": 100000, "loss": 0.5, "reward": 0.25,
                             "progress": 0.9}) + "\n")
    return demo


def test_a_demo_folder_lists_its_runs_and_its_actions_reach_them(window, populated_workspace, trained, qtbot):
    _dataset, run = trained
    demo = _demo(populated_workspace, run)
    window.ctx.workspace_items_changed.emit()
    lib = window.library_tab
    runs = lib.items("runs")
    assert str(demo) in runs and str(demo / "pretrain") in runs and str(demo / "selfplay") in runs
    assert lib.select(str(demo))
    details = lib.details.toPlainText()
    assert "A folder of 2 runs" in details and "0 checkpoint(s)" not in details and "checkpoint(s)" in details
    item = lib.tree.currentItem()
    assert item.text(1) == "Pretraining → Self-play" and item.childCount() == 2
    assert lib.generate_btn.isEnabled() and lib.plots_btn.isEnabled() and lib.export_btn.isEnabled()
    assert not lib.resume_btn.isEnabled()  # a folder of runs: resume one of them
    lib.generate_btn.click()  # the newest run inside with a checkpoint: the self-play one, not "no config.json"
    assert window.tabs.currentWidget() is window.generate_tab
    assert window.generate_tab.source_box.currentData() == str(demo / "selfplay")
    window.tabs.setCurrentWidget(lib)
    lib.select(str(demo))
    lib.plots_btn.click()
    tab = window.train_tab
    assert window.tabs.currentWidget() is tab
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") > 0, timeout=10000)
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("history"), timeout=5000)
    view = tab.run_view
    assert str(tab.run_dir) == str(demo / "selfplay") and view.method == "selfplay"
    assert view.view_tabs.isTabVisible(view.browser_index)  # the task buffer of a self-play run
    qtbot.waitUntil(lambda: view.task_browser.rollouts.rowCount() == 1, timeout=5000)
    assert "reward" in view.plots.panel_keys()
    assert not window.ctx.errors, window.ctx.errors


def test_run_details_in_words_and_no_resume_for_a_completed_run(window, populated_workspace):
    run = populated_workspace.folder("runs") / "tiny-run"
    window.ctx.workspace_items_changed.emit()
    lib = window.library_tab
    assert lib.select(str(run))
    item = lib.tree.currentItem()
    assert (item.text(1), item.text(2)) == ("Pretraining", "completed") and float(item.text(3)) > 0
    details = lib.details.toPlainText()
    for words in ("Method", "Pretraining", "Status", "completed", "step 6 of 6", "Training loss", "Validation loss",
                  "checkpoint(s)"):
        assert words in details, words
    assert '"format_version"' not in details  # no run.json dump
    assert not lib.resume_btn.isEnabled() and "completed" in lib.resume_btn.toolTip()
    # stopped half-way instead: Resume continues it
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(Finished("stopped", step=6).to_dict()) + "\n")
    lib.refresh()
    lib.select(str(run))
    assert lib.resume_btn.isEnabled() and lib.tree.currentItem().text(2) == "stopped"


def test_a_finished_run_offers_its_next_steps(window, populated_workspace):
    run = populated_workspace.folder("runs") / "tiny-run"
    window.ctx.workspace_items_changed.emit()
    view = window.train_tab.run_view
    assert view.offer_next_steps(str(run))
    assert view.next_bar.isVisibleTo(view) and view.next_buttons["export"].isVisibleTo(view)
    assert not view.next_buttons["merge"].isVisibleTo(view)  # no adapters to merge in a pretraining run
    view.next_buttons["chat"].click()
    assert window.tabs.currentWidget() is window.generate_tab
    assert window.generate_tab.source_box.currentData() == str(run)
    assert not window.generate_tab.chat_mode()  # a pretrained model completes text
    view.next_buttons["export"].click()
    assert window.tabs.currentWidget() is window.library_tab and window.library_tab.selected_path() == str(run)
    view.next_buttons["finetune"].click()
    setup = window.train_tab.setup
    assert setup.current_method().key == "sft" and setup.method_panel.base_model() == str(run)


# --- GGUF models opened in the window ---
@pytest.fixture(scope="module")
def tiny_gguf(tiny_gguf, tmp_path_factory):
    """The shared tiny GGUF (tests/conftest.py) where a download lands, outside any workspace."""
    out = tmp_path_factory.mktemp("opened-gguf") / "downloads" / "tiny-chat.gguf"
    out.parent.mkdir()
    shutil.copy(tiny_gguf, out)
    return out


def _group(lib):
    from desktop_app.ui.widgets.opened_ggufs import GROUP_TITLE

    tops = [lib.tree.topLevelItem(i) for i in range(lib.tree.topLevelItemCount())]
    return next((t for t in tops if t.text(0).startswith(GROUP_TITLE)), None)


def test_a_gguf_opened_as_a_lora_base_is_listed_in_the_library(window, tiny_gguf, monkeypatch, qtbot):
    import desktop_app.ui.widgets.gguf_models as gguf_models
    from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF
    from desktop_app.ui.widgets.opened_ggufs import GGUF_KIND

    lib = window.library_tab
    assert _group(lib) is None and lib.items(GGUF_KIND) == []  # nothing opened yet: no empty group
    window.tabs.setCurrentWidget(window.train_tab)
    setup = window.train_tab.setup
    setup.set_method("lora")
    picker = setup.method_panel.base_picker
    monkeypatch.setattr(gguf_models.QFileDialog, "getOpenFileName", lambda *a, **k: (str(tiny_gguf), ""))
    picker.box.activated.emit(picker.box.findData(CHOOSE_GGUF))  # "GGUF file…", the file chosen in the dialog
    assert picker.path() == str(tiny_gguf)
    window.tabs.setCurrentWidget(lib)  # shown: the opened models are listed again
    assert lib.items(GGUF_KIND) == [str(tiny_gguf)]
    item = _group(lib).child(0)
    assert (item.text(0), item.text(2)) == ("tiny-chat.gguf", "GGUF file")
    assert item.text(5) == f"{tiny_gguf.stat().st_size / 1e3:.1f} kB"
    assert str(tiny_gguf.parent) in item.toolTip(0) and str(tiny_gguf) in item.toolTip(0)
    assert lib.select(str(tiny_gguf))
    details = lib.details.toPlainText()
    assert f"a file in {tiny_gguf.parent}" in details and "llama" in details and "F32" in details
    assert "works here\nchat, LoRA, QLoRA (dequantized to fine-tune), GGUF export of the fine-tuned model" in details
    assert lib.generate_btn.isEnabled() and lib.export_btn.isEnabled() and lib.evaluate_btn.isEnabled()
    assert not lib.rename_btn.isEnabled() and not lib.delete_btn.isEnabled()  # not the workspace's file
    lib.generate_btn.click()
    assert window.tabs.currentWidget() is window.generate_tab
    assert window.generate_tab.source_box.currentData() == str(tiny_gguf)
    setup.set_method("pretraining")
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=20000)
    assert not window.ctx.errors, window.ctx.errors


def test_a_gguf_opened_as_a_chat_model_names_the_ollama_model_it_came_from(window, tiny_gguf, tmp_path, monkeypatch):

    from desktop_app.ui.widgets.opened_ggufs import GGUF_KIND, remember_gguf_model

    data = tiny_gguf.read_bytes()
    ollama = tmp_path / "ollama"
    blob = ollama_store(ollama, data)
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    assert remember_gguf_model(window.settings, blob)  # what the Generate tab does with the model it opens
    lib = window.library_tab
    lib.refresh()
    assert lib.items(GGUF_KIND) == [str(blob)]
    item = _group(lib).child(0)
    assert (item.text(0), item.text(2)) == ("tiny:latest", "Ollama") and "Ollama model tiny:latest" in item.toolTip(0)
    lib.tree.setCurrentItem(item)  # (the Ollama group above lists the same file, by its store's name)
    assert "Ollama model tiny:latest" in lib.details.toPlainText() and lib.generate_btn.isEnabled()


def test_only_opened_ggufs_that_still_exist_are_listed_and_none_is_deleted_here(window, workspace, tiny_gguf,
                                                                                 tmp_path):
    import shutil

    from desktop_app.ui.widgets.base_picker import RECENT_KEY
    from desktop_app.ui.widgets.opened_ggufs import GGUF_KIND, OPENED_KEY, remember_gguf_model

    mine = workspace.folder("exports") / "mine.gguf"  # the workspace's own: listed under Exports, not twice
    shutil.copy(tiny_gguf, mine)
    gone = tmp_path / "gone.gguf"
    shutil.copy(tiny_gguf, gone)
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    for bad in (str(text), str(tmp_path), str(tmp_path / "missing.gguf"), ""):
        assert not remember_gguf_model(window.settings, bad)  # refused: nothing remembered
    assert remember_gguf_model(window.settings, gone) and remember_gguf_model(window.settings, mine)
    window.settings.setValue(RECENT_KEY, [str(tmp_path), str(tiny_gguf), str(text)])  # the picker keeps folders too
    gone.unlink()
    lib = window.library_tab
    lib.refresh()
    assert lib.items(GGUF_KIND) == [str(tiny_gguf)] and str(mine) in lib.items("exports")
    window.settings.setValue(OPENED_KEY, 42)  # a settings file edited by hand: read as nothing, no error
    lib.refresh()
    assert lib.items(GGUF_KIND) == [str(tiny_gguf)]
    lib.select(str(tiny_gguf))
    assert not lib.delete_selected() and tiny_gguf.exists()  # another folder's file: refused with a reason
    assert lib.rename(str(tiny_gguf), "renamed") is None and tiny_gguf.exists()
    assert [m for m, _ in window.ctx.errors] == [
        f"tiny-chat.gguf is not in the workspace ({tiny_gguf}): it is not deleted here. Use its own app or your file "
        "manager.",
        f"tiny-chat.gguf is not in the workspace ({tiny_gguf}): it is not renamed here. Use its own app or your file "
        "manager."]
