"""The window as its users expect it: it fits a small laptop screen, a tab's keys work on that tab only, a
time-limited run's progress follows the clock, plots show only what has something to show (with words and units),
disabled settings look disabled, errors read as one useful line, and a run that ends offers what to do next."""

from __future__ import annotations

import math

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QApplication, QWidget

from desktop_app.engine.events import Finished, RunFolder, Sample, StepMetrics
from desktop_app.ui.context import status_line
from desktop_app.ui.widgets.method_plots import MethodPlots
from desktop_app.ui.widgets.run_view import RunView, sample_html, step_progress

SMALL = (1024, 700)


def _fits(window) -> tuple[int, int]:
    QApplication.processEvents()
    hint = window.minimumSizeHint()
    return max(hint.width(), window.minimumWidth()), max(hint.height(), window.minimumHeight())


def test_the_window_fits_a_1024_by_700_screen_on_every_tab_and_method(window, qtbot):
    for index in range(window.tabs.count()):
        window.tabs.setCurrentIndex(index)
        width, height = _fits(window)
        assert width <= SMALL[0] and height <= SMALL[1], (window.tabs.tabText(index), width, height)
    window.tabs.setCurrentWidget(window.train_tab)
    setup = window.train_tab.setup
    for key in ("pretraining", "sft", "lora", "qlora", "dpo", "grpo", "selfplay", "pipeline"):
        setup.set_method(key)
        for advanced in (False, True):
            setup.set_show_advanced(advanced)
            width, height = _fits(window)
            assert width <= SMALL[0] and height <= SMALL[1], (key, advanced, width, height)
    window.train_tab.run_view.view_tabs.setCurrentIndex(window.train_tab.run_view.browser_index)
    window.tabs.setCurrentWidget(window.generate_tab)
    window.generate_tab.set_chat_mode(True)
    window.generate_tab.serve_panel.url_label.setText("Serving at http://127.0.0.1:8000 · OpenAI base URL "
                                                      "http://127.0.0.1:8000/v1 · model id a-rather-long-run-name")
    assert _fits(window)[0] <= SMALL[0]  # a long URL wraps instead of widening the window (it once made it 1516)
    window.resize(*SMALL)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == SMALL, timeout=3000)
    setup.set_method("pretraining")
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=20000)  # self-play probed the sandbox


