"""Generate (streaming, stop, compare, chat, errors) and Library (list, replay, rename, delete, export)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt


def _ready(window, populated_workspace):
    window.ctx.workspace_items_changed.emit()
    return populated_workspace.folder("runs") / "tiny-run"


def test_generate_streams_into_the_view(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    gen = window.generate_tab
    assert gen.source_box.findData(str(run)) >= 0
    gen.select_source(str(run))
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=16, samples=2, seed=3))
    assert gen.generate("the cat")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    assert len(gen.outputs) == 2 and len(gen.stats) == 2
    for i in range(2):
        assert gen.output_text(i) == next(s.text for s in gen.stats if s.sample == i)
    assert "tokens/s" in gen.stats_label.text() and "first token" in gen.stats_label.text()
    assert gen.outputs[0].flushes >= 1  # buffered appends, not one set per token


def test_generate_stop_and_chat(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    gen = window.generate_tab
    gen.select_source(str(run))
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=10, chat=True))
    assert gen.generate("hello")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert gen.output_text(0).startswith("You: hello")
    assert gen.history[0] == ("user", "hello") and gen.history[-1][0] == "assistant"
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=10_000, chat=False))
    assert gen.generate("the")
    gen.stop()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors


def test_compare_checkpoints_side_by_side(window, populated_workspace, qtbot):
    _ready(window, populated_workspace)
    gen = window.generate_tab
    gen.compare_check.setChecked(True)
    assert gen.compare_list.count() >= 2
    assert not gen.generate("the")  # nothing ticked yet
    assert "at least two" in window.ctx.errors[-1][0]
    for i in range(2):
        gen.compare_list.item(i).setCheckState(Qt.CheckState.Checked)
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=8))
    window.ctx.errors.clear()
    assert gen.generate("the")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    assert len(gen.outputs) == 2 and len(gen.stats) == 2
    assert all(gen.output_text(i) for i in range(2))


def test_generate_errors_are_readable(window, tmp_path, qtbot):
    gen = window.generate_tab
    assert not gen.source_box.currentData()  # no model yet (only "Choose a model…" and "GGUF file…")
    assert not gen.generate("x")
    assert "train one first" in window.ctx.errors[-1][0]
    gen.select_source(str(tmp_path))  # not a model folder
    assert gen.generate("x")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    message, details = window.ctx.errors[-1]
    assert str(tmp_path) in message or "model" in message
    assert details == ""  # a UserError: no traceback, just the sentence


def test_library_lists_replays_and_routes(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    assert str(run) in lib.items("runs")
    assert str(populated_workspace.folder("datasets") / "tiny-data") in lib.items("datasets")
    assert lib.select(str(run))
    assert "checkpoint" in lib.details.toPlainText()
    lib.plots_btn.click()
    assert window.tabs.currentWidget() is window.train_tab
    qtbot.waitUntil(lambda: window.train_tab.run_view.plots.point_count("loss") > 0, timeout=10000)
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("history"), timeout=5000)
    lib.select(str(run))
    lib.generate_btn.click()
    assert window.tabs.currentWidget() is window.generate_tab
    assert window.generate_tab.source_box.currentData() == str(run)


def test_library_rename_and_delete_with_confirmation(window, populated_workspace):
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    lib.select(str(run))
    new = lib.rename(str(run), "my best run")
    assert new and Path(new).name == "my-best-run" and Path(new).is_dir() and not run.exists()
    assert lib.rename(new, "tiny-data") is not None  # different kind folder: fine
    lib.select(str(Path(new).with_name("tiny-data")))
    window.ctx.confirm = lambda *a, **k: False
    assert not lib.delete_selected()
    assert Path(new).with_name("tiny-data").exists()
    window.ctx.confirm = lambda *a, **k: True
    assert lib.delete_selected()
    assert not Path(new).with_name("tiny-data").exists()
    assert not window.ctx.errors


def test_library_rename_to_an_existing_name_is_refused(window, populated_workspace):
    _ready(window, populated_workspace)
    runs = populated_workspace.folder("runs")
    (runs / "other").mkdir()
    lib = window.library_tab
    assert lib.rename(str(runs / "tiny-run"), "other") is None
    assert "already an item" in window.ctx.errors[-1][0]
    assert (runs / "tiny-run").is_dir()


def test_library_export_hf_and_zip(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    for fmt in ("hf", "zip"):
        lib.select(str(run))
        assert lib.export_selected(fmt)
        qtbot.waitUntil(lambda: not window.ctx.runner.is_running("export"), timeout=60000)
        assert not window.ctx.errors, window.ctx.errors
        assert lib.last_export and Path(lib.last_export).exists()
        assert Path(lib.last_export).parent == populated_workspace.folder("exports")
        # the exported path fits its bar (shortened in the middle), whole in the tooltip
        shown = lib.progress.format()
        assert lib.progress.toolTip() == f"exported: {lib.last_export}"
        assert lib.progress.fontMetrics().horizontalAdvance(shown) <= lib.progress.width()
    assert any(p.suffix == ".zip" for p in populated_workspace.items("exports"))
    hf = next(p for p in populated_workspace.items("exports") if p.is_dir())
    assert (hf / "config.json").exists()
    # the export shows up as a generation source
    assert window.generate_tab.source_box.findData(str(hf)) >= 0


def test_unexpected_errors_are_logged_with_details(window):
    try:
        raise RuntimeError("kaboom")
    except RuntimeError as exc:
        window.ctx.report_exception(exc)
    message, details = window.ctx.errors[-1]
    assert message == "RuntimeError: kaboom" and "Traceback" in details
    logs = list(window.ctx.workspace.log_dir.glob("error-*.log"))
    assert logs and "kaboom" in logs[0].read_text()


def test_error_dialog_has_copy_details_button(window, qtbot):
    from PySide6.QtWidgets import QApplication, QMessageBox

    window.ctx.dialogs_enabled = True
    window.ctx.report_error("Something broke", "Traceback: line 1")
    box = window.ctx._open_boxes[-1]
    copy = next(b for b in box.buttons() if b.text() == "Copy details")
    copy.click()
    assert "Traceback: line 1" in QApplication.clipboard().text()
    assert box.isVisible()  # copying keeps the box open
    box.button(QMessageBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: not window.ctx._open_boxes, timeout=3000)


def test_library_refuses_delete_while_a_job_runs(window, populated_workspace, qtbot):
    from desktop_app.engine.events import Controls

    run = _ready(window, populated_workspace)
    lib = window.library_tab
    lib.select(str(run))
    window.ctx.confirm = lambda *a, **k: True
    controls = Controls()

    def busy_export():
        while not controls.stop.is_set():
            controls.stop.wait(0.01)
            yield None

    task = window.ctx.runner.start("export", busy_export, controls)
    qtbot.waitUntil(lambda: window.ctx.runner.is_running("export"), timeout=2000)
    assert not lib.delete_selected()
    assert run.exists() and any("Busy (export)" in str(e) for e in window.ctx.errors)
    task.stop()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("export"), timeout=5000)


def test_library_export_cancel_and_stop_action_route_to_the_export(window, populated_workspace, qtbot,
                                                                    monkeypatch):
    from desktop_app.engine.events import Finished, Progress
    from desktop_app.ui.tabs import library_tab as library_module

    def slow_export(source, fmt, out, controls):
        for i in range(10_000):
            if controls.stop.is_set():
                yield Finished("cancelled")
                return
            yield Progress("weights", i, 10_000)
            controls.stop.wait(0.005)

    monkeypatch.setattr(library_module, "_export_job", slow_export)
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    window.tabs.setCurrentWidget(lib)
    lib.select(str(run))
    assert lib.export_selected("hf")
    qtbot.waitUntil(lib.exporting, timeout=3000)
    assert lib.cancel_export_btn.isEnabled()
    window.act_stop.trigger()  # Stop on the Library tab stops the export, not training
    qtbot.waitUntil(lambda: not lib.exporting(), timeout=5000)
    assert lib.progress.format() == "cancelled"
    assert not lib.cancel_export_btn.isEnabled()


def test_library_export_as_gguf_takes_the_chosen_type(window, populated_workspace, qtbot):
    """Issue 51 item 8: the window's GGUF export offers the engine's types (llama.cpp's greyed out without its
    quantizer) and writes the one chosen."""
    import gguf

    from desktop_app.engine.export.gguf_quantize import GGUF_TYPES, llama_cpp_available

    run = _ready(window, populated_workspace)
    lib = window.library_tab
    box = lib.gguf_type_box
    assert not box.isVisibleTo(lib)  # Hugging Face folder: no GGUF type to choose
    lib.format_box.setCurrentIndex(lib.format_box.findData("gguf"))
    assert box.isVisibleTo(lib) and [box.itemData(i) for i in range(box.count())] == list(GGUF_TYPES)
    assert box.currentData() == "f16"
    q4 = box.model().item(box.findData("q4_k_m"))
    assert q4.isEnabled() == llama_cpp_available()
    box.setCurrentIndex(box.findData("q8_0"))
    lib.select(str(run))
    assert lib.export_selected()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("export"), timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    out = Path(lib.last_export)
    assert out.name.endswith("-q8_0.gguf") and out.parent == populated_workspace.folder("exports")
    kinds = {t.tensor_type.name for t in gguf.GGUFReader(out).tensors}
    assert "Q8_0" in kinds, kinds
