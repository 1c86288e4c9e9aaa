"""Generate tab chat: a system prompt, every turn sends the whole conversation (with the replies the model
gave, a stopped one as shown), "New chat" forgets it, and an outgrown context drops the oldest turns."""

from __future__ import annotations

import shutil
import threading

import pytest

SYSTEM = "You are terse."


@pytest.fixture
def chat_tab(window, chat_model, monkeypatch):
    """The Generate tab on the chat model in chat mode, with every conversation the engine renders recorded."""
    from desktop_app.engine.generate import prompts

    model = shutil.copytree(chat_model, window.ctx.workspace.folder("models") / "chatty")
    window.ctx.workspace_items_changed.emit()
    gen = window.generate_tab
    gen.select_source(str(model))
    assert gen.source_box.currentData() == str(model)
    gen.rendered = []  # (messages, ids) of each rendering, in order; the last one per turn is what was sent
    lock = threading.Lock()
    real = prompts.encode_messages

    def spy(tokenizer, messages):
        ids = real(tokenizer, messages)
        with lock:  # called in the worker thread
            gen.rendered.append(([dict(m) for m in messages], ids))
        return ids

    monkeypatch.setattr(prompts, "encode_messages", spy)
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=6, temperature=0.0, chat=True))
    return gen


def _turn(gen, qtbot, text: str) -> str:
    assert gen.generate(text)
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert not gen.ctx.errors, gen.ctx.errors
    assert gen.history[-2:] == [("user", text), ("assistant", gen.stats[-1].text)]
    return gen.stats[-1].text


def _reference_ids(model_dir, messages) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def test_two_turns_send_the_whole_conversation_then_new_chat_forgets_it(chat_tab, chat_model, qtbot):
    gen = chat_tab
    assert gen.system_prompt.isVisibleTo(gen) and gen.clear_btn.text() == "New chat"
    gen.system_prompt.setPlainText(SYSTEM)
    first = _turn(gen, qtbot, "hello")
    assert first, "the tiny model should answer something"  # seeded and greedy: always the same
    _turn(gen, qtbot, "and then?")
    messages, ids = gen.rendered[-1]
    expected = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"},
                {"role": "assistant", "content": first}, {"role": "user", "content": "and then?"}]
    assert messages == expected
    assert ids == _reference_ids(chat_model, expected)  # the model's own template over the whole conversation
    shown = gen.output_text(0)
    assert shown.startswith(f"System: {SYSTEM}\n\nYou: hello\n\nModel: {first}\n\nYou: and then?\n\nModel: ")

    gen.clear_btn.click()  # "New chat"
    assert gen.history == [] and gen.output_text(0) == ""
    _turn(gen, qtbot, "hello")
    assert gen.rendered[-1][0] == expected[:2]  # the system prompt, and only the new turn

    gen.form.set_spec(gen.form.spec().replace(chat=False))
    assert not gen.system_prompt.isVisibleTo(gen) and gen.clear_btn.text() == "Clear"


def test_a_stopped_reply_is_kept_as_shown(chat_tab, qtbot, monkeypatch):
    from desktop_app.engine.events import TextDelta
    from desktop_app.ui.tabs import generate_tab

    real_job = generate_tab.generate_job

    def press_stop_after_three_pieces(cache, paths, prompt, spec, controls):
        # What Stop does (Task.stop sets controls.stop), at a known point: decoding a tiny model outruns a click.
        pieces = 0
        for item in real_job(cache, paths, prompt, spec, controls):
            yield item
            pieces += isinstance(item[-1], TextDelta)
            if pieces == 3:
                controls.stop.set()

    monkeypatch.setattr(generate_tab, "generate_job", press_stop_after_three_pieces)
    gen = chat_tab
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=100, temperature=1.0, top_k=20, seed=5))
    _turn(gen, qtbot, "hello")
    assert gen.stats[-1].finish_reason == "cancelled"
    reply = gen.history[-1][1]
    assert reply and gen.output_text(0).endswith("Model: " + reply.replace("\r", "\n"))  # Qt shows \r as \n
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=4))
    _turn(gen, qtbot, "more")
    assert gen.rendered[-1][0] == [{"role": "user", "content": "hello"}, {"role": "assistant", "content": reply},
                                   {"role": "user", "content": "more"}]


def test_an_outgrown_context_drops_the_oldest_turns_and_says_so(chat_tab, qtbot):
    gen = chat_tab
    gen.system_prompt.setPlainText(SYSTEM)
    gen.history[:] = [turn for i in range(4) for turn in
                      (("user", f"question {i}: where does the cat sit?"), ("assistant", f"answer {i}: on the mat."))]
    _turn(gen, qtbot, "and the dog?")
    sent = gen.rendered[-1][0]
    assert sent[0] == {"role": "system", "content": SYSTEM} and sent[-1] == {"role": "user", "content": "and the dog?"}
    assert {"role": "user", "content": "question 0: where does the cat sit?"} not in sent  # the oldest went first
    assert len(sent) < 2 + 8 and sent[1]["role"] == "user"  # whole turns dropped: a question opens
    assert "did not see them" in gen.stats_label.text() and "tokens/s" in gen.stats_label.text()
    assert len(gen.history) == 10  # the transcript keeps every turn


def test_a_failed_turn_leaves_no_dangling_message(chat_tab, qtbot):
    gen = chat_tab
    gen.system_prompt.setPlainText("the cat sat on the mat " * 20)  # more than the model's context can hold
    assert gen.generate("hello")
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    message, details = gen.ctx.errors[-1]
    assert "does not fit the model's context" in message and details == ""  # a UserError: one clear line
    assert gen.history == []  # a retry will not send two user messages in a row
    assert gen.output_text(0).endswith("(no reply: the generation failed)")
    gen.ctx.errors.clear()
    gen.system_prompt.setPlainText(SYSTEM)
    _turn(gen, qtbot, "hello")
    assert gen.rendered[-1][0] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]


