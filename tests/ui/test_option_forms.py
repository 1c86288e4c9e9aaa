"""Every method's options are shown by the one SpecForm, in the words and widgets of the spec's display hints:
each form gives back its spec's defaults, and a changed value of every field (files, checklist, weights, JSON,
file, numbers, choices) comes back exactly as set."""

from __future__ import annotations

import dataclasses
import json

import pytest
from PySide6.QtWidgets import QLabel

from desktop_app.engine.method_options import METHOD_OPTIONS
from desktop_app.engine.spec_base import default_of, field_label, help_text
from desktop_app.ui.widgets.spec_form import SpecForm

OBJECTIVES = ["sft", "dpo", "grpo", "selfplay"]


def _changed(f: dataclasses.Field) -> object:
    """Another valid value of the field, by its widget hint or type."""
    meta, default = f.metadata, default_of(f)
    widget = meta.get("widget")
    if widget == "files":
        return ["/data/held out.jsonl", "/data/more.jsonl"]
    if widget == "file":
        return "/home/me/my reward.py"
    if widget == "checklist":
        return [meta["choices"][0], meta["choices"][-1]]
    if widget == "weights":
        return {meta["keys"][0]: 0.5, meta["keys"][1]: 2.0, meta["keys"][2]: 0.0}  # a 0 given stays
    if widget == "numbers":
        return {"depth": 3, "pairs": 4}
    if widget == "records":
        return [{"type": "deduction", "program": "x", "inputs": []}]
    if widget == "json" and f.name == "exclude_heldout":  # a list of held-out seeds
        return [9001, 9002]
    if widget == "json":
        return {"depth": 3} if isinstance(default, dict) else [{"type": "deduction", "program": "x", "inputs": []}]
    if "choices" in meta:
        return next(c for c in meta["choices"] if c != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 2  # 0 -> 2: a length of 1 token is refused
    if isinstance(default, float):
        value = 0.05 if default != 0.05 else 0.1
        return value if meta.get("maximum") is None or value <= meta["maximum"] else meta["maximum"] - 0.05
    return default + "x"


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_each_method_form_round_trips_defaults_and_changes(qtbot, objective):
    cls = METHOD_OPTIONS[objective]
    form = SpecForm(cls)
    qtbot.addWidget(form)
    assert form.spec() == cls() and form.validate() == []
    fields = dataclasses.fields(cls)
    assert set(form.editors) == {f.name for f in fields if not f.metadata.get("hidden")}
    for name, editor in form.editors.items():  # words and help from the spec, nowhere else
        label = form.layout().labelForField(editor)
        assert isinstance(label, QLabel) and label.text() == field_label(cls, name)
        assert editor.toolTip() == help_text(cls, name) and label.toolTip() == help_text(cls, name)

    changed = cls(**{f.name: _changed(f) for f in fields})
    assert changed.validate() == [], changed.validate()
    form.set_spec(changed)
    assert form.spec() == changed
    again = SpecForm(cls)  # a fresh form from the config's JSON, as a resume or the Library fills it
    qtbot.addWidget(again)
    again.set_spec(cls.from_dict(json.loads(json.dumps(changed.to_dict()))))
    assert again.spec() == changed and again.values() == form.values()


def test_each_widget_kind_reads_what_the_user_does(qtbot, tmp_path):
    sft = SpecForm(METHOD_OPTIONS["sft"])
    grpo = SpecForm(METHOD_OPTIONS["grpo"])
    selfplay = SpecForm(METHOD_OPTIONS["selfplay"])
    for form in (sft, grpo, selfplay):
        qtbot.addWidget(form)
    # files: a list with Add…/Remove
    files = sft.editors["val_data"]
    files.set_value(["/a.jsonl", "/b.jsonl"])
    files.list.item(0).setSelected(True)
    with qtbot.waitSignal(sft.changed, timeout=1000):
        files.remove_btn.click()
    assert sft.spec().val_data == ["/b.jsonl"]
    # checklist: one check box per choice, the value in the choices' order
    types = selfplay.editors["task_types"]
    types.checks["deduction"].setChecked(False)
    assert selfplay.spec().task_types == ["abduction", "induction"]
    types.checks["abduction"].setChecked(False)
    types.checks["induction"].setChecked(False)
    assert any("task_types" in p for p in selfplay.validate())  # none chosen: the spec says which exist
    # weights: a number per reward function; 0 is off
    weights = grpo.editors["weights"]
    weights.boxes["format"].setValue(0.5)
    assert grpo.spec().weights == {"answer": 1.0, "format": 0.5}
    weights.boxes["answer"].setValue(0.0)
    assert grpo.spec().weights == {"answer": 0.0, "format": 0.5}  # given by the spec shown: kept, as 0
    # numbers: a whole number per known option, "default" (left out) until set; options it does not know are kept
    world = selfplay.editors["world_options"]
    assert world.boxes["depth"].text() == "default" and selfplay.spec().world_options == {}
    world.boxes["depth"].setValue(2)
    assert selfplay.spec().world_options == {"depth": 2}
    world.set_value({"pairs": 5, "custom": 7})
    assert selfplay.spec().world_options == {"custom": 7, "pairs": 5}
    # records: task objects loaded from a JSON Lines file; what is no object is named by its line, the rest kept
    tasks = tmp_path / "seeds.jsonl"
    task = {"type": "deduction", "program": "lambda x: x + 1", "inputs": [1], "outputs": [2]}
    tasks.write_text(json.dumps(task) + "\n{not json\n[1, 2]\n", encoding="utf-8")
    seeds = selfplay.editors["seeds"]
    with qtbot.waitSignal(selfplay.changed, timeout=1000):
        assert not seeds.load_file(tasks)
    assert selfplay.spec().seeds == [task] and seeds.summary.text() == "1 loaded (deduction 1)"
    problems = selfplay.input_problems()
    assert "seeds: seeds.jsonl line 2 is not valid JSON" in problems
    assert "seeds: seeds.jsonl line 3 is not a JSON object" in problems
    selfplay.validate()
    assert "• Your seed tasks: seeds.jsonl line 2 is not valid JSON" in selfplay.problems.text()
    seeds.clear_btn.click()
    assert selfplay.spec().seeds == [] and selfplay.input_problems() == []
    # file: a path typed or browsed; the reward file's note sits under it
    grpo.editors["reward_file"].line.setText("  /tmp/r.py ")
    assert grpo.spec().reward_file == "/tmp/r.py"
    # hidden: GRPO's prompts are the run's data files, not a field; a value set is kept
    assert "prompts" not in grpo.editors
    grpo.set_spec(grpo.spec().replace(prompts=["/p.jsonl"]))
    assert grpo.spec().prompts == ["/p.jsonl"]
    # unit and zero hints
    max_len = sft.editors["max_len"]
    assert max_len.suffix() == " tokens" and max_len.specialValueText() == "the model's context"
    assert max_len.text() == "the model's context"
    max_len.setValue(512)
    assert max_len.text() == "512 tokens" and sft.spec().max_len == 512
    kl = grpo.editors["kl_coef"]
    assert kl.text() == "off"
    kl.lineEdit().setText("0.25")
    kl.interpretText()
    assert grpo.spec().kl_coef == 0.25


def test_the_method_panel_shows_each_method_with_the_one_form(window, qtbot):
    panel = window.train_tab.setup.method_panel
    for key, objective in (("sft", "sft"), ("dpo", "dpo"), ("grpo", "grpo"), ("selfplay", "selfplay")):
        window.train_tab.setup.set_method(key)
        form = panel.options_form()
        assert isinstance(form, SpecForm) and form.spec_cls is METHOD_OPTIONS[objective]
        assert form.isVisibleTo(panel)
    window.train_tab.setup.set_method("grpo")
    assert "prompts" not in panel.options_dict()  # the run's data files are GRPO's prompts
    notes = [w.text() for w in panel.option_forms["grpo"].findChildren(QLabel)]
    assert any("not in the sandbox" in text for text in notes)
    window.train_tab.setup.set_method("pretraining")
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=20000)  # self-play probed the sandbox


