"""Screenshots of every tab from the real window, in a meaningful state, into docs/screenshots/.

    xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/screenshots.py

Drives the app like a user: sample corpus prepared on the Data tab, a short training run with curves,
a generation, the Library with the run selected. Uses a throw-away workspace and settings.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "screenshots"
WORK = Path(tempfile.mkdtemp(prefix="azr-shots-"))
os.environ["AZR_WORKSPACE"] = str(WORK / "workspace")
os.environ["XDG_CONFIG_HOME"] = str(WORK / "config")

from PySide6.QtWidgets import QApplication  # noqa: E402

from desktop_app.engine.specs import DataSpec, GenerateSpec  # noqa: E402
from desktop_app.ui.main_window import MainWindow  # noqa: E402
from desktop_app.ui.theme import apply_theme  # noqa: E402


def spin(app: QApplication, seconds: float = 0.0, until=None, timeout: float = 600.0) -> None:
    end = time.perf_counter() + (timeout if until else seconds)
    while time.perf_counter() < end:
        app.processEvents()
        if until is not None and until():
            return
        time.sleep(0.01)
    if until is not None:
        raise TimeoutError("the app did not reach the expected state")


def shot(app: QApplication, win: MainWindow, name: str) -> None:
    spin(app, 0.4)
    path = OUT / f"{name}.png"
    win.grab().save(str(path))
    print(path, flush=True)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv[:1])
    app.setApplicationName("AZR Model Trainer")
    apply_theme(app)
    win = MainWindow()
    win.ctx.dialogs_enabled = False
    win.resize(1280, 800)
    win.show()
    spin(app, 0.5)
    spin(app, until=lambda: win.preloaded, timeout=120)

    # Model: a preset with something to look at
    win.tabs.setCurrentWidget(win.model_tab)
    win.model_tab.preset_box.setCurrentText("mini")
    shot(app, win, "model")
    win.model_tab.preset_box.setCurrentText("tiny")
    win.banner.setVisible(False)

    # Data: the sample corpus, prepared with a little overlap
    data = win.data_tab
    win.tabs.setCurrentWidget(data)
    data.add_sample_corpus()
    spin(app, until=lambda: len(data.verdicts()) >= 4, timeout=60)
    data.form.set_spec(DataSpec(vocab_size=4096, context_length=128, overlap=16, val_fraction=0.05))
    data.prepare()
    spin(app, until=lambda: data.last_stats is not None and data.prepare_btn.isEnabled(), timeout=300)
    shot(app, win, "data")

    # Train: a short run with frequent evaluations
    train = win.train_tab
    win.tabs.setCurrentWidget(train)
    train.form.set_spec(train.form.spec().replace(steps=240, batch_size=16, eval_every=20, eval_batches=4,
                                                  save_every=100, warmup_steps=20, lr=3e-3, sample_tokens=40))
    train.start()
    spin(app, until=lambda: train.steps_seen >= 200, timeout=900)
    train.bottom_tabs.setCurrentIndex(1)
    train.plots.flush()
    shot(app, win, "train")
    spin(app, until=lambda: not train.running, timeout=900)
    train.bottom_tabs.setCurrentIndex(0)

    # Generate: two samples from the run
    gen = win.generate_tab
    win.tabs.setCurrentWidget(gen)
    gen.refresh_sources()
    gen.select_source(str(train.run_dir))
    gen.form.set_spec(GenerateSpec(max_new_tokens=120, temperature=0.8, top_k=40, samples=2, seed=7))
    gen.generate("Once upon a time")
    spin(app, until=lambda: not gen.running, timeout=300)
    shot(app, win, "generate")

    # Library: the run selected
    lib = win.library_tab
    win.tabs.setCurrentWidget(lib)
    lib.refresh()
    lib.select(str(train.run_dir))
    shot(app, win, "library")

    errors = list(win.ctx.errors)
    win.shutdown()
    win.close()
    if errors:
        print("errors shown during the session:", errors, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
