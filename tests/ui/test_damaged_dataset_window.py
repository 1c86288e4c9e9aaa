"""The window's Train tab on a prepared dataset whose train.bin was cut short after prepare (issue 41): the run
fails with the engine's one sentence naming the file (no "bug" wording, no traceback)."""

from __future__ import annotations

import os

from ui_helpers import TINY


def test_cut_short_dataset_is_one_sentence_in_the_window(window, populated_workspace, qtbot):
    tab = window.train_tab
    dataset = populated_workspace.folder("datasets") / "tiny-data"
    train_bin = dataset / "train.bin"
    os.truncate(train_bin, train_bin.stat().st_size // 2 | 1)
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(dataset))
    window.model_tab.set_spec(TINY)
    tab.setup.form.set_spec(tab.setup.form.spec().replace(steps=3, batch_size=4, eval_every=0, save_every=0,
                                                          warmup_steps=1, sample_tokens=0))
    assert tab.start()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert window.ctx.errors
    message, details = window.ctx.errors[-1]
    assert str(train_bin) in message and "cut short" in message and "prepare the dataset again" in message
    assert "bug" not in message and "multiple of the data-type size" not in message
    assert "Traceback" not in (details or "")
