"""Train tab, issue 36 item 4: settings that cannot work are said before Start (engine preflight), in the findings
box and in the colour of their setting's label; an error blocks Start with the reason, a warning does not; the
method's defaults follow a change of method. Issue 51 item 6: findings that come and go never move a field."""

from __future__ import annotations

from pathlib import Path

from ui_helpers import TINY, write_corpus

from desktop_app.engine.presets import preset
from desktop_app.engine.specs import DataSpec
from desktop_app.engine.train.memory_plan import Machine

GIB = 1 << 30
LAPTOP = Machine(ram_free=21 * GIB, ram_total=24 * GIB)  # a machine without a GPU, 21 GiB free


def _found(tab) -> str:
    """What the findings box says ("" when nothing was found)."""
    box = tab.setup.findings_box
    assert box.isVisibleTo(tab)
    return box.text()


def _marked(form, name: str) -> str:
    """The finding level shown on a setting's label ("" none, "warning", "error"), its tooltip saying why."""
    level = form.labels[name].property("finding") or ""
    assert not level or ("⚠" if level == "warning" else "✗") in form.labels[name].toolTip()
    return level


def _two_document_dataset(workspace) -> Path:
    """A dataset prepared in the workspace from 2 documents with 5% held out: its validation split is empty."""
    from desktop_app.engine.data.prepare import prepare_dataset

    corpus = write_corpus(workspace.root / "corpus")
    paragraphs = corpus.read_text(encoding="utf-8").split("\n\n")
    corpus.write_text(" ".join(paragraphs[:40]) + "\n\n" + " ".join(paragraphs[40:]), encoding="utf-8")
    out = workspace.folder("datasets") / "two-docs"
    events = list(prepare_dataset([corpus], out, DataSpec(vocab_size=320, context_length=32, overlap=0,
                                                          val_fraction=0.05)))
    assert events[-1].reason == "completed", events[-1]
    return out


def test_warm_up_longer_than_the_run_is_shown_under_it_and_follows_the_setting(window):
    tab = window.train_tab
    form = tab.setup.form
    assert not _marked(form, "warmup_steps") and "Warm-up" not in _found(tab)
    form.set_values({"steps": 10, "warmup_steps": 20})
    assert "⚠ Warm-up of 20 steps" in _found(tab) and "(10 steps)" in _found(tab)  # a warning, not an error
    assert _marked(form, "warmup_steps") == "warning" and "Warm-up of 20" in form.labels["warmup_steps"].toolTip()
    form.set_value("warmup_steps", 1)  # updated as the setting changes
    assert not _marked(form, "warmup_steps") and "Warm-up" not in _found(tab)


def test_memory_far_beyond_this_machine_is_an_error_next_to_the_batch(window):
    tab = window.train_tab
    tab.setup.set_machine(LAPTOP)
    window.model_tab.set_spec(preset("llama-1b"))
    assert _marked(tab.setup.form, "batch_size") == "error"
    found = _found(tab)
    assert "✗ " in found and "126 GiB" in found and "21 GiB free" in found and "gradient checkpointing" in found
    window.model_tab.set_spec(TINY)
    assert not _marked(tab.setup.form, "batch_size") and "126 GiB" not in _found(tab)


def test_an_error_blocks_start_with_the_reason_and_nothing_starts(window, workspace):
    tab = window.train_tab
    tab.setup.set_machine(LAPTOP)
    window.model_tab.set_spec(preset("llama-1b"))
    assert not tab.start()
    message = window.ctx.errors[-1][0]
    assert message.startswith("This run cannot work on this machine:") and "126 GiB" in message
    assert "21 GiB free" in message
    assert not tab.running and tab.run_dir is None and tab.start_btn.isEnabled()
    assert not window.ctx.runner.is_running("train")
    assert list(workspace.folder("runs").iterdir()) == []  # no run folder, no sample corpus prepared
    assert list(workspace.folder("datasets").iterdir()) == []