def test_training_settings_read_as_words_with_units_and_what_zero_means(qtbot):
    from desktop_app.engine.specs import DataSpec, GenerateSpec, ModelSpec, TrainSpec

    train = SpecForm(TrainSpec)
    qtbot.addWidget(train)
    labels = {name: label.text() for name, label in train.labels.items()}
    assert labels["lr"] == "Learning rate" and labels["min_lr_ratio"] == "Final learning rate"
    assert labels["grad_clip"].startswith("Gradient clipping") and labels["beta1"].startswith("Adam beta1")
    assert labels["nonfinite_policy"] == "On a NaN or Inf loss"
    assert train.editors["micro_batch_size"].text() == "same as the batch"  # 0 said in words
    assert train.editors["threads"].text() == "auto" and train.editors["early_stopping_patience"].text() == "off"
    assert train.editors["steps"].text() == "200 steps" and train.editors["min_lr_ratio"].text() == "0.1 x peak"
    # no field is left with a label made from its name, in any spec the window shows
    for cls in (ModelSpec, DataSpec, TrainSpec, GenerateSpec, *METHOD_OPTIONS.values()):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("label"), f"{cls.__name__}.{f.name} has no label"
    # problems name the field as the form does
    train.set_value("micro_batch_size", 5)
    train.validate()
    assert "• Batch size 16 is not a multiple of micro-batch size 5" in train.problems.text()


