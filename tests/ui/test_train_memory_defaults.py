"""Issue 51 item 2 in the window: a base opens the Train tab with settings that fit this machine (the micro-batch
the one memory estimate allows, the method's learning rate for the model's size), the same run Get a model
estimated; the data's real lengths take over once files are chosen; a value the person typed stays theirs."""

from __future__ import annotations

import json

from memory_cases import LAPTOP, SMOLLM2_135M, chats, model_folder, word_tokenizer

from desktop_app.engine.model.sizing import spec_for_estimate
from desktop_app.engine.train.fit import training_plan


def _memory_found(tab) -> str:
    return "\n".join(f.message for f in tab.setup.findings if f.field == "batch_size")


def test_fine_tune_it_after_the_sample_run_opens_settings_that_fit(window, tmp_path):
    tab = window.train_tab
    tab.setup.set_machine(LAPTOP)
    tab.use_quickstart_settings()  # the first launch's run: pretraining at lr 0.002
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    tab.use_as_base(str(base))  # Get a model → Fine-tune it
    spec = tab.setup.form.spec()
    assert tab.setup.current_method().key == "sft" and spec.lr == 5e-5  # its own rate, not 0.002
    promised = training_plan(spec_for_estimate(SMOLLM2_135M), "full", LAPTOP)
    assert spec.micro_batch_size == promised.micro_batch < spec.batch_size  # what Get a model estimated
    assert _memory_found(tab) == ""  # it fits, as promised
    tab.setup.set_method("lora")
    assert tab.setup.form.spec().lr == 2e-4 and _memory_found(tab) == ""


def test_short_records_let_the_whole_batch_through_and_a_typed_value_stays(window, tmp_path):
    tab = window.train_tab
    tab.setup.set_machine(LAPTOP)
    tab.setup.set_method("lora")
    base = model_folder(tmp_path / "smollm2", SMOLLM2_135M)
    word_tokenizer(base)
    tab.use_as_base(str(base))
    assert 0 < tab.setup.form.spec().micro_batch_size < 16  # 1,024-token examples guessed: accumulation
    data = chats(tmp_path / "chats.jsonl", answer_words=40)
    tab.setup.method_panel.data_list.set_files([str(data)])
    assert tab.setup.form.spec().micro_batch_size == 0  # 58-token examples: the batch of 16 at once
    tab.setup.form.set_value("micro_batch_size", 2)  # the person's own
    tab.setup.form.set_value("batch_size", 32)
    assert tab.setup.form.spec().micro_batch_size == 2
    assert json.loads(json.dumps(tab.setup.run_request().train))["micro_batch_size"] == 2