def test_bubbles_regenerate_edit_and_copy(chat_tab, qtbot):
    from PySide6.QtWidgets import QApplication

    gen = chat_tab
    view = gen.chat_view
    gen.new_seed_check.setChecked(False)  # the seeds given below, not drawn: the same replies in every run
    gen.form.set_spec(gen.form.spec().replace(temperature=1.0, top_k=50, seed=0))
    gen.prompt.setPlainText("hello")
    gen.generate_btn.click()  # what Send does: the box's text, then the box is empty for the next message
    assert gen.prompt.toPlainText() == ""
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    first = gen.history[-1][1]
    assert [b.role for b in view.bubbles] == ["user", "assistant"] and view.bubbles[1].text() == first
    note = view.bubbles[1].note.text()
    assert "tokens/s" in note and "eos" not in note and "length" not in note  # how it ended, in words
    assert view.bubbles[1].regen_btn.isVisibleTo(view.bubbles[1]) and view.bubbles[0].edit_btn.isVisibleTo(
        view.bubbles[0])
    view.bubbles[1].copy_btn.click()
    assert QApplication.clipboard().text() == first
    # Regenerate: the same question again, a new reply in place of the old one
    gen.form.set_spec(gen.form.spec().replace(seed=1))
    view.bubbles[1].regen_btn.click()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert len(gen.history) == 2 and gen.history[0] == ("user", "hello") and len(view.bubbles) == 2
    assert gen.rendered[-1][0] == [{"role": "user", "content": "hello"}]
    _turn(gen, qtbot, "and then?")
    assert len(view.bubbles) == 4
    # Edit the first message: it comes back to the box, it and everything after it are forgotten
    view.bubbles[0].edit_btn.click()
    assert gen.prompt.toPlainText() == "hello" and gen.history == [] and view.bubbles == []
    gen.prompt.setPlainText("hello there")
    gen.generate()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    assert gen.history[0] == ("user", "hello there") and gen.rendered[-1][0] == [{"role": "user",
                                                                                  "content": "hello there"}]


def test_chat_is_the_default_for_models_taught_to_chat(window, chat_model, tmp_path):
    from desktop_app.engine.specs import RunConfig
    from desktop_app.ui.generate_support import opens_in_chat

    own = shutil.copytree(chat_model, tmp_path / "own-template")
    (own / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert opens_in_chat(own)  # a template of its own (a Hugging Face chat model)
    assert not opens_in_chat(chat_model)  # only the template every tokenizer trained here gets
    for objective, chat in (("causal_lm", False), ("sft", True), ("dpo", True), ("selfplay", False)):
        run = tmp_path / f"run-{objective}"
        run.mkdir()
        RunConfig(objective=objective, base_model="/b" if objective != "causal_lm" else "").save(run / "run.json")
        assert opens_in_chat(run) == chat, objective
    gen = window.generate_tab
    window.tabs.setCurrentWidget(gen)
    gen.select_source(str(own))
    assert gen.chat_mode() and gen.chat_btn.isChecked() and gen.generate_btn.text() == "Send"
    gen.select_source(str(chat_model))
    assert not gen.chat_mode() and gen.complete_btn.isChecked() and gen.generate_btn.text() == "Generate"


def test_regenerate_keeps_the_replies_it_replaced_and_the_chat_goes_on_from_the_one_shown(chat_tab, qtbot):
    gen = chat_tab
    view = gen.chat_view
    gen.form.set_spec(gen.form.spec().replace(temperature=1.0, top_k=50, seed=0))
    first = _turn(gen, qtbot, "hello")
    bubble = view.bubbles[1]
    assert bubble.alternatives == [(first, bubble.note.text(), bubble.model)] and bubble.prev_btn.isHidden()
    gen.form.set_spec(gen.form.spec().replace(seed=7))
    bubble.regen_btn.click()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    second = gen.history[-1][1]
    assert len(view.bubbles) == 2 and view.bubbles[1] is bubble  # the same bubble, now with two replies
    assert [a[0] for a in bubble.alternatives] == [first, second] and bubble.count_label.text() == "2/2"
    assert not bubble.prev_btn.isHidden() and bubble.prev_btn.isEnabled() and not bubble.next_btn.isEnabled()
    bubble.prev_btn.click()  # ‹: the first reply again, and the chat goes on from it
    assert bubble.text() == first and bubble.count_label.text() == "1/2" and gen.history[-1] == ("assistant", first)
    _turn(gen, qtbot, "and then?")
    assert gen.rendered[-1][0][:2] == [{"role": "user", "content": "hello"}, {"role": "assistant", "content": first}]
    assert not bubble.next_btn.isEnabled() and not bubble.prev_btn.isEnabled()  # a chat followed it: fixed now


def test_chat_and_text_completion_keep_their_own_drafts(chat_tab, qtbot):
    gen = chat_tab
    gen.prompt.setPlainText("half a chat message")
    gen.set_chat_mode(False)
    assert gen.prompt.toPlainText() == ""  # the completion's own box
    gen.prompt.setPlainText("Once upon a time")
    assert gen.generate()
    qtbot.waitUntil(lambda: not gen.running, timeout=60000)
    gen.set_chat_mode(True)
    assert gen.prompt.toPlainText() == "half a chat message"  # not the completion's prompt in front of it
    gen.prompt.setPlainText("hello")
    _turn(gen, qtbot, gen.prompt.toPlainText())
    assert gen.rendered[-1][0] == [{"role": "user", "content": "hello"}]
    gen.set_chat_mode(False)
    assert gen.prompt.toPlainText() == "Once upon a time"
