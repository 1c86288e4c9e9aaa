"""Generate tab: pick a model or checkpoint, prompt, sampling settings, stream text; compare checkpoints.

Beams above 1 switch to beam search: the sampling-only settings (temperature, top-k, top-p, min-p, seed) are
greyed out and not used, length penalty and early stopping become active, and each output shows its beam's
text when the search ends (beams cannot stream: a beam's past can still change).

Chat mode (the `chat` setting) is a multi-turn conversation: every turn sends the optional system prompt and the
whole transcript (the user's messages and the replies the model actually gave, a stopped reply as far as it was
shown) through the model's chat template. When the conversation outgrows the model's context its oldest turns
are left out of what the model sees (the label says so; the transcript keeps them). "New chat" forgets it.
"""

from __future__ import annotations

import html
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.events import Controls, GenerationStats, TextDelta
from desktop_app.engine.specs import GenerateSpec
from desktop_app.ui.context import AppContext
from desktop_app.ui.tabs.serve_panel import ServePanel
from desktop_app.ui.widgets.gguf_models import add_gguf_choices, attach_gguf_chooser
from desktop_app.ui.widgets.spec_form import SpecForm
from desktop_app.ui.widgets.stream_view import StreamView

# Settings that only sampling uses, and those only beam search uses (greyed out when they do not apply).
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "seed")
BEAM_ONLY = ("length_penalty", "early_stopping")


class ModelCache:
    """The last loaded model, reused across generations (loading is the slow part). Worker-thread only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.path: str | None = None
        self.loaded: Any = None

    def get(self, path: str) -> Any:
        from desktop_app.engine.model.folders import resolve_model_folder
        from desktop_app.engine.model.loading import load_model

        # Keyed on the folder a path resolves to: a run's "newest checkpoint" moves on while it trains.
        folder = str(resolve_model_folder(path)[0])
        with self._lock:
            if self.path != folder or self.loaded is None:
                self.loaded = None  # free the old one first
                self.loaded = load_model(folder)
                self.path = folder
            return self.loaded

    def clear(self) -> None:
        with self._lock:
            self.path, self.loaded = None, None


def _generate_job(cache: ModelCache, paths: list[str], prompt: str | list[dict[str, str]], spec: GenerateSpec,
                  controls: Controls):
    """Stream `prompt` (a text, or a chat conversation: a list of {"role", "content"} messages) from each model."""
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.generate.prompts import context_length, fit_messages

    for column, path in enumerate(paths):
        if controls.stop.is_set():
            break
        yield ("loading", column, path)
        loaded = cache.get(path)
        yield ("loaded", column, path)
        source: Any = prompt
        if not isinstance(prompt, str):
            # A conversation: drop its oldest turns rather than cut the system prompt (the engine's policy).
            kept, dropped = fit_messages(loaded.tokenizer, prompt, context_length(loaded.model),
                                         reply_tokens=spec.max_new_tokens)
            if dropped:
                yield ("trimmed", column, dropped)
            source = [kept]  # stream_text takes a list of prompts: here one conversation
        for event in stream_text(loaded, source, spec, stop_event=controls.stop):
            yield (column, event)


def checkpoint_folders(run_dir: Path) -> list[Path]:
    """Committed checkpoints of a run (manifest.json written last marks them), oldest first."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "manifest.json").exists())


