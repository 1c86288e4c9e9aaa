"""The Get-a-model view against the real engine and the tests' local Hub server (the `hub_server` fixture): search ->
details (every fit verdict shown, a gated repository marked) -> download with progress -> listed in the Library at
once, opens in Chat with a streamed reply and becomes the LoRA base on the Train tab; cancel then resume (only the
missing bytes fetched); a gated repository's sentence with the window still usable; network features off: the view
says so and the server sees no request."""

from __future__ import annotations

import json

import pytest

from desktop_app.ui.widgets.get_model_view import GetModelView

REPO, GGUF_REPO, GATED = "tiny-org/tiny-chat", "tiny-org/tiny-chat-GGUF", "tiny-org/gated"
INSTRUCT = "tiny-org/tiny-chat-instruct"  # tiny-chat with a chat template of its own, as a Hub chat model has
SAFETENSORS = "Safetensors (full precision)"
WAIT = 120_000  # ms: two cores shared by several test sessions
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def add_instruct_repo(hub_server) -> None:
    """Serve INSTRUCT: tiny-chat's files with a ChatML template (the app's own default template in a tokenizer is
    no sign that a model chats, so tiny-chat itself opens in Text completion)."""
    files = dict(hub_server.repos[REPO].files)
    config = json.loads(files["tokenizer_config.json"])
    config["chat_template"] = CHATML
    files["tokenizer_config.json"] = json.dumps(config).encode()
    files["chat_template.jinja"] = CHATML.encode()  # where transformers saves the template now (read first)
    base = hub_server.repos[REPO]
    hub_server.add_repo(INSTRUCT, files, downloads=base.downloads, tags=base.tags, parameters=base.parameters)


def hub_busy(window) -> list[str]:
    return [k for k in window.ctx.runner.running_kinds() if k.startswith("hub-")]


@pytest.fixture
def view(window, hub_server, qtbot):
    """The view opened from the Library's "Get a model…" button (its first search done); every download it started
    is over when the test ends."""
    window.tabs.setCurrentWidget(window.library_tab)
    window.library_tab.get_model_btn.click()
    found = window.findChild(GetModelView)
    assert found is not None and found.isVisible()
    qtbot.waitUntil(lambda: not hub_busy(window), timeout=WAIT)
    yield found
    found.downloads.queue.clear()  # a failed test may leave work behind: end it without running the event loop
    for kind in hub_busy(window):  # (pytest-qt has closed the window by now; the event loop would delete it)
        task = window.ctx.runner.task(kind)
        task.cancel()
        task.wait()


def search(view, qtbot, text: str) -> None:
    assert view.search(text)
    qtbot.waitUntil(lambda: not view.ctx.runner.is_running("hub-search"), timeout=WAIT)
    assert "Searching" not in view.results_status.text(), view.results_status.text()


def open_repo(view, qtbot, repo: str) -> None:
    """Choose `repo` in the results; wait for its details and every file set's verdicts."""
    row = view.result_row(repo)
    assert row >= 0, [m.repo_id for m in view.results]
    view.results_table.selectRow(row)
    qtbot.waitUntil(lambda: view.details is not None and view.details.repo_id == repo
                    and len(view.fits) == len(view.details.file_sets), timeout=WAIT)


def download(view, qtbot, label: str):
    """Download the file set `label` of the repository shown; (its row, the events its task relayed)."""
    assert view.choose_set(label)
    row = view.download()
    assert row is not None
    events: list = []
    view.downloads.task.produced.connect(events.append)  # connected before the event loop runs: nothing missed
    return row, events


