"""Generate tab: pick a model or checkpoint, then chat with it or let it complete a text, with sampling settings;
compare checkpoints side by side; serve the model to other programs.

Two modes (the `chat` setting; a model that ships its own chat template opens in Chat):
- Chat: a conversation in bubbles. Every turn sends the optional system prompt and the whole conversation (your
  messages and the replies the model actually gave, a stopped reply as far as it was shown) through the model's
  chat template. Enter sends, Shift+Enter starts a new line; the box empties once sent (the chat and text completion
  keep a draft each). Regenerate asks again for the last reply and keeps the ones it replaces (‹ 1/2 ›: the one shown
  is the one the chat goes on from), Edit puts one of your messages back in the box (the chat after it is
  forgotten). When the chat outgrows the model's context its oldest turns are left out of what the model sees (the
  status line says so).
  Each reply names its model; choosing another model mid-chat keeps the chat and marks the change ("model: NAME").
- Text completion: the model continues the prompt (Ctrl+Enter generates), several samples or checkpoints side by
  side. Beams above 1 switch to beam search: the sampling-only settings (temperature, top-k, top-p, min-p, seed)
  are greyed out and not used, length penalty and early stopping become active, and each output shows its beam's
  text when the search ends (beams cannot stream: a beam's past can still change).
- Seeds: each reply (and each Regenerate) draws a new seed, written into the Seed field and the reply's footer;
  setting a seed (or unticking "New seed for each reply") keeps it, and the same seed and settings give the same reply.
- The model: the run that finished last, until the person chooses one (the list, Browse, the Library).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.events import Controls, GenerationStats, TextDelta
from desktop_app.engine.generate.choices import newest_finished_run, reply_spec, uses_seed
from desktop_app.engine.specs import GenerateSpec
from desktop_app.ui.context import AppContext
from desktop_app.ui.generate_support import ModelCache, finish_words, generate_job, opens_in_chat
from desktop_app.ui.tabs.generate_sources import list_sources, source_name, step_label
from desktop_app.ui.tabs.serve_panel import ServePanel
from desktop_app.ui.widgets.chat_view import Bubble, ChatInput, ChatView, copy_text
from desktop_app.ui.widgets.fitting import ColumnScroll
from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF, attach_gguf_chooser
from desktop_app.ui.widgets.layouts import add_items, button, note_label, path_combo, splitter
from desktop_app.ui.widgets.mode_button import ModeButton
from desktop_app.ui.widgets.opened_ggufs import remember_gguf_model, window_settings
from desktop_app.ui.widgets.spec_form import SpecForm
from desktop_app.ui.widgets.stream_view import StreamView

# Settings that only sampling uses, and those only beam search uses (greyed out when they do not apply).
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "min_p", "seed")
BEAM_ONLY = ("length_penalty", "early_stopping")


class GenerateTab(QWidget):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.cache = ModelCache()
        self.task = None
        self.outputs: list[StreamView] = []
        self.stats: list[GenerationStats] = []
        self.history: list[tuple[str, str]] = []  # the conversation (role, text), user and assistant turns
        self._reply: str | None = None  # the reply of the chat turn in flight, as shown so far (None: no chat turn)
        self._reply_bubble: Bubble | None = None
        self._trimmed = 0  # messages of the conversation in flight left out to fit the model's context
        self._discard = False  # Clear during a generation: ignore what the stopping task still sends
        self._beams = 1  # num_beams of the running generation
        self._max_new = 0  # max_new_tokens of the running generation (for "cut at the longest reply")
        self._mode_pending = False  # the model changed while the tab was hidden: choose its mode when shown
        self._person_chose = False  # the person picked the model: a run that finishes later does not replace it
        self._seed: int | None = None  # the seed of the generation in flight (None: greedy or beams, no seed)
        self._drawn_seed = GenerateSpec().seed  # the Seed field as last drawn: any other value was set by the person

        top = self._build_model_bar()
        body = splitter(Qt.Orientation.Horizontal, [self._build_settings_panel(), self._build_conversation()],
                        stretch=(0, 1), sizes=(330, 900))
        add_items(QVBoxLayout(self), top, (body, 1))
        self._connect_signals()
        self._sync_beam_controls()
        self._sync_chat_controls()
        self._make_outputs(["Output"])
        self.refresh_sources()

    def _build_model_bar(self) -> QHBoxLayout:
        """The model to use, Browse and Refresh, and the two modes (Chat, Text completion)."""
        self.source_box = path_combo("sourceBox", 200, 24)
        self.source_box.setToolTip("A run (its newest checkpoint), one checkpoint, an export or a Hugging Face folder")
        self.browse_btn = QPushButton("Browse…")
        self.refresh_btn = QPushButton("Refresh")
        self.chat_btn = ModeButton("Chat")
        self.complete_btn = ModeButton("Text completion")
        self.mode_group = QButtonGroup(self)
        for b, name, tip in ((self.chat_btn, "chatModeButton",
                              "A conversation through the model's chat template (on for models that ship one)"),
                             (self.complete_btn, "completionModeButton",
                              "The model continues your text; several samples or checkpoints side by side")):
            b.setObjectName(name)
            b.setToolTip(tip)
            self.mode_group.addButton(b)
        top = add_items(QHBoxLayout(), QLabel("Model"), (self.source_box, 1), self.browse_btn, self.refresh_btn)
        top.addSpacing(12)
        return add_items(top, self.chat_btn, self.complete_btn)

    def _build_settings_panel(self) -> QScrollArea:
        """The left column: sampling settings, the checkpoints to compare, the local server."""
        self.form = SpecForm(GenerateSpec)
        self.new_seed_check = QCheckBox("New seed for each reply")
        self.new_seed_check.setObjectName("newSeedCheck")
        self.new_seed_check.setChecked(True)
        self.new_seed_check.setToolTip("Each reply and each Regenerate draws a new seed (shown in the Seed field and "
                                       "under the reply). Untick it, or type a seed, to keep one: the same seed and "
                                       "settings give the same reply again.")
        form_rows = self.form.layout()
        seed_row, _role = form_rows.getWidgetPosition(self.form.editors["seed"])  # type: ignore[attr-defined]
        form_rows.insertRow(seed_row + 1, self.new_seed_check)  # type: ignore[attr-defined]  # the whole width
        self.compare_check = QCheckBox("Compare checkpoints side by side")
        self.compare_list = QListWidget()
        self.compare_list.setObjectName("compareList")
        self.compare_list.setVisible(False)
        self.compare_list.setMaximumHeight(150)
        settings_box = QGroupBox("Sampling")
        add_items(QVBoxLayout(settings_box), self.form, self.compare_check, self.compare_list)
        self.serve_panel = ServePanel(self.ctx, lambda: self.source_box.currentData())
        left_inner = QWidget()
        ll = add_items(QVBoxLayout(left_inner), settings_box, self.serve_panel)
        ll.setContentsMargins(0, 0, 6, 0)
        ll.addStretch(1)
        left = ColumnScroll(left_inner, [self.form])
        return left

    def _build_conversation(self) -> QWidget:
        """The right column: the system prompt, the chat or the outputs, then the prompt box and its buttons."""
        self.chat_view = ChatView()
        self.out_area = QWidget()
        self.out_grid = QGridLayout(self.out_area)
        self.out_grid.setContentsMargins(0, 0, 0, 0)
        self.output_stack = QStackedWidget()
        self.output_stack.addWidget(self.out_area)
        self.output_stack.addWidget(self.chat_view)
        self.system_label = QLabel("System prompt")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("systemPromptEdit")
        self.system_prompt.setPlaceholderText("Optional instructions the model gets before the chat "
                                              "(e.g. \"Answer in one sentence.\")")
        self.system_prompt.setToolTip("Sent as the system message with every turn of the chat")
        self.system_prompt.setMaximumHeight(48)
        self.system_prompt.setTabChangesFocus(True)
        self.system_prompt.setAcceptDrops(False)
        self.prompt_label = QLabel("Prompt")
        self.prompt = ChatInput()
        self.prompt.setObjectName("promptEdit")
        self.prompt.setMaximumHeight(96)
        self.prompt.setAcceptDrops(False)
        right = QWidget()
        add_items(QVBoxLayout(right), self.system_label, self.system_prompt, (self.output_stack, 1), self.prompt_label,
                  self.prompt, self._build_action_row(), margins=0)
        return right

    def _build_action_row(self) -> QHBoxLayout:
        """Generate (Send), Stop, Clear (New chat), Copy chat and the generation's figures."""
        self.generate_btn = button("Generate", "generateButton", primary=True)
        self.stop_btn = button("Stop", enabled=False)
        self.clear_btn = button("Clear", "clearButton")
        self.copy_chat_btn = button("Copy chat", tip="Copy the whole conversation as text")
        self.stats_label = note_label()
        self.stats_label.setObjectName("genStats")
        return add_items(QHBoxLayout(), self.generate_btn, self.stop_btn, self.clear_btn,
                         self.copy_chat_btn, (self.stats_label, 1))

    def _connect_signals(self) -> None:
        self.browse_btn.clicked.connect(self._browse)
        attach_gguf_chooser(self.source_box, lambda: str(self.ctx.workspace.root))
        self.refresh_btn.clicked.connect(lambda _=False: self.refresh_sources())
        self.generate_btn.clicked.connect(lambda _=False: self.generate())
        self.prompt.submitted.connect(lambda: self.generate())
        self.stop_btn.clicked.connect(lambda _=False: self.stop())
        self.clear_btn.clicked.connect(lambda _=False: self.clear())
        self.copy_chat_btn.clicked.connect(lambda _=False: copy_text(self.chat_view.text()))
        self.compare_check.toggled.connect(self.compare_list.setVisible)
        self.form.changed.connect(self._on_form_changed)
        self.chat_btn.clicked.connect(lambda _=False: self.set_chat_mode(True))
        self.complete_btn.clicked.connect(lambda _=False: self.set_chat_mode(False))
        self.source_box.currentIndexChanged.connect(lambda _i: self._on_source_changed())
        self.source_box.activated.connect(lambda _i: setattr(self, "_person_chose", True))
        self.chat_view.copy_requested.connect(copy_text)
        self.chat_view.regenerate_requested.connect(self.regenerate)
        self.chat_view.edit_requested.connect(self.edit_message)
        self.chat_view.alternative_chosen.connect(self._choose_reply)

    # --- sources ---
    def refresh_sources(self) -> None:
        """List the models again; the person's choice is kept, else the run that finished last is chosen."""
        current = self.source_box.currentData()
        self.source_box.blockSignals(True)
        runs = list_sources(self.source_box, self.compare_list, self.ctx.workspace)
        newest = None if self._person_chose else newest_finished_run(runs)
        target = str(newest) if newest is not None else current
        if target and target != CHOOSE_GGUF:
            self._show_source(target)  # kept, even when it is no longer listed (a folder chosen with Browse)
        self.source_box.blockSignals(False)
        if self.source_box.currentData() != current:
            self._on_source_changed()

    def select_source(self, path: str) -> None:
        """Choose the model at `path` for the person (the Library, a finished run's "Chat", Browse, tests): kept
        when the list is refreshed."""
        self._person_chose = True
        self._show_source(path)

    def _show_source(self, path: str) -> None:
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

    def _on_source_changed(self) -> None:
        """A model taught to chat opens in Chat, any other in Text completion (see `opens_in_chat`). Decided once the
        tab is shown: reading a model's tokenizer files has no place in the window's start-up."""
        path = self.source_box.currentData()
        if not path or path == CHOOSE_GGUF:  # "Choose a model…", or "GGUF file…" before its dialog: no model yet
            return
        remember_gguf_model(window_settings(self), path)  # a GGUF file opened here is listed in the Library
        if not self.isVisible():
            self._mode_pending = True
        elif not self.running:
            self._mode_pending = False
            self.set_chat_mode(opens_in_chat(path))

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._mode_pending:
            self._on_source_changed()

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
        self._reply, self._reply_bubble = None, None
        self.history.clear()
        self.chat_view.clear()
        self._make_outputs(["Output"])
        self.stats_label.setText("")

    def messages(self) -> list[dict[str, str]]:
        """The conversation the next chat turn sends: the system prompt (when given), then the transcript."""
        system = self.system_prompt.toPlainText().strip()
        head = [{"role": "system", "content": system}] if system else []
        return head + [{"role": role, "content": text} for role, text in self.history]

    # --- settings and mode ---
    def chat_mode(self) -> bool:
        return bool(self.form.spec().chat)

    def set_chat_mode(self, on: bool) -> None:
        self._mode_pending = False  # chosen: the model's default no longer applies
        if self.chat_mode() != bool(on):
            self.form.set_value("chat", bool(on))  # comes back through form.changed
        else:
            self._sync_chat_controls()

    def settings_spec(self) -> GenerateSpec:
        """The form's settings as generation uses them: with beams > 1 the greyed-out sampling settings are
        not used (temperature 0: beams pick without randomness)."""
        spec = self.form.spec()
        return spec.replace(temperature=0.0) if spec.num_beams > 1 else spec

    def _on_form_changed(self) -> None:
        if self.chat_btn.isChecked() != self.chat_mode():
            self._mode_pending = False  # the mode was set through the settings: keep it
        seed = self.form.spec().seed
        if seed != self._drawn_seed:  # a seed the person set (typed, or set for them) is kept, not drawn over
            self._drawn_seed = seed
            self.new_seed_check.setChecked(False)
        self._sync_beam_controls()
        self._sync_chat_controls()
        self.form.show_problems(self.settings_spec().validate())

    def _sync_beam_controls(self) -> None:
        """Beams > 1: sampling settings off (they do not apply), beam settings on; and the other way round."""
        beams = self.form.editors["num_beams"].value() > 1  # type: ignore[attr-defined]
        for name in SAMPLING_ONLY + BEAM_ONLY:
            editor = self.form.editors.get(name)
            if editor is None:
                continue
            enabled = (name in BEAM_ONLY) == beams
            editor.setEnabled(enabled)
            self.form.labels[name].setEnabled(enabled)
        self.new_seed_check.setEnabled(not beams)

    def _sync_chat_controls(self) -> None:
        """Chat shows the conversation, the system prompt and "New chat"; Text completion the outputs side by side."""
        chat = self.chat_mode()
        self.chat_btn.setChecked(chat)
        self.complete_btn.setChecked(not chat)
        self.output_stack.setCurrentWidget(self.chat_view if chat else self.out_area)
        self.system_label.setVisible(chat)
        self.system_prompt.setVisible(chat)
        self.copy_chat_btn.setVisible(chat)
        self.compare_check.setVisible(not chat)
        self.compare_list.setVisible(not chat and self.compare_check.isChecked())
        self.prompt.send_on_enter = chat
        self.prompt.use_for("chat" if chat else "completion")
        self.prompt_label.setText("Message" if chat else "Prompt")
        self.prompt.setPlaceholderText("Message the model…  Enter sends, Shift+Enter starts a new line" if chat else
                                       "Text for the model to continue (empty: start of text)…  Ctrl+Enter generates")
        self.generate_btn.setText("Send" if chat else "Generate")
        self.clear_btn.setText("New chat" if chat else "Clear")
        self.clear_btn.setToolTip("Forget the conversation and start a new one" if chat else "Empty the outputs")

    # --- run ---
    @property
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def generate(self, prompt: str | None = None) -> bool:
        """Send the box's text (or `prompt`): a chat turn in Chat, a completion otherwise."""
        if self.running:  # Ctrl+G or the Library can ask while a generation streams
            self.ctx.info("A generation is running: stop it first.")
            return False
        spec = self.settings_spec()
        problems = spec.validate()
        self.form.show_problems(problems)
        if problems:
            self.ctx.report_error("The sampling settings have problems:\n" + "\n".join(
                self.form.in_words(p) for p in problems), title="Check the settings")
            return False
        chat = spec.chat and not self.compare_check.isChecked()
        text = self.prompt.toPlainText() if prompt is None else prompt
        if chat and not text.strip():
            self.ctx.info("Type a message first.")
            return False
        targets = self._targets(spec, chat)
        if targets is None:
            return False
        paths, titles, spec = targets
        spec = self._seeded(spec)
        if chat:
            self.prompt.clear()  # sent: the box is free for the next message
            if not self.history:
                self.chat_view.clear()  # a new conversation (its system prompt as it is now)
                system = self.system_prompt.toPlainText().strip()
                if system:
                    self.chat_view.add("system", system)
            self.history.append(("user", text))
            self.chat_view.add("user", text).in_history = True
            return self._send_chat(paths, spec)
        if prompt is not None:
            self.prompt.setPlainText(prompt)
        self.history.clear()
        self._reply = None
        self._make_outputs(titles)
        for view in self.outputs:
            view.set_prefix(text)
        return self._start(paths, text, spec)

    def _targets(self, spec: GenerateSpec, chat: bool) -> tuple[list[str], list[str], GenerateSpec] | None:
        """(model paths, output titles, spec) of a generation: the ticked checkpoints when comparing, else the chosen
        model; None (the user told why) when there is nothing to generate with."""
        if self.compare_check.isChecked() and not chat:
            paths = [self.compare_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.compare_list.count())
                     if self.compare_list.item(i).checkState() == Qt.CheckState.Checked]
            if len(paths) < 2:
                self.ctx.report_error("Tick at least two checkpoints to compare.", title="Compare checkpoints")
                return None
            titles = [f"{Path(p).parent.parent.name} · step {step_label(Path(p))}" for p in paths]
            return paths, titles, spec.replace(samples=1)
        path = self.source_box.currentData()
        if not path:
            self.ctx.report_error("No model to generate with: train one first, or choose a folder with Browse.",
                                  title="No model")
            return None
        label = "Beam" if spec.num_beams > 1 else "Sample"
        titles = [f"{label} {i + 1}" for i in range(spec.samples)] if spec.samples > 1 else ["Output"]
        return [path], titles, spec

    def _seeded(self, spec: GenerateSpec) -> GenerateSpec:
        """`spec` with this reply's seed: a new one unless the person keeps theirs (the engine's rule), shown in the
        Seed field so that typing it back gives this reply again."""
        seeded = reply_spec(spec, new_seed=self.new_seed_check.isChecked())
        if seeded.seed != spec.seed:
            self._drawn_seed = seeded.seed
            self.form.set_value("seed", seeded.seed)
        return seeded

    def _send_chat(self, paths: list[str], spec: GenerateSpec, into: Bubble | None = None) -> bool:
        """The conversation so far (ending with your message) to the model; its reply streams into a new bubble
        (or `into`, Regenerate's) that names the model, under a line "model: NAME" when the reply before it came
        from another model."""
        # One reply per turn: the transcript holds one assistant message per user message.
        spec = spec.replace(samples=1)
        self._reply = ""
        path = paths[0]
        model = (path, source_name(path, self.source_box.itemText(self.source_box.findData(path))))
        before = next((b for b in reversed(self.chat_view.bubbles) if b.role == "assistant" and b.in_history), None)
        changed = before is not None and before.model != model
        self._reply_bubble = into or self.chat_view.add("assistant", line=f"model: {model[1]}" if changed else "")
        self._reply_bubble.set_author(*model)
        if into is not None:
            self.chat_view.refresh_line(into)
        self.chat_view.set_regenerable(None)
        self.chat_view.set_editable(False)
        return self._start(paths, self.messages(), spec)

    def _start(self, paths: list[str], request: str | list[dict[str, str]], spec: GenerateSpec) -> bool:
        self._trimmed = 0
        self.stats = []
        controls = Controls()
        self._columns = len(paths) > 1
        self._beams, self._max_new = spec.num_beams, spec.max_new_tokens
        self._seed = spec.seed if uses_seed(spec) else None
        self.task = self.ctx.runner.start("generate",
                                          lambda: generate_job(self.cache, paths, request, spec, controls), controls)
        self.task.produced.connect(self._on_item)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_finished)
        self.generate_btn.setEnabled(False)
        self.stop_btn.setEnabled(True)
        self.stats_label.setText("loading the model…")
        return True

    def regenerate(self) -> bool:
        """Ask again for the model's last reply (the conversation up to your last message is sent again); the reply
        it replaces stays in its bubble, one ‹ away."""
        if self.running or not self.history or self.history[-1][0] != "assistant":
            return False
        path = self.source_box.currentData()
        if not path:
            return False
        self.history.pop()
        last = self.chat_view.last("assistant")
        if last is not None:
            last.start_over()
        return self._send_chat([path], self._seeded(self.settings_spec()), into=last)  # asked again: drawn again

    def _choose_reply(self, text: str) -> None:
        """‹ › on the last reply: the chat goes on from the one shown."""
        if self.history and self.history[-1][0] == "assistant":
            self.history[-1] = ("assistant", text)

    def edit_message(self, index: int) -> None:
        """Put message `index` (one of yours) back in the box; it and the chat after it are forgotten."""
        if self.running or not 0 <= index < len(self.chat_view.bubbles):
            return
        bubble = self.chat_view.bubbles[index]
        kept = sum(1 for b in self.chat_view.bubbles[:index] if b.in_history)
        del self.history[kept:]
        self.chat_view.remove_from(index)
        self.chat_view.set_regenerable(self.chat_view.last("assistant") if self.history else None)
        self.prompt.setPlainText(bubble.text())
        self.prompt.setFocus()

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
            if self._reply is not None:
                self._reply += event.text
                if self._reply_bubble is not None:
                    self.chat_view.stream(self._reply_bubble, event.text)
                return
            index = column if self._columns else event.sample
            if 0 <= index < len(self.outputs):
                self.outputs[index].append_text(event.text)
        elif isinstance(event, GenerationStats):
            self._on_stats(event)

    def _on_stats(self, event: GenerationStats) -> None:
        """A finished output: its figures, how it ended and its seed, under the reply and in the status line."""
        self.stats.append(event)
        how = finish_words(event.finish_reason, self._max_new)
        seed = [] if self._seed is None else [f"seed {self._seed}"]
        if self._reply is not None:
            self._reply = event.text  # the whole reply (equal to what streamed, stopped or not)
            if self._reply_bubble is not None:
                self._reply_bubble.set_note(" · ".join([f"{len(event.token_ids):,} tokens",
                                                        f"{event.tokens_per_s:.1f} tokens/s", how, *seed]))
        notes = [self._trim_note()] if self._trimmed else []
        self.stats_label.setText(" · ".join(
            notes + [f"{s.tokens_per_s:.1f} tokens/s, first token {s.ttft_ms:.0f} ms, "
                     f"{finish_words(s.finish_reason, self._max_new)}" for s in self.stats[-3:]] + seed))

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
            user = self.chat_view.last("user")
            if user is not None:
                user.in_history = False
                user.set_note("not sent: the generation failed (Edit puts it back in the box)")
            if self._reply_bubble is not None:
                self.chat_view.stream(self._reply_bubble, "(no reply: the generation failed)")
        self.ctx.report_error(message, details, title="Generation failed")

    def _on_finished(self) -> None:
        self.generate_btn.setEnabled(True)
        self.stop_btn.setEnabled(False)
        if self._reply is not None and not self._discard:
            # The model's reply joins the transcript the next turn sends; a stopped one as far as it was shown.
            self.history.append(("assistant", self._reply))
            if self._reply_bubble is not None:
                self._reply_bubble.in_history = True
                self._reply_bubble.keep()
        self._reply, self._discard = None, False
        for view in self.outputs:
            view.flush()
        self.chat_view.flush()
        self.chat_view.set_editable(True)
        last = self.chat_view.last("assistant")
        self.chat_view.set_regenerable(last if last is not None and last.in_history else None)
        self._reply_bubble = None
        if not self.stats and self.task is not None and self.task.error is None:
            self.stats_label.setText("stopped")

    def output_text(self, index: int = 0) -> str:
        """What the model generated in output `index` (without the greyed prompt); in Chat, the conversation as
        text ("You: ...", "Model: ...")."""
        if self.chat_mode() and index == 0:
            return self.chat_view.text()
        return self.outputs[index].generated_text() if index < len(self.outputs) else ""

    def stop_timers(self) -> None:
        for view in self.outputs:
            view.stop_timers()
        self.chat_view.stop_timers()
        self.serve_panel.stop()  # called when the window shuts down: the server process must not outlive it

