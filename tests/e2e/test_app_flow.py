"""End to end in the real window: drop files -> prepare -> train a few steps -> curves -> stop -> generate."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from desktop_app.engine.specs import DataSpec, ModelSpec

pytestmark = pytest.mark.slow

TINY = ModelSpec(family="llama", vocab_size=320, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                 context_length=32)


def make_corpus(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    text = ("the cat sat on the mat and the dog ran to the park where a bird sang a song about the sun "
            "and the moon while children played with a red ball near the old tree")
    words = text.split()
    docs = []
    for i in range(120):
        docs.append(" ".join(words[(i * 7 + k) % len(words)] for k in range(25 + i % 15)) + ".")
    good = folder / "stories.txt"
    good.write_text("\n\n".join(docs), encoding="utf-8")
    bad = folder / "image.bin"
    bad.write_bytes(bytes(range(256)) * 40)
    return [good, bad]


def drop(widget, paths: list[Path]) -> None:
    mime = QMimeData()  # kept alive for the whole drop
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    enter = QDragEnterEvent(QPoint(int(pos.x()), int(pos.y())), Qt.DropAction.CopyAction, mime,
                            Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    event = QDropEvent(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, event)
    assert event.isAccepted()


def test_drop_prepare_train_generate(window, qtbot, tmp_path):
    files = make_corpus(tmp_path / "corpus")
    # 1. drop on the window itself (not the drop zone): lands in the Data tab, verdicts fill the table
    drop(window, files)
    data = window.data_tab
    assert window.tabs.currentWidget() is data
    qtbot.waitUntil(lambda: len(data.verdicts()) == 2, timeout=20000)
    verdicts = {Path(p).name: v for p, v in data.verdicts().items()}
    assert verdicts["stories.txt"] == "ok"
    assert verdicts["image.bin"] != "ok"

    # 2. prepare with small settings
    data.form.set_spec(DataSpec(vocab_size=320, context_length=32, overlap=8, val_fraction=0.1))
    data.name_edit.setText("e2e")
    with qtbot.waitSignal(data.dataset_ready, timeout=60000) as ready:
        assert data.prepare()
    dataset = ready.args[0]
    assert (Path(dataset) / "manifest.json").exists()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("prepare"), timeout=30000)
    qtbot.waitUntil(lambda: data.last_stats is not None, timeout=30000)
    assert data.last_stats["splits"]["train"]["chunks"] > 0
    assert "chunk 0" in data.preview.toPlainText()
    assert window.train_tab.setup.dataset_box.currentData() == dataset

    # 3. train a tiny model for many steps, stop it after some points are plotted
    window.model_tab.set_spec(TINY)
    train = window.train_tab
    spec = train.setup.form.spec().replace(steps=400, batch_size=4, eval_every=5, eval_batches=1, save_every=0,
                                     warmup_steps=2, sample_tokens=8, log_every=1)
    train.setup.form.set_spec(spec)
    assert train.start()
    qtbot.waitUntil(lambda: train.run_view.plots.point_count("loss") >= 8, timeout=120000)
    qtbot.waitUntil(lambda: train.run_view.plots.point_count("val_loss") >= 1, timeout=60000)
    train.run_view.plots.flush()
    x, _y = train.run_view.plots.curves["loss"].getData()
    assert x is not None and len(x) >= 8
    assert train.run_view.plots.point_count("lr") >= 8 and train.run_view.plots.point_count("tokens_per_s") >= 8
    assert "%" in train.run_view.progress.format() and "ETA" in train.run_view.progress.format()
    train.stop()
    qtbot.waitUntil(lambda: not train.running, timeout=60000)
    assert train.run_view.last_finished is not None and train.run_view.last_finished.reason == "stopped"
    assert list((train.run_dir / "checkpoints").glob("step-*/manifest.json")), "stop must save a checkpoint"
    assert not window.ctx.errors, window.ctx.errors

    # 4. the run is in the Library and the Generate picker; generate streams text
    qtbot.waitUntil(lambda: str(train.run_dir) in window.library_tab.items("runs"), timeout=5000)
    gen = window.generate_tab
    gen.refresh_sources()
    gen.select_source(str(train.run_dir))
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=12, temperature=0.8, seed=1))
    assert gen.generate("the cat")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not window.ctx.errors, window.ctx.errors
    assert gen.stats and gen.stats[0].tokens_per_s > 0
    qtbot.waitUntil(lambda: gen.output_text(0) != "", timeout=5000)
    assert gen.output_text(0) == gen.stats[0].text
    assert "tokens/s" in gen.stats_label.text()