def test_seeds_have_no_thousands_separator_and_no_negatives(qtbot):
    selfplay = SpecForm(METHOD_OPTIONS["selfplay"])
    qtbot.addWidget(selfplay)
    seed = selfplay.editors["heldout_seed"]
    assert seed.text() == "9001" and seed.minimum() == 0
    sft = SpecForm(METHOD_OPTIONS["sft"])
    qtbot.addWidget(sft)
    sft.editors["max_len"].setValue(4096)
    assert sft.editors["max_len"].text() == "4,096 tokens"  # quantities keep theirs


def test_advanced_rows_hide_until_asked_and_keep_their_values(qtbot):
    from desktop_app.engine.specs import TrainSpec

    form = SpecForm(TrainSpec)
    qtbot.addWidget(form)
    form.show()
    basic = [n for n in form.editors if n not in form.advanced]
    assert {"steps", "batch_size", "lr"} <= set(basic) and "beta1" in form.advanced and len(basic) <= 12
    assert form.editors["steps"].isVisible() and not form.editors["beta1"].isVisible()
    form.set_value("beta1", 0.8)
    assert form.spec().beta1 == 0.8  # hidden, still read
    form.advanced_check.setChecked(True)
    assert form.editors["beta1"].isVisible()
    # sample prompts: one per line; nothing typed is one sample from the start of the text
    prompts = form.editors["sample_prompts"]
    assert form.spec().sample_prompts == [""] and prompts.toPlainText() == ""
    prompts.setPlainText("Once upon a time\n\nThe cat")
    assert form.spec().sample_prompts == ["Once upon a time", "The cat"]


def test_target_modules_are_picked_from_the_base_models_layers(qtbot):
    from desktop_app.engine.specs import AdapterSpec

    form = SpecForm(AdapterSpec, exclude=("kind",))
    qtbot.addWidget(form)
    modules = form.editors["target_modules"]
    assert form.spec().target_modules == [] and "choose a base model" in modules.note.text()
    modules.set_choices(["q_proj", "k_proj", "v_proj", "o_proj"])
    assert list(modules.checks) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    modules.checks["q_proj"].setChecked(True)
    modules.checks["v_proj"].setChecked(True)
    assert form.spec().target_modules == ["q_proj", "v_proj"] and modules.note.text() == "only the ticked layers"
    form.set_value("target_modules", ["c_attn"])  # a name the base does not list (another base's): kept, ticked
    assert form.spec().target_modules == ["c_attn"] and "c_attn" in modules.checks