def _key(widget: QWidget, key: Qt.Key, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    from PySide6.QtTest import QTest

    widget.setFocus()
    QApplication.processEvents()
    QTest.keyClick(widget, key, modifiers)
    QApplication.processEvents()


def test_a_tabs_keys_work_on_that_tab_only(window, qtbot, monkeypatch):
    fired: dict[str, int] = {"train": 0, "save_spec": 0, "add_files": 0}
    window.act_train.triggered.connect(lambda: fired.__setitem__("train", fired["train"] + 1))
    window.act_save_spec.triggered.connect(lambda: fired.__setitem__("save_spec", fired["save_spec"] + 1))
    window.act_add_files.triggered.connect(lambda: fired.__setitem__("add_files", fired["add_files"] + 1))
    sent: list[str] = []
    gen = window.generate_tab
    monkeypatch.setattr(gen, "generate", lambda prompt=None: sent.append(gen.prompt.toPlainText()) or True)
    monkeypatch.setattr(window.train_tab, "start", lambda: True)
    monkeypatch.setattr(window.model_tab.save_btn, "click", lambda: None)
    monkeypatch.setattr(window.data_tab.drop_zone.add_files, "click", lambda: None)

    window.tabs.setCurrentWidget(gen)
    gen.set_chat_mode(False)
    gen.prompt.setPlainText("Once upon a time")
    _key(gen.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)  # Ctrl+Enter in the prompt
    assert fired["train"] == 0 and window.tabs.currentWidget() is gen  # no training, no tab switch
    assert sent == ["Once upon a time"]  # ... it generates
    _key(gen.prompt, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    _key(gen.prompt, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    assert fired["save_spec"] == 0 and fired["add_files"] == 0 and window.tabs.currentWidget() is gen

    window.tabs.setCurrentWidget(window.train_tab)
    _key(window.train_tab.setup.method_box, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert fired["train"] == 1  # on its own tab it starts training
    window.tabs.setCurrentWidget(window.model_tab)
    _key(window.model_tab.preset_box, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    assert fired["save_spec"] == 1
    window.tabs.setCurrentWidget(window.data_tab)
    _key(window.data_tab.drop_zone.add_files, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)
    assert fired["add_files"] == 1
    assert "Ctrl+Return" in window.act_train.shortcut().toString()


def test_enter_sends_a_chat_message_and_shift_enter_starts_a_new_line(window, monkeypatch):
    gen = window.generate_tab
    window.tabs.setCurrentWidget(gen)
    gen.set_chat_mode(True)
    sent: list[str] = []
    monkeypatch.setattr(gen, "generate", lambda prompt=None: sent.append(gen.prompt.toPlainText()) or True)
    gen.prompt.setPlainText("first line")
    gen.prompt.moveCursor(gen.prompt.textCursor().MoveOperation.End)
    _key(gen.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert gen.prompt.toPlainText() == "first line\n" and sent == []
    _key(gen.prompt, Qt.Key.Key_Return)
    assert sent == ["first line\n"]
    gen.set_chat_mode(False)  # a completion's prompt may span lines: Enter is a new line there
    _key(gen.prompt, Qt.Key.Key_Return)
    assert sent == ["first line\n"]


def test_a_time_limited_run_shows_its_progress_by_the_clock(qtbot):
    view = RunView(QWidget())
    qtbot.addWidget(view)
    view.begin(training=True)
    view.show(RunFolder("/runs/demo/selfplay", "selfplay"))
    item = StepMetrics(step=52, total_steps=100_000, metrics={"loss": 1.5, "progress": 0.43}, eta_s=67.0)
    assert step_progress(item) == (0.43, "step 52 · 43% of its time limit")
    view.show(item)
    assert view.progress.format().startswith("step 52 · 43% of its time limit · ETA 1:07")
    assert view.progress.value() == 430
    # steps ahead of the clock: the steps lead
    assert step_progress(StepMetrics(step=90, total_steps=100, metrics={"progress": 0.9}))[1] == "step 90/100 · 90%"
    view.show(Finished("completed", step=0, message="self-play demo finished"))  # a Finished without its step
    assert view.progress.format() == "completed at step 52" and view.progress.value() == 1000
    view.stop_timers()


def test_a_real_time_limited_run_reaches_the_display(qtbot, tmp_path, trained):
    """A short engine run with time_budget_s: the bar follows the clock and the end names the step it reached."""
    from ui_helpers import TINY

    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.train.loop import train

    dataset, _run = trained
    config = RunConfig(model=TINY.to_dict(), dataset=str(dataset),
                       train=TrainSpec(steps=100_000, batch_size=4, eval_every=0, save_every=0, warmup_steps=1,
                                       sample_tokens=0, time_budget_s=1.5).to_dict())
    view = RunView(QWidget())
    qtbot.addWidget(view)
    view.begin(training=True)
    steps: list[StepMetrics] = []
    for event in train(config, tmp_path / "timed"):
        view.show(event)
        if isinstance(event, StepMetrics):
            steps.append(event)
    assert steps and steps[-1].step < 100_000
    fraction, text = step_progress(steps[-1])
    assert fraction > 0.5 and "of its time limit" in text  # by steps it would read 0%
    assert view.last_finished.reason == "completed"
    assert view.progress.format() == f"completed at step {steps[-1].step:,}" and view.progress.value() == 1000
    view.stop_timers()


def test_plots_show_what_has_something_to_show_in_words(qtbot):
    plots = MethodPlots()
    qtbot.addWidget(plots)
    plots.set_method("selfplay")
    plots.clear()
    for step in range(1, 5):
        plots.add_metrics(step, {"loss": 2.0 / step, "kl": 0.0, "epoch": 0.0, "progress": step / 4,
                                 "tokens": 100.0 * step, "mfu": 0.0, "reward/solver/deduction": 0.1 * step,
                                 "reward/proposer/deduction": 0.2, "reward/solver/induction": 0.3,
                                 "reward/proposer/induction": 0.1, "reward/solver/abduction": 0.2,
                                 "reward/proposer/abduction": 0.4})
    plots.flush()
    keys = plots.panel_keys()
    for flat in ("kl", "epoch", "progress", "tokens", "mfu"):
        assert flat not in keys, flat  # nothing to show yet: no empty, flat panel
    assert plots.point_count("kl") == 4 and plots.point_count("progress") == 4  # still kept (the CSV has them)
    plots.add_metrics(5, {"kl": 0.02})
    assert "kl" in plots.panel_keys()  # something to show now: its panel, with every point so far
    plots.flush()
    assert len(plots.curves["kl"].getData()[0]) == 5
    loss = plots.panels["loss"].getPlotItem()
    assert loss.titleLabel.text == "Loss" and loss.getAxis("left").labelText == "loss"
    role = plots.panels["reward_by_role"].getPlotItem()
    assert role.titleLabel.text == "Reward per role × task type" and role.getAxis("left").labelText == "reward"
    assert role.legend is None  # no legend drawn over the curves ...
    legend = plots._legends["reward_by_role"]
    assert legend.parentItem() is role and len(legend.items) == 6  # ... it sits under the plot, all six curves
    assert plots.panels["kl"].getPlotItem().titleLabel.text == "KL to the reference"
    plots.stop_timers()


def test_smoothing_keeps_up_with_a_short_run(qtbot):
    from desktop_app.ui.widgets.live_plot import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.set_smoothing(0.6)
    for step in range(1, 21):
        plots.add_point("loss", step, 10.0 if step <= 10 else 1.0)
    _, smooth = plots.smoothed["loss"].data()
    assert smooth[0] == 10.0 and smooth[-1] < 1.1  # debiased: starts at the curve, catches up within a few points
    assert math.isclose(smooth[9], 10.0)
    plots.stop_timers()


def test_a_chat_samples_prompt_does_not_run_into_the_reply():
    html = sample_html(Sample(step=20, prompt="user\nWhat is the largest planet?\nassistant", text="Jupiter."))
    assert "assistant</div>" in html and "↳ Jupiter." in html  # the reply on its own line, after the prompt


def test_disabled_settings_look_disabled(window):
    palette = QApplication.instance().palette()
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        assert palette.color(QPalette.ColorGroup.Disabled, role) != palette.color(QPalette.ColorGroup.Active, role)
    gen = window.generate_tab
    gen.form.set_value("num_beams", 3)
    label = gen.form.labels["temperature"]
    assert not gen.form.editors["temperature"].isEnabled() and not label.isEnabled()
    gen.form.set_value("num_beams", 1)


def test_errors_read_as_one_useful_line():
    assert status_line("The pipeline cannot start yet:\n• stage 1 (sft): choose its base model") == \
        "The pipeline cannot start yet: stage 1 (sft): choose its base model"
    assert status_line("Check this:\n• one\n• two\n• three") == "Check this: one (and 2 more)"
    assert status_line("plain sentence") == "plain sentence"


@pytest.mark.parametrize("width", [260, 420])
def test_data_file_verdicts_are_not_cut_mid_word(qtbot, tmp_path, width):
    import json

    from desktop_app.ui.widgets.data_files import DataFileList

    files = DataFileList()
    qtbot.addWidget(files)
    files.resize(width, 120)
    chat = tmp_path / "chats.jsonl"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    files.set_data_kind("dpo")
    files.set_files([str(chat)])
    text = files.item(0).text()
    assert "…" not in text and text.endswith("DPO needs preference pairs (prompt, chosen, rejected)")
    assert files.wordWrap()  # the row wraps at the list's width instead of eliding


def test_log_axis_ticks_are_plain_numbers_and_do_not_crowd():
    from desktop_app.ui.widgets.live_plot import log_tick_strings

    assert log_tick_strings([-3.0, -2.0, 0.0, 5.0], 1.0, 1.0) == ["0.001", "0.01", "1", "1e+05"]
    within_a_decade = [math.log10(m) for m in range(1, 10)]  # the in-between ticks: 1, 2, 5 labelled
    assert log_tick_strings(within_a_decade, 1.0, None) == ["1", "2", "", "", "5", "", "", "", ""]
    many_decades = [d + math.log10(m) for d in range(-4, 0) for m in range(2, 10)]
    assert set(log_tick_strings(many_decades, 1.0, None)) == {""}  # the decades alone are labelled then