class GenerateTab(QWidget):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.cache = ModelCache()
        self.task = None
        self.outputs: list[StreamView] = []
        self.stats: list[GenerationStats] = []
        self.history: list[tuple[str, str]] = []  # chat transcript (role, text), user and assistant turns
        self._reply: str | None = None  # the reply of the chat turn in flight, as shown so far (None: no chat turn)
        self._trimmed = 0  # messages of the conversation in flight left out to fit the model's context
        self._discard = False  # Clear during a generation: ignore what the stopping task still sends
        self._beams = 1  # num_beams of the running generation

        self.source_box = QComboBox()
        self.source_box.setObjectName("sourceBox")
        self.source_box.setMinimumWidth(320)
        self.source_box.setToolTip("A run (its newest checkpoint), one checkpoint, an export or a Hugging Face folder")
        self.browse_btn = QPushButton("Browse…")
        self.refresh_btn = QPushButton("Refresh")
        top = QHBoxLayout()
        top.addWidget(QLabel("Model"))
        top.addWidget(self.source_box, 1)
        top.addWidget(self.browse_btn)
        top.addWidget(self.refresh_btn)

        self.form = SpecForm(GenerateSpec)
        form_scroll = QScrollArea()
        form_scroll.setWidgetResizable(True)
        form_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        form_scroll.setWidget(self.form)
        self.compare_check = QCheckBox("Compare checkpoints side by side")
        self.compare_list = QListWidget()
        self.compare_list.setObjectName("compareList")
        self.compare_list.setVisible(False)
        self.compare_list.setMaximumHeight(150)
        settings_box = QGroupBox("Sampling")
        sl = QVBoxLayout(settings_box)
        sl.addWidget(form_scroll, 1)
        sl.addWidget(self.compare_check)
        sl.addWidget(self.compare_list)

        self.system_label = QLabel("System prompt")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPromptEdit")
        self.system_prompt.setPlaceholderText("Optional instructions the model gets before the chat "
                                              "(e.g. \"Answer in one sentence.\")")
        self.system_prompt.setToolTip("Sent as the system message with every turn of the chat")
        self.system_prompt.setMaximumHeight(60)
        self.system_prompt.setAcceptDrops(False)
        self.prompt = QPlainTextEdit()
        self.prompt.setObjectName("promptEdit")
        self.prompt.setPlaceholderText("Type a prompt (empty = start of text)…  Ctrl+G generates")
        self.prompt.setMaximumHeight(110)
        self.prompt.setAcceptDrops(False)
        self.generate_btn = QPushButton("Generate")
        self.generate_btn.setProperty("primary", True)
        self.generate_btn.setObjectName("generateButton")
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setEnabled(False)
        self.clear_btn = QPushButton("Clear")
        self.clear_btn.setObjectName("clearButton")
        self.stats_label = QLabel("")
        self.stats_label.setObjectName("genStats")
        self.stats_label.setProperty("role", "muted")
        actions = QHBoxLayout()
        actions.addWidget(self.generate_btn)
        actions.addWidget(self.stop_btn)
        actions.addWidget(self.clear_btn)
        actions.addWidget(self.stats_label, 1)
        self.out_area = QWidget()
        self.out_grid = QGridLayout(self.out_area)
        self.out_grid.setContentsMargins(0, 0, 0, 0)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.system_label)
        rl.addWidget(self.system_prompt)
        rl.addWidget(QLabel("Prompt"))
        rl.addWidget(self.prompt)
        rl.addLayout(actions)
        rl.addWidget(self.out_area, 1)

        self.serve_panel = ServePanel(ctx, lambda: self.source_box.currentData())
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(settings_box, 1)
        ll.addWidget(self.serve_panel)
        body = QSplitter(Qt.Orientation.Horizontal)
        body.addWidget(left)
        body.addWidget(right)
        body.setSizes([340, 900])
        root = QVBoxLayout(self)
        root.addLayout(top)
        root.addWidget(body, 1)

        self.browse_btn.clicked.connect(self._browse)
        attach_gguf_chooser(self.source_box, lambda: str(self.ctx.workspace.root))
        self.refresh_btn.clicked.connect(lambda _=False: self.refresh_sources())
        self.generate_btn.clicked.connect(lambda _=False: self.generate())
        self.stop_btn.clicked.connect(lambda _=False: self.stop())
        self.clear_btn.clicked.connect(lambda _=False: self.clear())
        self.compare_check.toggled.connect(self.compare_list.setVisible)
        self.form.changed.connect(self._on_form_changed)
        self._sync_beam_controls()
        self._sync_chat_controls()
        self._make_outputs(["Output"])
        self.refresh_sources()

    # --- sources ---
    def refresh_sources(self) -> None:
        current = self.source_box.currentData()
        self.source_box.blockSignals(True)
        self.source_box.clear()
        self.compare_list.clear()
        ws = self.ctx.workspace
        for run in ws.items("runs"):
            ckpts = checkpoint_folders(run)
            if ckpts:
                self.source_box.addItem(f"run {run.name} (newest checkpoint, step {_step(ckpts[-1])})", str(run))
                for c in ckpts:
                    item = QListWidgetItem(f"{run.name} · step {_step(c)}")
                    item.setData(Qt.ItemDataRole.UserRole, str(c))
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    item.setCheckState(Qt.CheckState.Unchecked)
                    self.compare_list.addItem(item)
        for kind in ("models", "exports"):
            for p in ws.items(kind):
                if p.is_dir() and (p / "config.json").exists():
                    self.source_box.addItem(f"{kind[:-1]} {p.name}", str(p))
        add_gguf_choices(self.source_box, ws)  # the workspace's .gguf files, Ollama's and LM Studio's, "GGUF file…"
        if current:
            i = self.source_box.findData(current)
            if i < 0:
                self.source_box.addItem(Path(current).name, current)
                i = self.source_box.count() - 1
            self.source_box.setCurrentIndex(i)
        self.source_box.blockSignals(False)

    def select_source(self, path: str) -> None:
        i = self.source_box.findData(str(path))
        if i < 0:
            self.source_box.addItem(Path(path).name, str(path))
            i = self.source_box.count() - 1
        self.source_box.setCurrentIndex(i)

    def _browse(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a run, checkpoint, export or Hugging Face folder",
                                                  str(self.ctx.workspace.root))
        if folder:
            self.select_source(folder)

    # --- outputs ---
    def _make_outputs(self, titles: list[str]) -> None:
        for view in self.outputs:
            view.stop_timers()
        while self.out_grid.count():
            w = self.out_grid.takeAt(0).widget()
            if w is not None:
                w.hide()  # deleteLater alone leaves it painted until the loop runs deferred deletes
                w.setParent(None)
                w.deleteLater()
        self.outputs = []
        cols = min(len(titles), 3)
        for i, title in enumerate(titles):
            box = QGroupBox(title)
            lay = QVBoxLayout(box)
            view = StreamView()
            view.setObjectName(f"output{i}")
            lay.addWidget(view)
            self.out_grid.addWidget(box, i // cols, i % cols)
            self.outputs.append(view)

    def clear(self) -> None:
        """Empty the outputs and forget the chat ("New chat" in chat mode); a reply still streaming is dropped."""
        if self.running:
            self.task.stop()
            self._discard = True  # its late events (and the reply) belong to the forgotten outputs
        self._reply = None
        self.history.clear()
        self._make_outputs(["Output"])
        self.stats_label.setText("")

    def messages(self) -> list[dict[str, str]]:
        """The conversation the next chat turn sends: the system prompt (when given), then the transcript."""
        system = self.system_prompt.toPlainText().strip()
        head = [{"role": "system", "content": system}] if system else []
        return head + [{"role": role, "content": text} for role, text in self.history]

    # --- settings ---
    def settings_spec(self) -> GenerateSpec:
        """The form's settings as generation uses them: with beams > 1 the greyed-out sampling settings are
        not used (temperature 0: beams pick without randomness)."""
        spec = self.form.spec()
        return spec.replace(temperature=0.0) if spec.num_beams > 1 else spec

    def _on_form_changed(self) -> None:
        self._sync_beam_controls()
        self._sync_chat_controls()
        self.form.show_problems(self.settings_spec().validate())

    def _sync_beam_controls(self) -> None:
        """Beams > 1: sampling settings off (they do not apply), beam settings on; and the other way round."""
        beams = self.form.editors["num_beams"].value() > 1  # type: ignore[attr-defined]
        layout = self.form.layout()
        for name in SAMPLING_ONLY + BEAM_ONLY:
            editor = self.form.editors.get(name)
            if editor is None:
                continue
            enabled = (name in BEAM_ONLY) == beams
            editor.setEnabled(enabled)
            label = layout.labelForField(editor) if hasattr(layout, "labelForField") else None
            if label is not None:
                label.setEnabled(enabled)

    def _sync_chat_controls(self) -> None:
        """Chat mode shows the system prompt, and Clear becomes "New chat" (it forgets the conversation)."""
        chat = bool(self.form.editors["chat"].isChecked())  # type: ignore[attr-defined]
        self.system_label.setVisible(chat)
        self.system_prompt.setVisible(chat)
        self.clear_btn.setText("New chat" if chat else "Clear")
        self.clear_btn.setToolTip("Forget the conversation and start a new one" if chat else "Empty the outputs")

    # --- run ---
    @property
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def generate(self, prompt: str | None = None) -> bool:
        if self.running:  # Ctrl+G or the Library can ask while a generation streams
            self.ctx.info("A generation is running: stop it first.")
            return False
        spec = self.settings_spec()
        problems = spec.validate()
        self.form.show_problems(problems)
        if problems:
            self.ctx.report_error("The sampling settings have problems:\n" + "\n".join(problems),
                                  title="Check the settings")
            return False
        if self.compare_check.isChecked():
            paths = [self.compare_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.compare_list.count())
                     if self.compare_list.item(i).checkState() == Qt.CheckState.Checked]
            if len(paths) < 2:
                self.ctx.report_error("Tick at least two checkpoints to compare.", title="Compare checkpoints")
                return False
            spec = spec.replace(samples=1)
            titles = [f"{Path(p).parent.parent.name} · step {_step(Path(p))}" for p in paths]
        else:
            path = self.source_box.currentData()
            if not path:
                self.ctx.report_error("No model to generate with: train one first, or choose a folder with Browse.",
                                      title="No model")
                return False
            paths = [path]
            label = "Beam" if spec.num_beams > 1 else "Sample"
            titles = [f"{label} {i + 1}" for i in range(spec.samples)] if spec.samples > 1 else ["Output"]
        text = self.prompt.toPlainText() if prompt is None else prompt
        if prompt is not None:
            self.prompt.setPlainText(prompt)
        chat = spec.chat and not self.compare_check.isChecked()
        request: str | list[dict[str, str]] = text
        if chat:
            # The transcript stays visible; the model sees all of it (system prompt first) through its chat
            # template. One reply per turn: the transcript holds one assistant message per user message.
            spec = spec.replace(samples=1)
            if not self.outputs or len(self.outputs) != 1 or not self.history:
                self._make_outputs(["Chat"])
                system = self.system_prompt.toPlainText().strip()
                if system:
                    self.outputs[0].append_text(f"System: {system}\n\n")
            self.history.append(("user", text))
            request = self.messages()
            self.outputs[0].append_text(("\n\n" if self.history[:-1] else "") + f"You: {text}\n\nModel: ")
            self._reply = ""
        else:
            self.history.clear()
            self._reply = None
            self._make_outputs(titles)
            for view in self.outputs:
                view.set_prefix(text)
        self._trimmed = 0
        self.stats = []
        controls = Controls()
        self._columns = len(paths) > 1
        self._beams = spec.num_beams
        self.task = self.ctx.runner.start("generate",
                                          lambda: _generate_job(self.cache, paths, request, spec, controls), controls)
        self.task.produced.connect(self._on_item)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_finished)
        self.generate_btn.setEnabled(False)
        self.stop_btn.setEnabled(True)
        self.stats_label.setText("loading the model…")
        return True

    def stop(self) -> None:
        if self.running:
            self.task.stop()

    def _on_item(self, item: Any) -> None:
        if not isinstance(item, tuple) or self._discard:
            return
        if item[0] == "loading":
            self.stats_label.setText(f"loading {Path(item[2]).name}…")
            return
        if item[0] == "loaded":
            beams = self._beams
            self.stats_label.setText(f"beam search ({beams} beams)…" if beams > 1 else "generating…")
            return
        if item[0] == "trimmed":
            self._trimmed = item[2]
            self.stats_label.setText(f"{self._trim_note()} · generating…")
            return
        column, event = item
        if isinstance(event, TextDelta):
            index = column if self._columns else event.sample
            if 0 <= index < len(self.outputs):
                self.outputs[index].append_text(event.text)
            if self._reply is not None:
                self._reply += event.text
        elif isinstance(event, GenerationStats):
            self.stats.append(event)
            if self._reply is not None:
                self._reply = event.text  # the whole reply (equal to what streamed, stopped or not)
            notes = [self._trim_note()] if self._trimmed else []
            self.stats_label.setText(" · ".join(
                notes + [f"{s.tokens_per_s:.1f} tokens/s, first token {s.ttft_ms:.0f} ms ({s.finish_reason})"
                         for s in self.stats[-3:]]))

    def _trim_note(self) -> str:
        return f"the {self._trimmed} oldest messages no longer fit the model's context: it did not see them"

    def _on_failed(self, message: str, details: str) -> None:
        if self._discard:
            return
        self.stats_label.setText("failed")
        if self._reply == "" and self.history and self.history[-1][0] == "user":
            # Nothing came back: forget the turn, so a retry does not send two user messages in a row.
            self.history.pop()
            self._reply = None
            if self.outputs:
                self.outputs[0].append_text("(no reply: the generation failed)")
        self.ctx.report_error(message, details, title="Generation failed")

    def _on_finished(self) -> None:
        self.generate_btn.setEnabled(True)
        self.stop_btn.setEnabled(False)
        if self._reply is not None and not self._discard:
            # The model's reply joins the transcript the next turn sends; a stopped one as far as it was shown.
            self.history.append(("assistant", self._reply))
        self._reply, self._discard = None, False
        for view in self.outputs:
            view.flush()
        if not self.stats and self.task is not None and self.task.error is None:
            self.stats_label.setText("stopped")

    def output_text(self, index: int = 0) -> str:
        """What the model generated in output `index` (without the greyed prompt)."""
        return self.outputs[index].generated_text() if index < len(self.outputs) else ""

    def stop_timers(self) -> None:
        for view in self.outputs:
            view.stop_timers()
        self.serve_panel.stop()  # called when the window shuts down: the server process must not outlive it


def _step(path: Path) -> str:
    name = path.name
    digits = name.split("-")[-1]
    return str(int(digits)) if digits.isdigit() else html.escape(name)
