"""Closing the window mid-way through a LoRA fine-tuning run saves a checkpoint; the next launch offers to resume
it, and resuming continues the same run (same objective, same adapter) with its whole curve on the Train tab.
The Library's Resume does the same for a fine-tuning run."""

from __future__ import annotations

import json

import pytest

from desktop_app.engine import run_folder as rf
from desktop_app.engine.specs import RunConfig

WORDS = ["red", "blue", "cat", "dog", "sun", "moon"]
CHATS = [{"messages": [{"role": "user", "content": f"say {a}"}, {"role": "assistant", "content": f"{a} {b}"}]}
         for a in WORDS for b in WORDS]


@pytest.fixture
def lora_inputs(trained, tmp_path):
    """(base, data file): the tiny pretrained run as the base, a few short chats as the data."""
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in CHATS), encoding="utf-8")
    return str(trained[1]), str(data)


def _new_window(qtbot, workspace, settings):
    """A window as a launch builds it (the offer to resume included), pop-ups off."""
    from desktop_app.ui.main_window import MainWindow

    win = MainWindow(workspace, settings=settings, preload=False)
    win.ctx.dialogs_enabled = False
    win.asked = []  # (title, text) of each question; every answer is yes
    win.ctx.confirm = lambda title, text, parent=None: win.asked.append((title, text)) or True
    qtbot.addWidget(win)
    return win


def _start_lora(win, qtbot, base: str, data: str) -> None:
    win.show()
    qtbot.waitExposed(win)
    tab = win.train_tab
    tab.setup.set_method("lora")
    tab.setup.method_panel.base_picker.set_path(base)
    tab.setup.method_panel.data_list.set_files([data])
    tab.setup.method_panel.adapter_form.set_value("rank", 4)
    form = tab.setup.form
    form.set_spec(form.spec().replace(steps=400, batch_size=4, eval_every=0, save_every=0, warmup_steps=2,
                                      sample_tokens=0, log_every=1))
    assert tab.start(), win.ctx.errors


def _losses(run) -> list[int]:
    from desktop_app.engine.run_folder import read_metrics

    return [r["step"] for r in read_metrics(run) if r.get("type") == "step"]


def _close(win, qtbot) -> None:
    win.shutdown()  # idempotent: nothing left running either way
    win.close()


def test_closing_mid_lora_run_saves_and_the_next_launch_resumes_it(qtbot, workspace, settings, lora_inputs):
    base, data = lora_inputs
    first = _new_window(qtbot, workspace, settings)
    _start_lora(first, qtbot, base, data)
    tab = first.train_tab
    qtbot.waitUntil(lambda: tab.steps_seen >= 4, timeout=60000)
    first.close()  # asks, stops gracefully (a checkpoint is saved), closes once the run has ended
    qtbot.waitUntil(lambda: not first.isVisible(), timeout=60000)
    assert [t for t, _ in first.asked] == ["Training is running"]
    assert tab.run_view.last_finished is not None and tab.run_view.last_finished.reason == "stopped"
    run, stopped = tab.run_dir, tab.run_view.last_finished.step
    saved = rf.list_committed(run)
    assert saved and rf.step_of(saved[-1]) == stopped
    assert (saved[-1] / "adapter_model.safetensors").exists()  # a LoRA checkpoint: the adapter, not a full model
    assert not first.ctx.errors, first.ctx.errors

    second = _new_window(qtbot, workspace, settings)  # the next launch, same workspace and settings
    assert second.unfinished_run() == run
    second.show()
    qtbot.waitUntil(lambda: second.train_tab.running, timeout=10000)  # offered at launch, accepted
    try:
        assert [t for t, _ in second.asked] == ["Resume the unfinished run?"]
        assert run.name in second.asked[0][1] and f"step {stopped}" in second.asked[0][1]
        assert second.tabs.currentWidget() is second.train_tab
        again = second.train_tab
        assert again.run_dir == run and again.setup.current_method().key == "lora"
        assert again.config.objective == "sft" and again.config.adapter["kind"] == "lora"
        assert again.config.adapter["rank"] == 4 and again.config.base_model.startswith(base)  # its checkpoint
        assert again.config == RunConfig.load(run / "run.json")  # the run's own config, nothing from a form
        qtbot.waitUntil(lambda: again.steps_seen >= 2, timeout=60000)
        qtbot.waitUntil(lambda: again.run_view.plots.point_count("loss") >= stopped + 2, timeout=10000)
        again.stop()
        qtbot.waitUntil(lambda: not again.running, timeout=60000)
        assert not second.ctx.errors, second.ctx.errors
        assert f"resumed from {saved[-1].name} (step {stopped})" in again.run_view.log_view.toPlainText()
        # The curve holds the steps before the close and after the resume, each once, in order.
        steps = _losses(run)
        assert steps == list(range(1, again.run_view.last_finished.step + 1))
        x, _ = again.run_view.plots.series["loss"].data()
        assert sorted(x.tolist()) == steps
        assert second.unfinished_run() is None  # offered once
    finally:
        _close(second, qtbot)