def test_validation_files_take_drops_and_folders(qtbot, tmp_path):
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    form = SpecForm(METHOD_OPTIONS["sft"])
    qtbot.addWidget(form)
    folder = tmp_path / "held-out"
    (folder / "more").mkdir(parents=True)
    for path in (folder / "a.jsonl", folder / "more" / "b.jsonl"):
        path.write_text('{"messages": []}\n')
    (folder / "notes.txt").write_text("not data")
    files = form.editors["val_data"]
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(folder))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(form.changed, timeout=1000):
        files.list.dropEvent(event)
    assert form.spec().val_data == [str(folder / "a.jsonl"), str(folder / "more" / "b.jsonl")]  # the folder's data


def _rows(form: SpecForm) -> dict[str, tuple[int, int, int, int]]:
    """Each shown row's (label x, field x, label top, field top), in the form's coordinates."""
    return {name: (form.labels[name].x(), editor.x(), form.labels[name].y(), editor.y())
            for name, editor in form.editors.items() if form.row_shown(name)}


def _assert_lined_up(form: SpecForm, field_x: int | None = None) -> int:
    """Every shown row has its label at one x and its field beside it at one x (none put under its label), and no
    wrapped label is cut; returns the fields' x."""
    rows = _rows(form)
    assert len({label_x for label_x, _, _, _ in rows.values()}) == 1, rows
    xs = {x for _, x, _, _ in rows.values()}
    assert len(xs) == 1, f"{form.spec_cls.__name__}: fields at several x: {rows}"
    assert all(field_top == label_top for _, _, label_top, field_top in rows.values()), rows
    for name in rows:
        label = form.labels[name]
        assert label.height() >= label.heightForWidth(label.width()) or not label.wordWrap(), name
    (x,) = xs
    assert x > max(label_x for label_x, _, _, _ in rows.values())
    if field_x is not None:
        assert x == field_x, f"{form.spec_cls.__name__}: fields moved from x {field_x} to {x}"
    return x


ADVANCED_SPECS = ["ModelSpec", "DataSpec", "TrainSpec", "GenerateSpec", "DistributedSpec", "AdapterSpec",
                  *OBJECTIVES]


@pytest.mark.parametrize("name", ADVANCED_SPECS)
def test_advanced_rows_line_up_with_the_basic_rows(qtbot, name):
    from desktop_app.engine import specs

    cls = METHOD_OPTIONS[name] if name in METHOD_OPTIONS else getattr(specs, name)
    form = SpecForm(cls, advanced_switch=False)
    qtbot.addWidget(form)
    form.resize(338, 1600)  # the Train tab's settings column in a 1366 x 768 window (it scrolls there)
    form.show()
    qtbot.waitExposed(form)
    assert form.advanced, f"{name} has no advanced fields"
    basic_x = _assert_lined_up(form)
    form.set_show_advanced(True)
    qtbot.wait(1)
    _assert_lined_up(form, basic_x)
    long_labels = [form.labels[n] for n in form.advanced if form.labels[n].wordWrap()]
    assert all(label.width() == basic_x - form.layout().horizontalSpacing() for label in long_labels)


def test_the_train_columns_forms_line_up_in_a_small_window(window, qtbot):
    window.resize(1366, 768)
    window.tabs.setCurrentWidget(window.train_tab)
    setup = window.train_tab.setup
    setup.set_show_advanced(True)
    for key in ("pretraining", "lora", "dpo", "grpo", "selfplay"):
        setup.set_method(key)
        qtbot.wait(5)
        forms = [f for f in setup.findChildren(SpecForm) if f.isVisible()]
        assert setup.form in forms and len(forms) >= (1 if key == "pretraining" else 2), key
        for form in forms:
            _assert_lined_up(form)
    setup.set_method("pretraining")
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=20000)  # self-play probed the sandbox
