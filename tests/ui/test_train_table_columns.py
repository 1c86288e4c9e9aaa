"""The Train tab fine-tuning from a table whose columns have names nobody guesses: the table's columns show under the
data list, a mapping chosen there checks the file again and goes into the run request (RunConfig.columns), and a run
config shown again (resume, Library) brings its mapping back."""

from __future__ import annotations

import pytest

from desktop_app.engine.methods import method_of
from desktop_app.engine.run_commands import method_command
from desktop_app.engine.train.request import plan_run

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def qa(tmp_path):
    path = tmp_path / "qa.parquet"
    pq.write_table(pa.table({"id": ["1", "2"], "ask": ["Say hello", "Say bye"], "reply": ["Hello", "Bye"]}), path)
    return str(path)


def test_a_table_mapping_chosen_in_the_train_tab_goes_into_the_run(window, qtbot, base, qa):
    setup = window.train_tab.setup
    setup.set_method("sft")
    panel = setup.method_panel
    panel.base_picker.set_path(base)
    assert not setup.columns_box.isVisibleTo(setup)  # no table yet
    panel.data_list.set_files([qa])
    row = panel.data_list.item(0).text()
    assert row.startswith("✗ qa.parquet") and "no column to read" in row  # the guess finds nothing: said so
    box = setup.columns_box
    assert box.isVisibleTo(setup) and box.panel.columns == ["id", "ask", "reply"]
    assert box.panel.rows.item(0, 1).text() == "Say hello"
    box.panel.set_kind("instruction")
    box.panel.set_role("instruction", "ask")
    box.panel.set_role("output", "reply")
    assert panel.data_list.columns == {"instruction": "ask", "output": "reply"}
    assert panel.data_list.item(0).text() == "qa.parquet — Alpaca instructions"
    config = setup.build_config()
    assert config.columns == {"instruction": "ask", "output": "reply"} and config.data == [qa]
    # the config shown again (resume, Library) brings its mapping back; a fresh form starts with none
    panel.data_list.set_columns({})
    assert panel.data_list.item(0).text().startswith("✗ qa.parquet")
    assert any("qa.parquet" in problem for problem in panel.problems())  # Start refuses the unmapped table
    setup.apply_config(config)
    assert not [problem for problem in panel.problems() if "qa.parquet" in problem]  # mapped: Start takes it
    assert panel.data_list.columns == config.columns
    assert panel.data_list.item(0).text() == "qa.parquet — Alpaca instructions"
    assert plan_run(setup.run_request()).columns == config.columns
    command, _ = method_command(config, method_of(config), "azr-trainer")
    assert "--columns instruction=ask,output=reply" in command  # Show CLI command reproduces the mapping


def test_a_method_without_records_sends_no_mapping(window, base, qa):
    setup = window.train_tab.setup
    setup.set_method("grpo")
    setup.method_panel.base_picker.set_path(base)
    assert not setup.columns_box.isVisibleTo(setup)
    assert setup.run_request().columns == {}
