"""Record preview: a chat record rendered through the tokenizer's template, exactly the assistant tokens (and
their end-of-turn token) highlighted; Next/Previous; loss_on; a record that cannot be used; a file that
cannot be read. A tiny word-level tokenizer is built here (no download), as in the engine's chat tests."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from desktop_app.ui.background import BackgroundRunner
from desktop_app.ui.widgets.record_preview import LOSS_BG, PLAIN_BG, RecordPreview, pieces_html

RECORDS = [
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"},
                  {"role": "assistant", "content": "hello you"}, {"role": "user", "content": "bye"},
                  {"role": "assistant", "content": "bye you"}]},
    {"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]},
]


def word_tokenizer(template: str | None = None):
    words = ["[UNK]", "<|endoftext|>", "system", "user", "assistant", "be", "brief", "hi", "there", "hello",
             "you", "bye"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.add_special_tokens(["<|endoftext|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", unk_token="[UNK]")
    tok.chat_template = template
    return tok


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def preview(qtbot):
    runner = BackgroundRunner()
    widget = RecordPreview(runner)
    qtbot.addWidget(widget)
    widget.resize(700, 300)
    yield widget
    runner.shutdown()


def _render(qtbot, widget):
    qtbot.waitUntil(lambda: not widget.busy, timeout=20000)


def test_chat_record_highlights_exactly_the_assistant_tokens(qtbot, preview, tmp_path):
    data = write_jsonl(tmp_path / "chat.jsonl", RECORDS)
    preview.show()
    preview.set_source(word_tokenizer(), [data], "assistant")  # shown: renders at once
    _render(qtbot, preview)
    pieces = preview.pieces
    text = "".join(t for t, _ in pieces)
    assert text.startswith("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi there")
    loss_runs, run = [], []
    for piece, loss in pieces:
        if loss:
            run.append(piece)
        elif run:
            loss_runs.append("".join(run))
            run = []
    if run:
        loss_runs.append("".join(run))
    # every assistant reply and the end-of-turn token after it; nothing of the system/user turns or headers
    assert [r.strip() for r in loss_runs] == ["hello you<|im_end|>", "bye you<|im_end|>"]
    assert not any(loss for piece, loss in pieces if "user" in piece or "system" in piece or "assistant" in piece)
    assert "record 1 of 2 (line 1)" in preview.position.text()
    assert "carry loss" in preview.status.text() and "ChatML" in preview.status.text()
    assert preview.view.toPlainText().replace("↵", "").replace("\n", "").startswith("<|im_start|>system")
    assert not preview.prev_btn.isEnabled() and preview.next_btn.isEnabled()

    preview.step(1)  # Next
    _render(qtbot, preview)
    assert "record 2 of 2" in preview.position.text()
    assert preview.loss_text().strip() == "hi there<|im_end|>"
    assert not preview.next_btn.isEnabled() and preview.prev_btn.isEnabled()

    preview.set_source(preview.source, [data], "all")  # the loss_on option applied
    _render(qtbot, preview)
    assert preview.pieces and all(loss for _, loss in preview.pieces)


def test_html_marks_loss_tokens_green_and_the_rest_grey():
    html = pieces_html([("<|im_start|>", False), ("user\nhi", False), ("hello", True), (" you", True)])
    assert html.count('class="loss"') == 2 and html.count('class="plain"') == 2
    assert LOSS_BG[0] in html and LOSS_BG[1] in html and PLAIN_BG[0] in html
    assert "&lt;|im_start|&gt;" in html and "user↵<br>hi" in html


def test_unusable_records_and_files_are_explained(qtbot, preview, tmp_path):
    preview.show()
    # a template that never renders the assistant's reply: the engine's reason is shown, not a blank view
    data = write_jsonl(tmp_path / "chat.jsonl", RECORDS[1:])
    template = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    preview.set_source(word_tokenizer(template), [data], "assistant")
    _render(qtbot, preview)
    assert "cannot be used" in preview.status.text() and "does not appear" in preview.status.text()
    assert preview.pieces == []
    # no loss-bearing token at all: a clear warning
    preview._on_result({"index": 0, "count": 1, "line": 1, "pieces": [("hi", False), ("there", False)],
                        "error": "", "notes": [], "summary": "", "problems": [], "rejected": ""})
    assert "No token of this record carries loss" in preview.status.text()
    # a file whose format cannot be told, and one with a bad line next to a good one
    odd = write_jsonl(tmp_path / "odd.jsonl", [{"text": "hello"}])
    preview.set_source(word_tokenizer(), [odd], "assistant")
    _render(qtbot, preview)
    assert "unknown data format" in preview.status.text()
    mixed = write_jsonl(tmp_path / "mixed.jsonl", ["{not json", RECORDS[1]])
    preview.set_source(preview.source, [mixed], "assistant")
    _render(qtbot, preview)
    assert "(line 2)" in preview.position.text() and "mixed.jsonl:1" in preview.status.text()
    preview.set_source(preview.source, [str(tmp_path / "gone.jsonl")], "assistant")
    assert "does not exist" in preview.status.text()


def test_preference_record_shows_chosen_with_loss_and_the_rejected_answer(qtbot, preview, tmp_path):
    data = write_jsonl(tmp_path / "pref.jsonl", [{"prompt": "hi there", "chosen": "hello you", "rejected": "bye"}])
    preview.show()
    preview.set_source(word_tokenizer(), [data], "assistant")
    _render(qtbot, preview)
    assert preview.loss_text().strip() == "hello you<|im_end|>"
    assert "Rejected answer" in preview.view.toPlainText() and "bye" in preview.view.toPlainText()


def test_nothing_to_preview_yet_says_what_is_missing(qtbot, preview, tmp_path):
    preview.show()
    assert not preview.refresh()
    assert "Add a data file" in preview.status.text()
    preview.set_source("", [write_jsonl(tmp_path / "c.jsonl", RECORDS)], "assistant")
    assert "Choose a base model" in preview.status.text()
