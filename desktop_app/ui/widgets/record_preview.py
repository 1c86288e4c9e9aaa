"""Record preview: one record of a data file rendered through the base model's chat template, every token
coloured by whether it carries loss (green) or not (grey: prompt, system and template tokens).

The first thing that goes wrong in SFT is a template or mask that leaves nothing to learn; this shows it
before a run starts. The tokenizer (transformers) loads in the background runner; the rendering itself
is the engine's `finetune.chat_template.preview`, so what is shown is exactly what training will use.
"""

from __future__ import annotations

import html
import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTextBrowser, QVBoxLayout, QWidget

from desktop_app.engine.errors import UserError
from desktop_app.ui import theme
from desktop_app.ui.widgets.layouts import path_combo

LOSS_BG = ("#bbf7d0", "#86efac")  # alternating, so token boundaries show
PLAIN_BG = ("#f3f4f6", "#e5e7eb")
LOSS_FG = "#14532d"
PLAIN_FG = "#4b5563"


class PreviewCache:
    """The last tokenizer and the last file's records, reused across Next/Previous (worker thread only)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._tok_key: Any = None
        self._tok: Any = None
        self._tok_notes: list[str] = []
        self._rec_key: Any = None
        self._records: tuple[list[dict[str, Any]], list[Any]] = ([], [])

    def tokenizer(self, source: Any) -> tuple[Any, list[str]]:
        key = source if isinstance(source, str) else id(source)
        if key != self._tok_key:
            from desktop_app.engine.finetune.chat_template import as_hf_tokenizer, ensure_chat_tokens  # lazy: numpy

            tok = as_hf_tokenizer(source)
            notes = ensure_chat_tokens(tok)  # as training does: ChatML added when the tokenizer has no template
            self._tok_key, self._tok, self._tok_notes = key, tok, list(notes)
        return self._tok, self._tok_notes

    def records(self, path: str) -> tuple[list[dict[str, Any]], list[Any]]:
        p = Path(path)
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
        if key != self._rec_key:
            from desktop_app.engine.finetune.formats import read_records  # lazy: numpy

            self._records = read_records([p])
            self._rec_key = key
        return self._records


def _messages_text(messages: Any) -> str:
    if isinstance(messages, list):
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in messages if isinstance(m, dict))
    return str(messages)


def preview_job(cache: PreviewCache, source: Any, path: str, index: int, loss_on: str):
    """Runs in the worker thread: yields one dict describing record `index` of `path`, rendered."""
    from desktop_app.engine.finetune.chat_template import preview  # lazy: numpy

    with cache.lock:
        records, verdicts = cache.records(path)
        summary = next((str(v.reason) for v in verdicts if v.line == 0), "")
        problems = [str(v) for v in verdicts if v.line and v.status != "ok"]
        if not records:
            raise UserError(f"{Path(path).name}: {summary or 'no usable record'}")
        index = max(0, min(index, len(records) - 1))
        record = records[index]
        out = {"path": path, "index": index, "count": len(records), "line": record.get("source", {}).get("line", 0),
               "summary": summary, "problems": problems, "pieces": [], "error": "", "notes": [], "rejected": ""}
        if "rejected" in record:
            out["rejected"] = _messages_text(record["rejected"])
        tok, notes = cache.tokenizer(source)
        out["notes"] = notes
        try:
            out["pieces"] = preview(tok, record, loss_on=loss_on)
        except UserError as exc:
            out["error"] = str(exc)
    yield out


def pieces_html(pieces: list[tuple[str, bool]]) -> str:
    """Rich text of the rendered tokens: loss-bearing ones on green, the rest on grey, boundaries visible."""
    parts = []
    for k, (text, loss) in enumerate(pieces):
        bg = (LOSS_BG if loss else PLAIN_BG)[k % 2]
        fg = LOSS_FG if loss else PLAIN_FG
        shown = html.escape(text).replace("\n", "↵<br>") if text else "∅"
        cls = "loss" if loss else "plain"
        parts.append(f'<span class="{cls}" style="background-color:{bg}; color:{fg};">{shown}</span>')
    return ('<div style="font-family: monospace; white-space: pre-wrap; line-height: 150%;">'
            + "".join(parts) + "</div>")


class RecordPreview(QWidget):
    """Pick a file, step through its records, see the template and the loss mask."""

    def __init__(self, runner: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self.runner = runner
        self.cache = PreviewCache()
        self.source: Any = ""
        self.files: list[str] = []
        self.loss_on = "assistant"
        self.index = 0
        self.count = 0
        self.pieces: list[tuple[str, bool]] = []
        self.result: dict[str, Any] | None = None
        self.task = None
        self._dirty = True

        self.file_box = path_combo("previewFileBox", 140, 12)
        self.prev_btn = QPushButton("◀ Previous")
        self.next_btn = QPushButton("Next ▶")
        self.position = QLabel("")
        self.position.setProperty("role", "muted")
        legend = QLabel(f"<span style='background-color:{LOSS_BG[1]}; color:{LOSS_FG}'>&nbsp;carries loss&nbsp;</span>"
                        f"&nbsp;&nbsp;<span style='background-color:{PLAIN_BG[1]}; color:{PLAIN_FG}'>&nbsp;prompt / "
                        "template: no loss&nbsp;</span>")
        legend.setToolTip("Each coloured box is one token; ↵ is a line break inside the rendered text")
        bar = QHBoxLayout()  # two short rows rather than one long one: the preview fits a narrow window
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(QLabel("File"))
        bar.addWidget(self.file_box, 1)
        bar.addWidget(self.prev_btn)
        bar.addWidget(self.next_btn)
        bar2 = QHBoxLayout()
        bar2.setContentsMargins(0, 0, 0, 0)
        bar2.addWidget(self.position)
        bar2.addStretch(1)
        bar2.addWidget(legend)
        self.status = QLabel("")
        self.status.setObjectName("previewStatus")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.view = QTextBrowser()
        self.view.setObjectName("previewView")
        self.view.setOpenLinks(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addLayout(bar2)
        layout.addWidget(self.status)
        layout.addWidget(self.view, 1)

        self.prev_btn.clicked.connect(lambda _=False: self.step(-1))
        self.next_btn.clicked.connect(lambda _=False: self.step(1))
        self.file_box.currentIndexChanged.connect(self._on_file)
        self._show_message("Choose a base model and add a data file: one record appears here, rendered through the "
                           "base model's chat template, with the tokens that carry loss in green.")
        self._update_buttons()

    # --- inputs ---
    def set_source(self, source: Any, files: list[str], loss_on: str = "assistant") -> None:
        """Base model (path, or a tokenizer object), data files and the loss_on option; refreshes if shown."""
        changed = (source is not self.source and source != self.source) or files != self.files \
            or loss_on != self.loss_on
        if not changed:
            return
        if files != self.files:
            current = self.file_box.currentData()
            self.file_box.blockSignals(True)
            self.file_box.clear()
            for f in files:
                self.file_box.addItem(Path(f).name, f)
                self.file_box.setItemData(self.file_box.count() - 1, f, Qt.ItemDataRole.ToolTipRole)
            i = self.file_box.findData(current) if current else -1
            self.file_box.setCurrentIndex(i if i >= 0 else 0)
            self.file_box.blockSignals(False)
            if i < 0:
                self.index = 0
        self.source, self.files, self.loss_on = source, list(files), loss_on
        self._dirty = True
        if self.isVisible():
            self.refresh()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._dirty:
            self.refresh()

    def _on_file(self, _i: int) -> None:
        self.index = 0
        self.refresh()

    def step(self, delta: int) -> None:
        if self.count:
            self.index = max(0, min(self.count - 1, self.index + delta))
            self.refresh()

    # --- rendering ---
    def refresh(self) -> bool:
        """Render the current record in the background; False when there is nothing to render yet."""
        self._dirty = False
        path = self.file_box.currentData()
        if not path:
            self._show_message("Add a data file to preview its records.")
            return False
        if not self.source:
            self._show_message("Choose a base model: the preview renders the record through its chat template.")
            return False
        if not Path(path).is_file():
            self._show_error(f"{path} does not exist")
            return False
        self.status.setText("Rendering… (loading the tokenizer the first time)")
        self.task = self.runner.start("record-preview", lambda c=self.cache, s=self.source, p=path, i=self.index,
                                      lo=self.loss_on: preview_job(c, s, p, i, lo))
        self.task.produced.connect(self._on_result)
        self.task.failed.connect(lambda message, _details: self._show_error(message))
        return True

    @property
    def busy(self) -> bool:
        return self.task is not None and self.task.running

    def _on_result(self, result: dict[str, Any]) -> None:
        self.result = result
        self.index, self.count = result["index"], result["count"]
        self.pieces = list(result["pieces"])
        self.position.setText(f"record {self.index + 1} of {self.count} (line {result['line']})")
        self._update_buttons()
        notes = [html.escape(n) for n in result.get("notes", [])]
        lines = []
        if result["error"]:
            lines.append(f"<span style='color:{theme.ERROR}'>✖ This record cannot be used: "
                         f"{html.escape(result['error'])}</span>")
        elif not any(loss for _, loss in self.pieces):
            lines.append(f"<span style='color:{theme.ERROR}'>⚠ No token of this record carries loss: training would "
                         f"learn nothing from it (loss on: {html.escape(self.loss_on)}). Check that it has an "
                         "assistant reply, and the 'Loss on' option.</span>")
        else:
            n_loss = sum(1 for _, loss in self.pieces if loss)
            lines.append(f"{len(self.pieces)} tokens, {n_loss} carry loss ({n_loss / len(self.pieces):.0%}) · "
                         f"loss on: {html.escape(self.loss_on)}")
        if result.get("summary"):
            lines.append(f"<span style='color:{theme.MUTED}'>{html.escape(result['summary'])}</span>")
        if result.get("problems"):
            first = html.escape(result["problems"][0])
            more = f" (and {len(result['problems']) - 1} more)" if len(result["problems"]) > 1 else ""
            lines.append(f"<span style='color:{theme.WARN}'>⚠ {first}{more}</span>")
        lines += [f"<span style='color:{theme.MUTED}'>{n}</span>" for n in notes]
        self.status.setText("<br>".join(lines))
        body = pieces_html(self.pieces) if self.pieces else ""
        if result.get("rejected"):
            body += (f"<p style='color:{theme.MUTED}'><b>Rejected answer</b> (DPO compares it with the chosen one "
                     f"above):<br>{html.escape(result['rejected']).replace(chr(10), '<br>')}</p>")
        self.view.setHtml(body)

    def _show_message(self, text: str) -> None:
        self.pieces = []
        self.status.setText(f"<span style='color:{theme.MUTED}'>{html.escape(text)}</span>")
        self.view.clear()
        self.position.setText("")

    def _show_error(self, message: str) -> None:
        self.pieces = []
        self.result = None
        self.status.setText(f"<span style='color:{theme.ERROR}'>✖ {html.escape(message)}</span>")
        self.view.clear()

    def _update_buttons(self) -> None:
        self.prev_btn.setEnabled(self.index > 0)
        self.next_btn.setEnabled(self.index + 1 < self.count)

    def loss_text(self) -> str:
        """The text of the loss-bearing tokens, joined (tests)."""
        return "".join(text for text, loss in self.pieces if loss)
