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
    if widget == "json":
        return {"depth": 3} if isinstance(default, dict) else [{"type": "deduction", "program": "x", "inputs": []}]
    if "choices" in meta:
        return next(c for c in meta["choices"] if c != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 2  # 0 -> 2: a length of 1 token is refused
    if isinstance(default, float):
        return 0.05 if default != 0.05 else 0.1
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


def test_each_widget_kind_reads_what_the_user_does(qtbot):
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
    # json: parsed when read; what does not parse is named, and the default stands meanwhile
    world = selfplay.editors["world_options"]
    world.setText('{"depth": 2}')
    assert selfplay.spec().world_options == {"depth": 2}
    world.setText("{depth: 2")
    assert selfplay.spec().world_options == {}
    assert any(p.startswith("world_options is not valid JSON") for p in selfplay.validate())
    selfplay.editors["seeds"].setText('{"not": "a list"}')
    assert "seeds must be a JSON list" in selfplay.input_problems()
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
