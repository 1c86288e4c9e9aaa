"""The metric plots in a real 1366x768 window (issue 36): the mouse wheel scrolls the page and zooms a plot only with
Ctrl held, the step axis never goes below 0, a method's panels fit the window without a scrollbar, the learning-rate
axis has room for its values and its label, and self-play's curves read apart (the proposer's reward lines styled
apart from the solver's, its 1 − held-out solve rate not drawn as a validation loss)."""

from __future__ import annotations

import math

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QFontMetrics, QWheelEvent
from PySide6.QtWidgets import QApplication

from desktop_app.engine.events import EvalResult, StepMetrics
from desktop_app.ui.widgets.layouts import scroll_area
from desktop_app.ui.widgets.live_plot import LivePlots
from desktop_app.ui.widgets.method_plots import MethodPlots


def _page(qtbot, plots: LivePlots, width: int = 900, height: int = 240):
    """`plots` in a scrolling page shorter than they are, shown, with their default panels up."""
    page = scroll_area(plots)
    qtbot.addWidget(page)
    page.resize(width, height)
    page.show()
    qtbot.waitExposed(page)
    qtbot.waitUntil(lambda: len(plots.panels) >= 4)
    return page


def _wheel(widget, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    """One notch of the mouse wheel (towards the user) over the middle of `widget`."""
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(pos, QPointF(widget.mapToGlobal(pos.toPoint())), QPoint(0, 0), QPoint(0, -120),
                        Qt.MouseButton.NoButton, modifiers, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def _ranges(panel) -> list[list[float]]:
    return [list(r) for r in panel.getViewBox().viewRange()]


def test_the_wheel_scrolls_the_page_and_zooms_a_plot_only_with_ctrl(qtbot):
    plots = MethodPlots()
    plots.set_method("selfplay")  # nine panels: taller than the page
    page = _page(qtbot, plots)
    for step in range(1, 21):
        plots.add_metrics(step, {"loss": 2.0 / step, "reward": 0.05 * step})
    plots.flush()
    panel = plots.panels["loss"]
    before, bar = _ranges(panel), page.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    _wheel(panel.viewport())
    assert _ranges(panel) == before  # the plot did not zoom ...
    assert bar.value() > 0  # ... the page scrolled
    _wheel(panel.viewport(), Qt.KeyboardModifier.ControlModifier)
    assert _ranges(panel) != before  # Ctrl + wheel zooms
    plots.stop_timers()


def test_the_step_axis_never_goes_below_zero(qtbot):
    plots = LivePlots()
    page = _page(qtbot, plots)  # held: qtbot keeps only a weak reference
    for step in range(1, 11):
        plots.add_point("loss", step, 1.0 / step)
    plots.flush()
    panel = plots.panels["loss"]
    panel.setXRange(-10, 5, padding=0)
    assert _ranges(panel)[0][0] >= 0
    panel.getViewBox().translateBy(x=-100)  # a drag to the left
    assert _ranges(panel)[0][0] >= 0
    assert page.isVisible()
    plots.stop_timers()


@pytest.mark.parametrize("key", ["pretraining", "lora", "dpo", "grpo", "selfplay"])
def test_a_methods_panels_fit_the_train_tab_in_a_1366x768_window(window, qtbot, key):
    window.resize(1366, 768)
    window.tabs.setCurrentWidget(window.train_tab)
    window.train_tab.setup.set_method(key)
    view = window.train_tab.run_view
    qtbot.waitUntil(lambda: len(view.plots.panels) >= 4)
    qtbot.wait(20)
    page = view.plot_scroll
    assert view.plots.minimumSizeHint().height() <= page.viewport().height(), key
    assert not page.verticalScrollBar().isVisible(), key
    if key == "lora":  # and with the curves of a run: loss, speed, MFU, epochs, validation
        view.begin(training=False)
        for step in range(1, 11):
            view.show(StepMetrics(step, 10, {"loss": 2.0 / step, "lr": 1e-4, "grad_norm": 1.0, "tokens_per_s": 90.0,
                                             "mfu": 0.02, "epoch": step / 10}))
        view.show(EvalResult(10, {"val_loss": 1.2, "val_ppl": 3.3}))
        view.plots.flush()
        qtbot.wait(20)
        assert len(view.plots.panels) >= 7
        assert view.plots.minimumSizeHint().height() <= page.viewport().height()
        assert not page.verticalScrollBar().isVisible()
    window.train_tab.setup.set_method("pretraining")
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=20000)  # self-play probed the sandbox


def test_the_learning_rate_axis_has_room_for_its_values_and_its_label(qtbot):
    """A fixed 56-pixel axis held "0.00025" and the rotated "learning rate" on top of each other: one was cut."""
    plots = LivePlots()
    page = _page(qtbot, plots, height=600)
    for step in range(1, 41):
        plots.add_point("lr", step, 3e-4 * min(1.0, step / 5) * (1 - step / 50))
    plots.flush()
    panel = plots.panels["lr"]
    panel.grab()  # painted: the axis measures its tick values
    qtbot.wait(10)
    panel.grab()
    axis = panel.getAxis("left")
    lo, hi = axis.range
    strings = [s for spacing, values in axis.tickValues(lo, hi, axis.height())
               for s in axis.tickStrings(values, axis.autoSIPrefixScale, spacing) if s]
    widest = max(QFontMetrics(axis.style["tickFont"] or panel.font()).horizontalAdvance(s) for s in strings)
    assert widest >= QFontMetrics(panel.font()).horizontalAdvance("0.0001")  # the small values are drawn
    label = axis.label.boundingRect().height() * 0.8
    room = axis.width() - label - axis.style["tickTextOffset"][0] - max(0, axis.style["tickLength"])
    assert axis.labelText == "learning rate" and axis.label.isVisible()
    assert room + 1 >= widest, (axis.width(), room, widest)
    assert page.isVisible()
    plots.stop_timers()


def test_selfplay_reward_lines_read_apart_by_role(qtbot):
    """Six reward lines on one panel: the colour tells the task type, the line the role; the proposer's are dashed,
    thicker and drawn over the solver's, so neither hides the other."""
    plots = MethodPlots()
    qtbot.addWidget(plots)
    plots.set_method("selfplay")
    metrics = {f"reward/{role}/{t}": 0.1 for role in ("solver", "proposer")
               for t in ("deduction", "abduction", "induction")}
    plots.add_metrics(1, metrics)
    pens = {name: plots.curves[name].opts["pen"] for name in metrics}
    for t in ("deduction", "abduction", "induction"):
        solver, proposer = pens[f"reward/solver/{t}"], pens[f"reward/proposer/{t}"]
        assert solver.color() == proposer.color()  # one colour per task type
        assert solver.style() == Qt.PenStyle.SolidLine and proposer.style() == Qt.PenStyle.DashLine
        assert proposer.widthF() > solver.widthF()
        assert plots.curves[f"reward/proposer/{t}"].zValue() > plots.curves[f"reward/solver/{t}"].zValue()
    assert len({pens[f"reward/solver/{t}"].color().name() for t in ("deduction", "abduction", "induction")}) == 3
    tip = plots.panels["reward_by_role"].toolTip()
    assert "dashed" in tip and "−0.5" in tip and "−1" in tip and "deduction" in tip
    plots.stop_timers()


def test_selfplay_val_loss_is_not_drawn_as_a_validation_loss(qtbot, tmp_path):
    """Self-play's val_loss is 1 − the held-out solve rate (it picks the best checkpoint): drawn on the loss plot it
    read as a validation loss of 1.0. The held-out solve rate has its own panel; the CSV keeps val_loss."""
    plots = MethodPlots()
    qtbot.addWidget(plots)
    plots.set_method("selfplay")
    for step in range(1, 5):
        plots.add_metrics(step, {"loss": 0.5 / step})
    plots.add_metrics(4, {"val_loss": 0.75, "heldout_solve_rate": 0.25, "heldout_solve_rate/deduction": 0.25})
    plots.flush()
    assert "val_loss" not in plots.curves and plots.point_count("val_loss") == 1
    assert "validation" not in plots.curve_names("loss")
    assert "mean" in plots.curve_names("heldout_solve_rate")
    plots.export_csv(tmp_path / "m.csv")
    assert "val_loss" in (tmp_path / "m.csv").read_text(encoding="utf-8").splitlines()[0]
    other = MethodPlots()  # a language model's val_loss is a loss: drawn beside the training loss
    qtbot.addWidget(other)
    other.add_metrics(1, {"loss": 2.0})
    other.add_metrics(1, {"val_loss": 2.5, "val_ppl": math.exp(2.5)})
    assert "validation" in other.curve_names("loss")
    plots.stop_timers()
    other.stop_timers()


def test_selfplay_curves_carry_a_note_on_their_lines_and_negative_rewards(qtbot):
    from PySide6.QtWidgets import QWidget

    from desktop_app.ui.widgets.run_view import RunView

    view = RunView(QWidget())
    qtbot.addWidget(view)
    view.set_method("selfplay")
    note = view.selfplay_note
    assert not note.isHidden() and "dashed = proposer" in note.text() and "−0.5" in note.text()
    assert "−1" in note.text() and "<b>induction</b>" in note.toolTip()  # hover: the whole legend
    view.set_method("lora")
    assert note.isHidden()  # other methods have no roles
    view.stop_timers()


def test_every_column_of_panels_gets_its_share_of_the_width(qtbot):
    """Eight panels of a pretraining run in three columns: equal widths, none past the right edge (the last
    column was squeezed to its minimum and cut its plot at 1366x768)."""
    plots = LivePlots()
    page = _page(qtbot, plots, width=932, height=500)
    for step in range(1, 25):
        metrics = {"loss": 3.0 / step, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1000.0 * step, "mfu": 0.05,
                   "epoch": step / 100}
        plots.add_metrics(step, metrics)
    plots.flush()
    QApplication.processEvents()
    assert plots.columns == 3 and len(plots.panels) >= 6
    widths = [p.width() for p in plots.panels.values()]
    assert max(widths) - min(widths) <= 2, widths
    assert all(p.geometry().right() <= page.viewport().width() for p in plots.panels.values())
    # equal shares by stretch, whatever each panel's size hint (a real run's axes made them differ)
    assert [plots.layout().columnStretch(c) for c in range(3)] == [1, 1, 1]