def test_search_details_download_then_chat_and_lora_base(window, view, hub_server, qtbot):
    from desktop_app.engine.hub.download import DownloadFinished, DownloadProgress

    assert view.results, "opening the view searches the Hub at once"
    add_instruct_repo(hub_server)
    search(view, qtbot, "tiny")
    table = view.results_table
    assert [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())] == [
        "Model", "Parameters", "Downloads", "Updated", "Gated"]
    assert table.item(view.result_row(GATED), 4).text() == "gated"
    assert table.item(view.result_row(REPO), 4).text() == ""
    open_repo(view, qtbot, INSTRUCT)
    assert view.details.has_chat_template and "Chat template</td><td colspan='3'>yes<" in view.facts.text()
    labels = [view.sets_table.item(r, 0).text() for r in range(view.sets_table.rowCount())]
    assert SAFETENSORS in labels
    assert all(view.sets_table.item(r, 2).text().endswith(("MB", "kB", "GB")) for r in range(len(labels)))
    view.choose_set(SAFETENSORS)
    rows = view.fit_rows()
    assert [use for use, _mark, _reason in rows] == ["chat", "lora", "qlora", "full"]  # every use, none hidden
    verdicts = {v.use: v for v in view.fits[SAFETENSORS]}
    for use, mark, reason in rows:
        assert reason == verdicts[use].reason and reason  # the engine's sentence, as is
        assert ("fits" in mark) == verdicts[use].fits
    assert verdicts["chat"].fits and verdicts["lora"].fits  # a few MB: this machine chats with it and LoRA-tunes it

    row, events = download(view, qtbot, SAFETENSORS)
    qtbot.waitUntil(lambda: row.state in ("done", "failed"), timeout=WAIT)
    assert row.state == "done", row.message
    assert any(isinstance(e, DownloadProgress) for e in events)
    finished = next(e for e in events if isinstance(e, DownloadFinished))
    assert row.folder == finished.folder and finished.verified and row.bar.value() == 1000
    assert "downloaded" in row.status.text() and row.chat_btn.isVisibleTo(row) and row.finetune_btn.isVisibleTo(row)
    assert not window.ctx.errors, window.ctx.errors

    # listed in the Library at once, with no refresh pressed
    library = window.library_tab
    assert row.folder in library.items("hub")
    assert library.select(row.folder) and library.generate_btn.isEnabled()
    assert INSTRUCT in library.details.toPlainText()

    # "Chat with it": the Generate tab, with the model chosen, in Chat, and a short streamed reply
    row.chat_btn.click()
    gen = window.generate_tab
    assert not view.isVisible() and window.tabs.currentWidget() is gen
    assert gen.source_box.currentData() == row.folder and gen.chat_mode()
    gen.form.set_spec(gen.form.spec().replace(max_new_tokens=4, temperature=0.0))
    assert gen.generate("hello")
    qtbot.waitUntil(lambda: not gen.running, timeout=WAIT)
    assert not window.ctx.errors, window.ctx.errors
    assert gen.stats and gen.stats[-1].token_ids and gen.history[-2][0] == "user"
    assert gen.chat_view.last("assistant").model == (row.folder, INSTRUCT)  # named by its repository, not a commit

    # "Fine-tune it": the LoRA base on the Train tab (listed in its base picker too)
    train = window.train_tab
    train.setup.set_method("lora")
    window.library_tab.get_model_btn.click()
    assert view.isVisible()
    row.finetune_btn.click()
    panel = train.setup.method_panel
    assert window.tabs.currentWidget() is train and train.setup.current_method().key == "lora"
    assert panel.base_model() == row.folder and panel.config_fields()["adapter"]["kind"] == "lora"
    assert panel.base_picker.box.findData(row.folder) >= 0
    assert not [p for p in panel.problems() if "base model" in p]


def test_cancel_then_resume_fetches_only_what_is_missing(window, view, hub_server, qtbot):
    from desktop_app.engine.hub.download import DownloadCancelled, DownloadFinished, DownloadProgress

    search(view, qtbot, "tiny")
    open_repo(view, qtbot, REPO)
    hub_server.slow(400_000)  # bytes a second: a few MB take seconds, time to press Cancel
    row, events = download(view, qtbot, SAFETENSORS)
    # well into the weights (the configs and tokenizer files come first: a few kB)
    qtbot.waitUntil(lambda: any(isinstance(e, DownloadProgress) and e.done > 300_000 for e in events), timeout=WAIT)
    assert " of " in row.status.text() and "/s" in row.status.text()  # bytes, speed in words
    row.cancel_btn.click()
    qtbot.waitUntil(lambda: row.state == "cancelled", timeout=WAIT)
    cancelled = next(e for e in events if isinstance(e, DownloadCancelled))
    assert 300_000 < cancelled.done < cancelled.total
    assert "Resume continues" in row.status.text() and row.resume_btn.isVisibleTo(row)
    assert not row.cancel_btn.isVisibleTo(row)
    assert not window.ctx.errors

    hub_server.slow(0)
    # the cancelled pull's thread winds down after its last event (a Resume pressed before that waits its turn)
    qtbot.waitUntil(lambda: view.downloads.task is None, timeout=WAIT)
    before = len(hub_server.settled())
    row.resume_btn.click()
    events = []
    view.downloads.task.produced.connect(events.append)
    qtbot.waitUntil(lambda: row.state in ("done", "failed"), timeout=WAIT)
    assert row.state == "done", row.message
    finished = next(e for e in events if isinstance(e, DownloadFinished))
    assert finished.fetched <= cancelled.total - cancelled.done + 1024 * 1024  # the missing bytes and a chunk
    resumed = [r for r in hub_server.requests[before:] if r.method == "GET" and "/resolve/" in r.path]
    assert any(r.range for r in resumed), resumed  # the rest of the partly fetched file: an HTTP Range


