"""The welcome banner: "Train the sample model" pretrains the tiny preset on the sample corpus whatever method the
Train tab showed, and the banner is for a first launch only (gone once a run exists)."""

from __future__ import annotations


def test_train_the_sample_model_pretrains_whatever_method_was_shown(window, qtbot):
    tab = window.train_tab
    tab.setup.set_method("sft")  # e.g. after "Fine-tune it" on a downloaded model
    assert window.banner.isVisibleTo(window)
    window.quick_start()
    assert not window.ctx.errors, window.ctx.errors
    assert tab.running and tab.setup.current_method().key == "pretraining"
    assert not window.banner.isVisibleTo(window)  # a run exists now
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=120000)


def test_the_banner_does_not_greet_a_workspace_that_has_runs(populated_workspace, window):
    # populated_workspace comes first: the window opens on a workspace that already holds a run
    assert not window.banner.isVisibleTo(window)