def test_empty_validation_set_is_shown_before_start(window, workspace):
    tab = window.train_tab
    dataset = _two_document_dataset(workspace)
    window.model_tab.set_spec(TINY)
    tab.select_dataset(str(dataset))
    assert "No validation curve" in _found(tab) and "5% of its 2 documents" in _found(tab)
    tab.setup.form.set_value("eval_every", 0)  # no evaluations: nothing missing
    assert "No validation curve" not in _found(tab)


def test_too_few_records_to_hold_out_shows_under_the_option(window, tmp_path):
    tab = window.train_tab
    tab.setup.set_method("sft")
    data = tmp_path / "two.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
                    * 2, encoding="utf-8")
    tab.setup.method_panel.data_list.set_files([str(data)])
    options = tab.setup.method_panel.option_forms["sft"]
    options.set_value("val_fraction", 0.05)
    assert "5% of about 2 records" in _found(tab) and "26%" in _found(tab)
    assert _marked(options, "val_fraction") == "warning"  # its label, once the advanced rows show
    options.set_value("val_fraction", 0.3)
    assert not _marked(options, "val_fraction") and "records" not in _found(tab)


def test_switching_pretraining_to_lora_takes_loras_learning_rate_and_steps(window):
    tab = window.train_tab
    tab.use_quickstart_settings()  # the first launch's pretraining run: lr 0.002, 300 steps
    assert tab.setup.form.spec().lr == 2e-3 and tab.setup.form.spec().steps == 300
    tab.setup.set_method("lora")
    spec = tab.setup.form.spec()
    assert spec.lr == 2e-4 and spec.steps == 200  # LoRA's own, not the pretraining run's
    assert not _marked(tab.setup.form, "lr")
    tab.setup.form.set_values({"lr": 2e-3, "steps": 50})  # the person's own: kept, and warned about
    assert _marked(tab.setup.form, "lr") and "10× what LoRA usually starts from (0.0002)" in _found(tab)
    tab.setup.set_method("qlora")
    assert tab.setup.form.spec().lr == 2e-3 and tab.setup.form.spec().steps == 50
    tab.setup.set_method("pretraining")


def test_a_warning_does_not_block_start_and_reaches_the_runs_log(window, populated_workspace, qtbot):
    tab = window.train_tab
    tab.setup.select_dataset(str(populated_workspace.folder("datasets") / "tiny-data"))
    window.model_tab.set_spec(TINY)
    tab.setup.form.set_spec(tab.setup.form.spec().replace(steps=3, warmup_steps=5, batch_size=4, eval_every=0,
                                                          save_every=0, sample_tokens=0))
    assert _marked(tab.setup.form, "warmup_steps") == "warning"
    assert tab.start()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert tab.run_view.last_finished.reason == "completed"
    assert "before the start: Warm-up of 5 steps" in tab.run_view.log_view.toPlainText()
    assert not window.ctx.errors, window.ctx.errors


def test_findings_that_come_and_go_while_typing_never_move_a_field(window):
    """Issue 51 item 6: typing Training steps 1, 10, 100 with a warm-up of 20 brings a warning and takes it away;
    the fields stay where they were (an input meant for one field never lands in the next)."""
    tab = window.train_tab
    window.resize(1366, 768)
    form = tab.setup.form
    form.set_values({"steps": 300, "warmup_steps": 20})
    window.grab()
    places = {name: editor.mapTo(window, editor.rect().topLeft()) for name, editor in form.editors.items()}
    heights = {}
    for steps in (1, 10, 100, 5, 300):
        form.set_value("steps", steps)
        window.grab()  # lay the window out as it would be painted
        assert {n: e.mapTo(window, e.rect().topLeft()) for n, e in form.editors.items()} == places, steps
        heights[steps] = tab.setup.findings_box.height()
        assert ("Warm-up of 20" in tab.setup.findings_box.text()) == (steps < 20), steps
    assert len(set(heights.values())) == 1 and "Warm-up" not in tab.setup.findings_box.text()