def test_a_gated_repository_says_what_to_do_and_nothing_else_is_lost(window, view, hub_server, qtbot):
    search(view, qtbot, "tiny")
    open_repo(view, qtbot, GATED)
    assert "yes: accept its licence" in view.facts.text()
    first = view.details.file_sets[0].label
    row, _events = download(view, qtbot, first)
    qtbot.waitUntil(lambda: row.state in ("done", "failed"), timeout=WAIT)
    assert row.state == "failed"
    message = window.ctx.errors[-1][0]
    assert message == row.message and "gated" in message and "hf auth login" in message
    assert f"https://huggingface.co/{GATED}" in message
    assert f"href='https://huggingface.co/{GATED}'" in row.status.text()  # the licence page, a link
    assert window.ctx.errors[-1][1] == ""  # a person's error: the sentence, no traceback
    assert row.resume_btn.isVisibleTo(row) and row.resume_btn.text() == "Try again"
    # the window goes on: the results, another repository's details, a download of it
    assert view.results and view.search_btn.isEnabled()
    open_repo(view, qtbot, REPO)
    other, _events = download(view, qtbot, SAFETENSORS)
    qtbot.waitUntil(lambda: other.state in ("done", "failed"), timeout=WAIT)
    assert other.state == "done" and row.state == "failed" and len(view.downloads.rows) == 2


def test_network_off_the_view_says_so_and_sends_nothing(window, hub_server, qtbot):
    from desktop_app.engine.hub import network

    network.set_network_allowed(False)
    window.tabs.setCurrentWidget(window.library_tab)
    window.library_tab.get_model_btn.click()
    view = window.findChild(GetModelView)
    qtbot.waitExposed(view)
    assert view.network_note.isVisible() and "network features are off" in view.network_note.text().lower()
    assert not view.network_check.isChecked() and not view.search_btn.isEnabled()
    assert not view.search("tiny") and not view.show_repo(REPO) and view.download() is None
    assert not hub_busy(window) and hub_server.requests == []

    view.network_check.setChecked(True)  # the person turns network features on: the view searches at once
    assert network.network_allowed() and not view.network_note.isVisible()
    qtbot.waitUntil(lambda: not hub_busy(window), timeout=WAIT)
    assert view.results and hub_server.requests
    view.network_check.setChecked(False)
    assert not network.network_allowed() and view.network_note.isVisible() and not view.download_btn.isEnabled()


def test_downloads_wait_their_turn(window, view, hub_server, qtbot):
    search(view, qtbot, "tiny")
    open_repo(view, qtbot, GGUF_REPO)
    ggufs = [fs.label for fs in view.details.file_sets if fs.kind == "gguf"]
    assert len(ggufs) >= 2
    hub_server.slow(400_000)
    first, _ = download(view, qtbot, ggufs[0])
    assert view.choose_set(ggufs[1])
    second = view.download()
    assert second is not first and second.state == "queued" and first.state == "downloading"
    assert "waiting" in second.status.text() and second.cancel_btn.isVisibleTo(second)
    hub_server.slow(0)
    qtbot.waitUntil(lambda: first.state == "done" and second.state == "done", timeout=WAIT)
    assert first.folder.endswith(".gguf") and second.folder.endswith(".gguf") and first.folder != second.folder
    assert {first.folder, second.folder} <= set(window.library_tab.items("hub"))
    gen = window.generate_tab
    assert gen.source_box.findData(first.folder) >= 0 and gen.source_box.findData(second.folder) >= 0