def test_library_resume_continues_a_fine_tuning_run(window, qtbot, lora_inputs):
    base, data = lora_inputs
    window.asked = []
    window.ctx.confirm = lambda title, text, parent=None: window.asked.append((title, text)) or True
    _start_lora(window, qtbot, base, data)
    tab = window.train_tab
    qtbot.waitUntil(lambda: tab.steps_seen >= 3, timeout=60000)
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    run, stopped = tab.run_dir, tab.run_view.last_finished.step
    # As a kill -9 leaves it: steps logged after the newest checkpoint. Resume cuts them away and trains them again,
    # so the curve must show each step once (not the lost ones plus their re-run).
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as fh:
        for s in (stopped + 1, stopped + 2):
            fh.write(json.dumps({"type": "step", "step": s, "total_steps": 400, "loss": 99.0}) + "\n")
    tab.setup.set_method("pretraining")  # the form shows something else now: Resume must bring the run's own settings
    window.ctx.workspace_items_changed.emit()
    lib = window.library_tab
    assert lib.select(str(run)) and lib.resume_btn.isEnabled()
    lib.resume_btn.click()
    assert window.tabs.currentWidget() is tab and tab.running
    assert tab.run_dir == run and tab.setup.current_method().key == "lora" and tab.config.adapter["kind"] == "lora"
    qtbot.waitUntil(lambda: tab.steps_seen >= 2, timeout=60000)
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert tab.run_view.last_finished.step > stopped and not window.ctx.errors, window.ctx.errors
    assert _losses(run) == list(range(1, tab.run_view.last_finished.step + 1))
    x, y = tab.run_view.plots.series["loss"].data()
    assert sorted(x.tolist()) == _losses(run) and 99.0 not in y.tolist()  # each step once, none of the lost ones
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=10000)


def test_the_launch_offer_is_for_an_unfinished_run_only_and_asked_once(qtbot, workspace, settings, trained):
    import shutil

    from desktop_app.ui.main_window import UNFINISHED_RUN_KEY

    run = shutil.copytree(trained[1], workspace.folder("runs") / "tiny-run")  # a completed run
    settings.setValue(UNFINISHED_RUN_KEY, str(run))
    win = _new_window(qtbot, workspace, settings)
    assert win.unfinished_run() is None  # it completed: nothing to resume
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"reason": "completed"', '"reason": "stopped"'))
    assert win.unfinished_run() == run
    win.ctx.confirm = lambda title, text, parent=None: win.asked.append((title, text)) and False  # "No"
    assert not win.offer_unfinished_run()
    assert len(win.asked) == 1 and not win.train_tab.running
    assert win.unfinished_run() is None  # not asked again at the next launch
    settings.setValue(UNFINISHED_RUN_KEY, str(workspace.folder("runs") / "deleted-since"))
    assert win.unfinished_run() is None
    _close(win, qtbot)
