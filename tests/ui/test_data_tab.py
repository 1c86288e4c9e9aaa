"""Data tab: drops (good and bad files), verdict table, settings validation, prepare, cancel, stats."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from ui_helpers import write_corpus

from desktop_app.engine.specs import DataSpec


def send_drop(widget, mime: QMimeData) -> tuple[bool, bool]:
    enter = QDragEnterEvent(QPoint(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                      Qt.KeyboardModifier.NoModifier)
    if enter.isAccepted():
        QApplication.sendEvent(widget, drop)
    return enter.isAccepted(), drop.isAccepted()


def file_mime(paths: list[Path]) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def test_drop_good_and_bad_files_on_the_drop_zone(window, qtbot, tmp_path):
    good = write_corpus(tmp_path / "in")
    empty = tmp_path / "in" / "empty.txt"
    empty.write_text("")
    binary = tmp_path / "in" / "blob.dat"
    binary.write_bytes(b"\x00\x01\x02\xff" * 500)
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nSome words here and there.\n", encoding="utf-8")
    mime = file_mime([good, empty, binary, folder])  # kept alive for the whole drop
    tab = window.data_tab
    assert send_drop(tab.drop_zone, mime) == (True, True)
    qtbot.waitUntil(lambda: len(tab.verdicts()) == 4, timeout=20000)
    verdicts = {Path(p).name: v for p, v in tab.verdicts().items()}
    assert verdicts["corpus.txt"] == "ok" and verdicts["notes.md"] == "ok"
    assert verdicts["empty.txt"] != "ok" and verdicts["blob.dat"] != "ok"
    row = tab.rows[str(binary)]
    assert tab.table.item(row, 7).text()  # a reason a person reads
    assert "2 usable" in tab.summary.text() and "2 skipped" in tab.summary.text()


def test_non_file_drops_are_refused(window):
    mime = QMimeData()
    mime.setText("just text")
    assert send_drop(window, mime) == (False, False)
    assert send_drop(window.data_tab.drop_zone, mime) == (False, False)
    assert window.data_tab.verdicts() == {}


def test_prepare_without_files_or_with_bad_settings_says_why(window):
    tab = window.data_tab
    assert not tab.prepare()
    assert "Add some text files" in window.ctx.errors[-1][0]
    tab.form.set_spec(DataSpec(context_length=32, overlap=32))
    assert not tab.prepare()
    assert "overlap 32 must be smaller" in window.ctx.errors[-1][0]
    assert not tab.form.problems.isHidden()
    assert not window.ctx.runner.is_running("prepare")
    assert list(window.ctx.workspace.items("datasets")) == []  # nothing created


def test_prepare_shows_progress_stats_and_preview(window, qtbot, tmp_path):
    tab = window.data_tab
    tab.add_paths([str(write_corpus(tmp_path / "in"))])
    qtbot.waitUntil(lambda: len(tab.verdicts()) == 1, timeout=20000)
    tab.form.set_spec(DataSpec(vocab_size=320, context_length=32, overlap=8, val_fraction=0.1))
    with qtbot.waitSignal(tab.dataset_ready, timeout=60000) as ready:
        assert tab.prepare()
    qtbot.waitUntil(lambda: tab.last_stats is not None and tab.prepare_btn.isEnabled(), timeout=30000)
    assert Path(ready.args[0]).parent == window.ctx.workspace.folder("datasets")
    assert tab.progress.value() == 1000
    assert tab.last_result["reason"] == "completed"
    assert "train" in tab.stats_label.text() and "chunks" in tab.stats_label.text()
    assert tab.hist.getPlotItem().listDataItems() or tab.hist.getPlotItem().items
    html = tab.preview.toHtml()
    assert "chunk 0" in tab.preview.toPlainText() and "fde68a" in html  # overlap highlighted
    assert tab.dataset_box.currentData() == ready.args[0]
    # tokens per file filled in from the prepare verdicts
    assert tab.table.item(0, 5).text()


def test_cancel_prepare_keeps_nothing(window, qtbot, tmp_path):
    tab = window.data_tab
    big = tmp_path / "big.txt"
    big.write_text("\n\n".join(f"document {i} " + "words and more words " * 40 for i in range(4000)))
    tab.add_paths([str(big)])
    qtbot.waitUntil(lambda: len(tab.verdicts()) == 1, timeout=20000)
    tab.form.set_spec(DataSpec(vocab_size=320, context_length=32))
    assert tab.prepare()
    tab.cancel()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("prepare"), timeout=60000)
    assert tab.prepare_btn.isEnabled()
    if tab.last_result is not None and tab.last_result["reason"] == "cancelled":
        assert not [p for p in window.ctx.workspace.items("datasets") if (p / "manifest.json").exists()]


def test_sample_corpus_button(window, qtbot):
    tab = window.data_tab
    tab.add_sample_corpus()
    qtbot.waitUntil(lambda: len(tab.verdicts()) >= 3, timeout=20000)
    assert all(v == "ok" for v in tab.verdicts().values())
    assert tab.name_edit.text() == "sample-corpus"