def test_a_lost_connection_says_so_and_resume_finishes_the_file(window, view, hub_server, qtbot):
    search(view, qtbot, "tiny")
    open_repo(view, qtbot, REPO)
    hub_server.drop_after(600_000)  # the weights are cut mid-file...
    hub_server.drop_after(0, times=5)  # ...and huggingface_hub's own five tries to resume are refused
    row, _events = download(view, qtbot, SAFETENSORS)
    qtbot.waitUntil(lambda: row.state in ("done", "failed"), timeout=WAIT)
    assert row.state == "failed"
    assert "connection to the Hub was lost" in row.message and "pull again to resume" in row.message
    assert window.ctx.errors[-1] == (row.message, "")
    assert row.resume_btn.text() == "Resume" and row.resume_btn.isVisibleTo(row)
    assert hub_server.drops == []  # the connection is back
    before = len(hub_server.settled())
    row.resume_btn.click()
    qtbot.waitUntil(lambda: row.state in ("done", "failed"), timeout=WAIT)
    assert row.state == "done", row.message
    weights = [r for r in hub_server.requests[before:] if r.method == "GET" and r.path.endswith("model.safetensors")]
    assert weights and all(r.range for r in weights)  # the rest of the file, never a restart from zero
    assert row.folder in window.library_tab.items("hub") and len(view.downloads.rows) == 1


def test_a_full_disk_says_how_much_is_missing_and_fetches_nothing(window, view, hub_server, qtbot, monkeypatch):
    import shutil
    from collections import namedtuple

    search(view, qtbot, "tiny")
    open_repo(view, qtbot, REPO)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage(10**9, 10**9 - 1000, 1000))
    row, _events = download(view, qtbot, SAFETENSORS)
    qtbot.waitUntil(lambda: row.state in ("done", "failed"), timeout=WAIT)
    assert row.state == "failed" and "free space or choose a smaller file" in row.message
    assert hub_server.fetched("model.safetensors") == 0 and window.ctx.errors[-1][0] == row.message
    assert view.download_btn.isEnabled() and view.sets_table.rowCount() == 1  # nothing else lost: choose again


def test_every_base_picker_opens_the_same_view(window, qtbot):
    from desktop_app.engine.hub import network

    network.set_network_allowed(False)  # opening it must send nothing: there is no server in this test
    picker = window.train_tab.setup.method_panel.base_picker
    window.train_tab.setup.set_method("lora")
    assert picker.get_model_btn.isVisibleTo(window.train_tab)
    picker.get_model_btn.click()
    view = window.findChild(GetModelView)
    assert view is not None and view.isVisible() and view.network_note.isVisible()
    view.hide()
    window.library_tab.get_model_btn.click()
    assert window.findChildren(GetModelView) == [view] and view.isVisible()


def test_nothing_touches_the_network_before_the_view_is_opened(window, hub_server, qtbot):
    window.ctx.workspace_items_changed.emit()  # the Library, the model lists and the base pickers list the cache
    for index in range(window.tabs.count()):
        window.tabs.setCurrentIndex(index)
    assert window.findChild(GetModelView) is None and hub_server.requests == []


def test_a_model_downloaded_in_an_earlier_session_is_not_offered_for_download_again(window, view, hub_server, qtbot,
                                                                                     capsys):
    """Issue 51 item 8: what the cache holds (pulled by the CLI, or before a restart) says Downloaded; the other
    file sets of the repository can still be downloaded."""
    from desktop_app.cli import main

    assert main(["models", "pull", REPO]) == 0, capsys.readouterr().err
    capsys.readouterr()
    search(view, qtbot, "tiny")
    open_repo(view, qtbot, REPO)
    assert view.choose_set(SAFETENSORS)
    assert not view.download_btn.isEnabled() and view.download_btn.text() == "Downloaded"
    assert "in the Hugging Face cache" in view.download_note.text()
    search(view, qtbot, "GGUF")
    open_repo(view, qtbot, GGUF_REPO)
    labels = [view.sets_table.item(r, 0).text() for r in range(view.sets_table.rowCount())]
    assert view.choose_set(labels[0])
    assert view.download_btn.isEnabled() and view.download_btn.text().startswith("Download ")  # not in the cache
