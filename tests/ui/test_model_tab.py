"""Model tab: presets, live exact size, inline validation, spec JSON round trip, HF folder."""

from __future__ import annotations

import json

from desktop_app.engine import presets
from desktop_app.engine.model import sizing
from desktop_app.engine.specs import ModelSpec


def test_presets_fill_the_form_and_figures(window):
    tab = window.model_tab
    for name in ("tiny", "mini", "gpt2-small"):
        tab.preset_box.setCurrentText(name)
        spec = tab.current_spec()
        assert spec == presets.preset(name)
        assert tab.params_label.text() == f"{sizing.count_parameters(spec):,}"
        assert tab.table.rowCount() == len(sizing.layer_table(spec))
    assert "124M" in tab.preset_desc.text()


def test_every_field_has_an_editor_with_help_tooltip(window):
    import dataclasses

    form = window.model_tab.form
    for f in dataclasses.fields(ModelSpec):
        editor = form.editors[f.name]
        assert editor.toolTip() == f.metadata["help"]


def test_editing_a_field_updates_count_and_switches_to_custom(window, qtbot):
    tab = window.model_tab
    tab.preset_box.setCurrentText("tiny")
    seen = []
    tab.spec_changed.connect(seen.append)
    tab.form.editors["n_layers"].setValue(4)
    assert tab.preset_box.currentText() == "custom"
    spec = tab.current_spec()
    assert spec.n_layers == 4
    assert tab.params_label.text() == f"{sizing.count_parameters(spec):,}"
    assert seen and seen[-1] == spec
    # the Train tab heard about it
    assert window.train_tab.setup.model_spec == spec


def test_invalid_spec_shows_problems_inline(window):
    tab = window.model_tab
    seen = []
    tab.spec_changed.connect(seen.append)
    tab.form.editors["n_heads"].setValue(3)  # 128 is not divisible by 3
    assert not tab.problems.isHidden()
    assert "not divisible by 3 heads" in tab.problems.text()
    assert tab.params_label.text() == "–"
    assert seen[-1] is None
    assert tab.current_spec() is None
    tab.form.editors["n_heads"].setValue(4)
    assert tab.problems.isHidden()


def test_save_and_load_spec_json(window, tmp_path):
    tab = window.model_tab
    tab.preset_box.setCurrentText("mini")
    path = tmp_path / "spec.json"
    tab.save_spec(path)
    assert json.loads(path.read_text())["d_model"] == 320
    tab.preset_box.setCurrentText("tiny")
    tab.load_spec(path)
    assert tab.current_spec() == presets.preset("mini")


def test_bad_spec_files_are_reported_not_loaded(window, tmp_path):
    tab = window.model_tab
    tab.preset_box.setCurrentText("tiny")
    before = tab.current_spec()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    try:
        tab.load_spec(bad)
    except Exception as exc:
        window.ctx.report_exception(exc)
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"d_modell": 3}))
    try:
        tab.load_spec(unknown)
    except Exception as exc:
        window.ctx.report_exception(exc)
    messages = [m for m, _ in window.ctx.errors]
    assert any("not valid JSON" in m for m in messages)
    assert any("d_modell" in m for m in messages)
    assert all(d == "" for _, d in window.ctx.errors)  # user errors: no traceback
    assert tab.current_spec() == before


def test_start_from_hf_folder(window, tmp_path):
    from desktop_app.engine.model.architecture import hf_config

    folder = tmp_path / "hf"
    folder.mkdir()
    spec = presets.preset("tiny")
    hf_config(spec).save_pretrained(folder)
    tab = window.model_tab
    assert tab.use_hf_folder(folder)
    assert tab.base_model == str(folder)
    assert tab.current_spec() == spec
    assert window.train_tab.setup.base_model == str(folder)
    assert "fine-tune" in window.train_tab.setup.model_label.text()
    tab.set_base_model("")
    assert window.train_tab.setup.base_model == ""


def test_hf_folder_without_config_is_a_clear_error(window, tmp_path):
    assert not window.model_tab.use_hf_folder(tmp_path)
    assert "no config.json" in window.ctx.errors[-1][0]
    assert window.model_tab.base_model == ""


def test_memory_breakdown_is_unavailable_while_the_spec_is_invalid(window):
    tab = window.model_tab
    tab.preset_box.setCurrentText("tiny")
    assert tab.breakdown_label.text().startswith("Memory: ")
    tab.form.editors["n_heads"].setValue(3)  # 128 is not divisible by 3
    text = tab.breakdown_label.text()
    assert text.startswith("Memory breakdown: — (unavailable") and "not divisible by 3 heads" in text
    assert tab.memory_label.text() == "–" and "not divisible by 3 heads" in tab.memory_label.toolTip()
    tab.batch_box.setValue(32)  # another assumption while invalid: still no figures of an older spec
    assert tab.breakdown_label.text() == text
    assert tab.form.spec().n_heads == 3  # the value typed stays, to be fixed
    tab.form.editors["n_heads"].setValue(4)
    spec = tab.current_spec()
    mem = sizing.estimate_memory(spec, batch_size=32, precision=tab.precision_box.currentText())
    text = tab.breakdown_label.text()
    assert text.startswith("Memory: ") and "unavailable" not in text
    for part, size in mem.items():
        if part != "total":
            assert f"{part} {sizing.human_bytes(size)}" in text
    assert tab.memory_label.text() == sizing.human_bytes(mem["total"]) and tab.memory_label.toolTip() == ""
