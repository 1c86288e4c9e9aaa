"""Screenshots of every tab from the real window, in a meaningful state, into docs/screenshots/.

    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/screenshots.py
    xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python scripts/screenshots.py --size 1920x1080 --out /tmp/s
    xvfb-run -a -s "-screen 0 1024x700x24" .venv/bin/python scripts/screenshots.py --size 1024x700 --out /tmp/s
    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/screenshots.py --only get-model

Drives the app like a user: a model preset, the sample corpus prepared on the Data tab, a short training run with
curves, a LoRA run's form, a chat with the trained model, the Library with the run selected and, unless
--no-selfplay, a short self-play demo (about 2 minutes) with its curves and task buffer; then "Get a model": search,
details with what fits, a download and a chat with the downloaded model, against the tests' local Hub server
(tests/hub_server.py: nothing is fetched from the internet). Uses a throw-away workspace, settings and Hugging Face
cache. The window is the laptop size the README shows (1366x768) unless --size says otherwise; --only get-model
takes the Get-a-model screenshots alone (a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORK = Path(tempfile.mkdtemp(prefix="azr-shots-"))
os.environ["AZR_WORKSPACE"] = str(WORK / "workspace")
os.environ["XDG_CONFIG_HOME"] = str(WORK / "config")
os.environ["HF_HOME"] = str(WORK / "hf-home")  # a cache of its own: the downloaded model lands here
os.environ["HF_HUB_CACHE"] = str(WORK / "hf-home" / "hub")
os.environ["HF_HUB_DISABLE_XET"] = "1"
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AZR_NETWORK"):
    os.environ.pop(_name, None)
sys.path.insert(0, str(ROOT / "tests"))
from hub_server import HubServer, build_repos  # noqa: E402  (the tests' local Hub: stdlib only until it builds)

HUB = HubServer([]).start()  # its repositories are added once the app's engine can build them
os.environ["HF_ENDPOINT"] = HUB.url  # before anything imports huggingface_hub

from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from desktop_app.engine.specs import DataSpec  # noqa: E402
from desktop_app.ui.main_window import MainWindow  # noqa: E402
from desktop_app.ui.theme import apply_theme  # noqa: E402

CHATS = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in (
    ("What is the largest planet?", "Jupiter is the largest planet of the solar system."),
    ("Name a primary colour.", "Red is a primary colour."),
    ("What do bees make?", "Bees make honey and wax."))]


def spin(app: QApplication, seconds: float = 0.0, until=None, timeout: float = 600.0) -> None:
    end = time.perf_counter() + (timeout if until else seconds)
    while time.perf_counter() < end:
        app.processEvents()
        if until is not None and until():
            return
        time.sleep(0.01)
    if until is not None:
        raise TimeoutError("the app did not reach the expected state")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1366x768", help="window size, WIDTHxHEIGHT (default 1366x768)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"), help="folder for the PNG files")
    parser.add_argument("--no-selfplay", action="store_true", help="skip the self-play demo (about 2 minutes)")
    parser.add_argument("--only", choices=("all", "get-model"), default="all",
                        help="get-model: only the Get-a-model screenshots (search, details, download, chat)")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    app = QApplication(sys.argv[:1])
    app.setApplicationName("AZR Model Trainer")
    apply_theme(app)
    win = MainWindow()
    win.ctx.dialogs_enabled = False
    win.resize(width, height)
    win.show()
    spin(app, 0.5)
    spin(app, until=lambda: win.preloaded, timeout=120)
    if (win.width(), win.height()) != (width, height):
        print(f"the window is {win.width()}x{win.height()}, not {width}x{height} (its minimum size?)",
              file=sys.stderr)

    def shot(name: str, widget: QWidget | None = None) -> None:
        """The window (or `widget`: a window of its own, such as a dialog) into OUT/NAME.png."""
        spin(app, 0.5)
        path = out / f"{name}.png"
        (widget or win).grab().save(str(path))
        print(path, flush=True)

    if args.only == "all":
        tour(app, win, shot, selfplay=not args.no_selfplay)
    get_model_tour(app, win, shot)
    errors = list(win.ctx.errors)
    win.shutdown()
    win.close()
    HUB.stop()
    if errors:
        print("errors shown during the session:", errors, file=sys.stderr)
        return 1
    return 0


def tour(app: QApplication, win: MainWindow, shot, *, selfplay: bool) -> None:
    """Every tab in a meaningful state: a model, prepared data, a training run, a LoRA form, a chat, the Library."""
    # Model: a preset with something to look at
    win.tabs.setCurrentWidget(win.model_tab)
    win.model_tab.preset_box.setCurrentText("mini")
    shot("model")
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
    shot("data")

    # Train: a short run with frequent evaluations, the samples below the curves
    train = win.train_tab
    win.tabs.setCurrentWidget(train)
    train.setup.form.set_spec(train.setup.form.spec().replace(steps=240, batch_size=16, eval_every=20, eval_batches=4,
                                                              save_every=100, warmup_steps=20, lr=3e-3,
                                                              sample_tokens=40))
    train.start()
    spin(app, until=lambda: train.steps_seen >= 200, timeout=900)
    train.run_view.log_tabs.setCurrentIndex(train.run_view.samples_index)
    train.run_view.plots.flush()
    shot("train")
    spin(app, until=lambda: not train.running, timeout=900)
    shot("train_done")  # the end of a run: what next
    train.run_view.log_tabs.setCurrentIndex(0)
    run = train.run_dir

    # A fine-tuning method's form: LoRA on the run just trained, with a chat file and the record preview
    chats = WORK / "chats.jsonl"
    chats.write_text("".join(json.dumps(c) + "\n" for c in CHATS), encoding="utf-8")
    train.setup.set_method("lora")
    train.setup.method_panel.base_picker.set_path(str(run))
    train.add_data_files([str(chats)])
    view = train.run_view
    view.view_tabs.setCurrentIndex(view.preview_index)
    spin(app, until=lambda: bool(train.record_preview.pieces) or "✖" in train.record_preview.status.text(),
         timeout=120)
    shot("train_lora")
    view.view_tabs.setCurrentIndex(0)
    train.setup.set_method("pretraining")

    # Generate: a chat with the run (a tiny model: the words matter less than the window)
    gen = win.generate_tab
    win.tabs.setCurrentWidget(gen)
    gen.refresh_sources()
    gen.select_source(str(run))
    gen.set_chat_mode(True)
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=40, temperature=0.8, top_k=40, seed=7))
    gen.system_prompt.setPlainText("Answer in one sentence.")
    for message in ("Once upon a time", "What happened next?"):
        gen.generate(message)
        spin(app, until=lambda: not gen.running, timeout=300)
    shot("generate")
    gen.set_chat_mode(False)
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=80, samples=2))
    gen.generate("Once upon a time")
    spin(app, until=lambda: not gen.running, timeout=300)
    shot("generate_completion")

    # Library: the run selected
    lib = win.library_tab
    win.tabs.setCurrentWidget(lib)
    lib.refresh()
    lib.select(str(run))
    shot("library")

    if selfplay:
        # Self-play: the CPU demo for two minutes, its curves and its task buffer. Each phase is a time-limited run
        # (time_budget_s, a minute each), so the bar follows the clock, as the demo's own runs will.
        win.tabs.setCurrentWidget(train)
        train.setup.set_method("selfplay")
        spin(app, until=lambda: not win.ctx.runner.is_running("sandbox-probe"), timeout=60)
        train.start_selfplay_demo(minutes=2.0, train_overrides={"time_budget_s": 55.0})
        spin(app, until=lambda: str(train.run_dir).endswith("selfplay") and train.steps_seen >= 40, timeout=600)
        train.run_view.plots.flush()
        shot("train_selfplay")
        view.view_tabs.setCurrentIndex(view.browser_index)
        shot("train_selfplay_tasks")
        view.view_tabs.setCurrentIndex(0)
        spin(app, until=lambda: not train.running, timeout=600)
        shot("train_selfplay_done")
        win.tabs.setCurrentWidget(lib)
        lib.refresh()
        demo = next((p for p in lib.items("runs") if Path(p).name.startswith("selfplay-demo")), "")
        lib.select(demo)
        shot("library_demo")


INSTRUCT = "tiny-org/tiny-chat-instruct"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def add_instruct_repo() -> None:
    """tiny-chat with a chat template of its own, as a Hub chat model has (tiny-chat carries the app's default one,
    so it opens in Text completion): "Chat with it" opens it in Chat."""
    base = HUB.repos["tiny-org/tiny-chat"]
    files = dict(base.files)
    config = json.loads(files["tokenizer_config.json"])
    config["chat_template"] = CHATML
    files["tokenizer_config.json"] = json.dumps(config).encode()
    files["chat_template.jinja"] = CHATML.encode()
    HUB.add_repo(INSTRUCT, files, downloads=base.downloads + 1, tags=base.tags, parameters=base.parameters)


def get_model_tour(app: QApplication, win: MainWindow, shot) -> None:
    """Get a model from the Library: the Hub's most downloaded models, a search, a model's files and what fits this
    machine, its download with progress, and a chat with it, against the tests' local Hub server."""
    from desktop_app.ui.widgets.get_model_view import GetModelView

    for repo in build_repos(WORK / "hub-repos"):
        HUB.add(repo)
    add_instruct_repo()
    win.banner.setVisible(False)
    win.tabs.setCurrentWidget(win.library_tab)
    win.library_tab.get_model_btn.click()
    view = win.findChild(GetModelView)

    def idle() -> bool:
        return not [k for k in win.ctx.runner.running_kinds() if k.startswith("hub-")]

    spin(app, until=idle, timeout=60)
    shot("get_model_search", view)
    view.search("tiny")
    spin(app, until=idle, timeout=60)
    view.results_table.selectRow(view.result_row(INSTRUCT))
    spin(app, until=lambda: view.details is not None and len(view.fits) == len(view.details.file_sets), timeout=120)
    shot("get_model_details", view)
    HUB.slow(600_000)  # bytes a second: the bar, the speed and the time left have a moment to show
    row = view.download()
    spin(app, until=lambda: row.bar.value() >= 350 or row.state != "downloading", timeout=120)
    shot("get_model_download", view)
    HUB.slow(0)
    spin(app, until=lambda: row.state != "downloading", timeout=120)
    shot("get_model_downloaded", view)
    row.chat_btn.click()
    gen = win.generate_tab
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=12, temperature=0.8, top_k=40, seed=7))
    gen.generate("Hello! What can you do?")  # a tiny random test model: the window, not its words
    spin(app, until=lambda: not gen.running, timeout=300)
    shot("get_model_chat")
    win.tabs.setCurrentWidget(win.library_tab)
    win.library_tab.select(row.folder)
    shot("get_model_library")
    win.train_tab.setup.set_method("lora")  # "Fine-tune it": the LoRA form with the downloaded model as its base
    win.library_tab.get_model_btn.click()
    row.finetune_btn.click()
    shot("get_model_finetune")


if __name__ == "__main__":
    sys.exit(main())
