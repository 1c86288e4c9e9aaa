"""Train tab methods: the selector shows each method's fields (with help), the CLI command per method, a config
built from the form round-trips through RunConfig and back into the form, bad input is refused with a clear
message and nothing lost, the engine's refusal reaches the user, metric families get grouped plots, and the
Self-play method shows the sandbox state and the task browser."""

from __future__ import annotations

import json
import shlex
import sys

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent

from desktop_app.engine.methods import METHODS
from desktop_app.engine.specs import RunConfig
from desktop_app.ui.widgets.data_files import DataFileList
from desktop_app.ui.widgets.method_plots import MethodPlots, panel_of
from desktop_app.ui.widgets.task_browser import LOG_NAME

CHAT = {"messages": [{"role": "user", "content": "Say hello"}, {"role": "assistant", "content": "Hello there"}]}
PREF = {"prompt": "Say hello", "chosen": "Hello there", "rejected": "Go away"}
PROMPT = {"prompt": "2 + 3 =", "answer": "5"}
DATA_FOR = {"sft": CHAT, "lora": CHAT, "qlora": CHAT, "dpo": PREF, "grpo": PROMPT}


def _jsonl(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _visible(tab) -> dict[str, bool]:
    p = tab.setup.method_panel
    return {name: g.isVisibleTo(tab) for name, g in (("base", p.base_group), ("data", p.data_group),
                                                      ("adapter", p.adapter_group), ("options", p.options_group),
                                                      ("sandbox", p.sandbox_group))}


def _wait_idle(qtbot, window):
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=20000)


def test_method_switching_shows_the_right_fields_with_help(window, qtbot):
    tab = window.train_tab
    labels = [tab.setup.method_box.itemText(i) for i in range(tab.setup.method_box.count())]
    assert labels == [m.label for m in METHODS] + ["Pipeline"]  # a pipeline chains stages of the others
    expected = {  # base, data, adapter, options, sandbox
        "pretraining": (False, False, False, False, False),
        "sft": (True, True, False, True, False),
        "lora": (True, True, True, True, False),
        "qlora": (True, True, True, True, False),
        "dpo": (True, True, True, True, False),
        "grpo": (True, True, True, True, False),
        "selfplay": (True, False, True, True, True),
    }
    for key, shown in expected.items():
        tab.setup.set_method(key)
        assert tuple(_visible(tab).values()) == shown, key
        assert tab.setup.dataset_box.isVisibleTo(tab) == (key == "pretraining")
        view = tab.run_view
        assert view.view_tabs.isTabVisible(view.preview_index) == (key in ("sft", "lora", "qlora", "dpo"))
        assert view.view_tabs.isTabVisible(view.browser_index) == (key == "selfplay")
        form = tab.setup.method_panel.options_form()
        if key != "pretraining":
            editors = [w for w in form.findChildren(object) if w.objectName().startswith(("field_", "option_"))]
            assert editors and all(w.toolTip() for w in editors), key  # every field has its help text
    tab.setup.set_method("qlora")
    adapter = tab.setup.method_panel.adapter_form
    assert adapter.layout().isRowVisible(adapter.editors["quant_type"])
    assert "rank" in adapter.editors["rank"].toolTip().lower()
    tab.setup.set_method("lora")
    assert not adapter.layout().isRowVisible(adapter.editors["quant_type"])
    tab.setup.set_method("dpo")
    assert not adapter.isVisibleTo(tab)  # full weights by default
    tab.setup.method_panel.set_adapter_kind("lora")
    assert adapter.isVisibleTo(tab)
    assert "not sandboxed" in tab.setup.method_panel.option_forms["grpo"].editors["reward_file"].toolTip()
    tab.setup.set_method("pretraining")
    _wait_idle(qtbot, window)  # the self-play method probed the sandbox


def test_learning_rate_follows_the_method_unless_typed(window):
    tab = window.train_tab
    tab.setup.set_method("sft")
    assert tab.setup.form.spec().lr == 5e-5
    tab.setup.set_method("lora")
    assert tab.setup.form.spec().lr == 2e-4
    tab.setup.form.set_value("lr", 3e-4)  # the user's own
    tab.setup.set_method("dpo")
    assert tab.setup.form.spec().lr == 3e-4


def test_cli_command_for_each_method(window, qtbot, tmp_path, base):
    tab = window.train_tab
    exe = "python -m desktop_app"
    for key in ("sft", "lora", "qlora", "dpo", "grpo", "selfplay"):
        tab.setup.set_method(key)
        tab.setup.method_panel.base_picker.set_path(base)
        data = None
        if key in DATA_FOR:
            data = _jsonl(tmp_path / f"{key} data.jsonl", DATA_FOR[key])
            tab.setup.method_panel.data_list.set_files([data])
        first = tab.cli_command().splitlines()[0]
        assert first.startswith(f"{exe} train --method {key} --base {shlex.quote(base)}"), first
        assert "--steps 200 --batch-size 16" in first and first.endswith("--out my-run")
        if data:
            assert f"--data {shlex.quote(data)}" in first
        assert "train --config run.json" in tab.cli_command()
    assert "--world auto" in first  # auto: python for a chat model, mini for the app's own
    # options that differ from their defaults become --option / their own flags; adapter settings are named
    tab.setup.set_method("lora")
    tab.setup.method_panel.option_forms["sft"].set_value("loss_on", "last")
    tab.setup.method_panel.adapter_form.set_value("rank", 16)
    tab.setup.method_panel.adapter_form.set_value("dropout", 0.05)
    first = tab.cli_command().splitlines()[0]
    assert "--option loss_on=last" in first and "--lora-rank 16" in first and "--lora-dropout 0.05" in first
    tab.setup.set_method("qlora")
    tab.setup.method_panel.adapter_form.set_value("quant_type", "fp4")
    assert "adapter.quant_type=fp4" in tab.cli_command().splitlines()[1]  # no flag for it: named, in run.json
    tab.setup.set_method("dpo")
    tab.setup.method_panel.set_adapter_kind("lora")
    assert "--method dpo" in tab.cli_command() and "--adapter lora" in tab.cli_command()
    tab.setup.set_method("grpo")
    form = tab.setup.method_panel.option_forms["grpo"]
    form.set_values({**form.values(), "reward_file": "/tmp/my reward.py", "group_size": 8})
    first = tab.cli_command().splitlines()[0]
    assert "--reward-file '/tmp/my reward.py'" in first and "--option group_size=8" in first
    tab.setup.set_method("pretraining")
    assert tab.cli_command() == f"{exe} train --config run.json --out my-run"
    tab.setup.set_method("lora")
    tab.show_cli_command()
    dialog = tab.cli_dialog
    assert "--method lora" in dialog.findChild(object, "cliCommand").toPlainText()
    dialog.close()
    _wait_idle(qtbot, window)


@pytest.mark.parametrize("key", ["sft", "lora", "qlora", "dpo", "grpo", "selfplay"])
def test_config_from_the_form_round_trips(window, qtbot, tmp_path, base, key):
    tab = window.train_tab
    tab.setup.set_method(key)
    panel = tab.setup.method_panel
    panel.base_picker.set_path(base)
    if key in DATA_FOR:
        panel.data_list.set_files([_jsonl(tmp_path / "data.jsonl", DATA_FOR[key])])
    if key in ("lora", "qlora"):
        panel.adapter_form.set_value("rank", 4)
    if key == "selfplay":
        form = panel.option_forms["selfplay"]
        form.set_values({**form.values(), "task_types": ["deduction", "induction"], "world_options": {"depth": 2}})
    tab.setup.form.set_value("steps", 7)
    config = tab.setup.build_config()
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert config.objective == {"lora": "sft", "qlora": "sft"}.get(key, key)
    assert config.base_model == base and config.train["steps"] == 7
    assert config.data == ([str(tmp_path / "data.jsonl")] if key in DATA_FOR else [])
    assert config.adapter.get("kind", "none") == {"lora": "lora", "qlora": "qlora"}.get(key, "none")
    if key in ("sft", "lora", "qlora", "dpo"):
        assert config.validate() == [], config.validate()
        assert config.options() is not None
    if key == "selfplay":
        assert config.method_options["task_types"] == ["deduction", "induction"]
        assert config.method_options["world_options"] == {"depth": 2}
    if key == "grpo":
        assert "prompts" not in config.method_options  # the data files are the prompts
    # back into a fresh form (as resume does): the same config comes out
    tab.setup.set_method("pretraining")
    panel.data_list.set_files([])
    panel.base_picker.set_path("")
    tab.setup.apply_config(again)
    assert tab.setup.current_method().key == key
    assert tab.setup.build_config() == config
    _wait_idle(qtbot, window)


def test_bad_input_is_refused_clearly_and_nothing_is_lost(window, qtbot, tmp_path, base):
    tab = window.train_tab
    tab.setup.set_method("sft")
    assert not tab.start()
    message = window.ctx.errors[-1][0]
    assert "choose a base model" in message and "add the data files" in message
    tab.setup.method_panel.base_picker.set_path(base)
    missing = str(tmp_path / "missing.jsonl")
    odd = _jsonl(tmp_path / "odd.jsonl", {"text": "no chat here"})
    pref = _jsonl(tmp_path / "pref.jsonl", PREF)
    good = _jsonl(tmp_path / "good.jsonl", CHAT)
    tab.setup.method_panel.data_list.set_files([missing, odd, pref, good])
    items = [tab.setup.method_panel.data_list.item(i).text() for i in range(4)]
    assert items[0].startswith("✗ missing.jsonl") and "does not exist" in items[0]
    assert "unknown data format" in items[1]
    assert "use it with DPO" in items[2]
    assert items[3] == "good.jsonl — chat JSONL"
    assert not tab.start()
    message = window.ctx.errors[-1][0]
    assert "missing.jsonl does not exist" in message and "unknown data format" in message
    assert "use it with DPO" in message and not tab.running
    assert tab.setup.method_panel.data_files() == [missing, odd, pref, good]  # nothing lost
    assert tab.setup.method_panel.base_model() == base
    # DPO keeps a list of its own: SFT's chat files are not offered to it (nor shown red there)
    tab.setup.set_method("dpo")
    assert tab.setup.method_panel.data_files() == []
    tab.setup.method_panel.data_list.set_files([pref])
    assert tab.setup.method_panel.data_list.item(0).text() == "pref.jsonl — preference pairs"
    tab.setup.set_method("sft")
    assert tab.setup.method_panel.data_files() == [missing, odd, pref, good]


def test_engine_refusal_at_start_reaches_the_user(window, qtbot, tmp_path):
    """A base folder that is no model passes the form's checks; the engine refuses it by name in the worker."""
    tab = window.train_tab
    tab.setup.set_method("sft")
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    tab.setup.method_panel.base_picker.set_path(str(not_a_model))
    data = _jsonl(tmp_path / "chat.jsonl", CHAT)
    tab.setup.method_panel.data_list.set_files([data])
    tab.setup.form.set_value("steps", 3)
    assert tab.start()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert window.ctx.errors
    message = window.ctx.errors[-1][0]
    assert "not-a-model" in message
    assert tab.run_view.progress.format() in ("failed", "failed at step 0")
    assert tab.setup.method_panel.data_files() == [data] and tab.setup.form.spec().steps == 3  # the form is as it was
    assert tab.setup.method_box.isEnabled() and tab.setup.method_panel.isEnabled()
    assert str(not_a_model) in tab.setup.method_panel.base_picker.recent()


def test_data_files_arrive_by_drop(qtbot, tmp_path):
    files = DataFileList()
    qtbot.addWidget(files)
    folder = tmp_path / "set"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", CHAT)
    _jsonl(folder / "b.jsonl", CHAT)
    (folder / "notes.txt").write_text("not data")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(folder))])
    event = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.NoButton,
                       Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(files.changed, timeout=1000):
        files.dropEvent(event)
    assert files.files() == [str(folder / "a.jsonl"), str(folder / "b.jsonl")]
    assert files.formats[str(folder / "a.jsonl")] == "chat JSONL"


def test_a_nested_folder_lists_exactly_the_files_training_reads(qtbot, tmp_path):
    from desktop_app.engine.finetune.formats import read_records

    files = DataFileList()
    qtbot.addWidget(files)
    folder = tmp_path / "set"
    (folder / "more" / "deeper").mkdir(parents=True)
    listed = [_jsonl(folder / "a.jsonl", CHAT), _jsonl(folder / "more" / "b.jsonl", CHAT),
              _jsonl(folder / "more" / "deeper" / "c.jsonl", CHAT)]
    (folder / "more" / "notes.txt").write_text("not data")
    files.add_paths([str(folder)])
    _, verdicts = read_records(folder)  # what training reads when given the folder
    assert files.files() == [v.path for v in verdicts if v.line == 0] == listed


def test_metric_families_get_grouped_plots(qtbot):
    plots = MethodPlots()
    qtbot.addWidget(plots)
    for step in range(1, 4):
        plots.add_metrics(step, {
            "loss": 1.0 / step, "reward": 0.1 * step, "reward/solver/deduction": 0.5, "reward/proposer/deduction": 0.2,
            "reward/solver/induction": 0.3, "solve_rate/deduction": 0.4, "solve_rate/induction": 0.1,
            "proposal_validity": 0.9, "format_errors": 0.05, "kl": 0.01, "entropy": 2.0, "response_length": 12.0,
            "rollout_tokens_per_s": 900.0, "rewards_chosen": 0.2, "rewards_rejected": -0.1, "reward_margin": 0.3,
            "preference_accuracy": 0.75, "reward/answer": 0.5})
    plots.add_metrics(3, {"heldout_solve_rate/deduction": 0.3, "heldout_solve_rate/induction": 0.2,
                          "heldout_solve_rate": 0.25, "val_preference_accuracy": 0.7})
    plots.flush()
    keys = plots.panel_keys()
    for key in ("loss", "reward", "reward_by_role", "solve_rate", "heldout_solve_rate", "proposal_validity",
                "format_errors", "kl", "entropy", "response_length", "rollout_tokens_per_s", "dpo_rewards",
                "reward_margin", "preference_accuracy", "reward_parts"):
        assert key in keys, key
    assert plots.curve_names("reward_by_role") == ["solver/deduction", "proposer/deduction", "solver/induction"]
    assert plots.curve_names("solve_rate") == ["deduction", "induction"]
    assert plots.curve_names("heldout_solve_rate") == ["deduction", "induction", "mean"]
    assert plots.curve_names("dpo_rewards") == ["chosen", "rejected"]
    assert plots.curve_names("preference_accuracy") == ["train", "val"]
    assert plots.point_count("reward/solver/deduction") == 3
    assert panel_of("grad_norm") is None and panel_of("val_loss") is None
    plots.set_method("selfplay")
    plots.clear()
    assert "reward_by_role" in plots.panel_keys() and "heldout_solve_rate" in plots.panel_keys()
    plots.stop_timers()


def test_self_plays_curriculum_gets_panels_a_person_reads_without_the_docs(qtbot):
    plots = MethodPlots()
    qtbot.addWidget(plots)
    plots.set_method("selfplay")
    plots.clear()
    for step in range(1, 4):
        plots.add_metrics(step, {"programs/deduction": 1.0 + step, "shapes/deduction": 1.0 + step // 2,
                                 "new_task_solve_rate/deduction": 0.25 * step, "program_size/deduction": 14.0 + step,
                                 "new_task_solve_rate/induction": 0.5})
    plots.flush()
    assert {"programs", "shapes", "new_task_solve_rate", "program_size"} <= set(plots.panel_keys())
    assert "between 0 and 1" in plots.panel_meta("new_task_solve_rate/deduction")[1]
    assert plots.panel_meta("program_size/deduction")[1:] == ("Size of the proposer's new programs", "characters")
    assert plots.curve_names("new_task_solve_rate") == ["deduction", "induction"]
    assert plots.point_count("program_size/deduction") == 3
    plots.stop_timers()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the full layer set is Linux's")
def test_selfplay_shows_the_sandbox_state_and_a_live_task_browser(window, qtbot, tmp_path):
    tab = window.train_tab
    tab.setup.set_method("selfplay")
    qtbot.waitUntil(lambda: "isolation layers" in tab.setup.method_panel.sandbox_label.text(), timeout=20000)
    _wait_idle(qtbot, window)
    tab.setup.method_panel.sandbox_btn.click()
    qtbot.waitUntil(lambda: tab.setup.sandbox_dialog is not None, timeout=20000)
    assert "audit-hook" in tab.setup.sandbox_dialog.label.text()
    tab.setup.sandbox_dialog.close()
    _wait_idle(qtbot, window)
    run = tmp_path / "run"
    run.mkdir()
    (run / LOG_NAME).write_text(json.dumps({"round": 1, "rollouts": [
        {"role": "solver", "type": "deduction", "prompt": "f(2)?", "answer": "3", "verdict": "correct",
         "reward": 1.0, "reason": ""}], "proposals": []}) + "\n")
    tab.run_view.task_browser.start_live(run)
    qtbot.waitUntil(lambda: tab.run_view.task_browser.rollouts.rowCount() == 1, timeout=5000)
    tab.stop_timers()
    assert not tab.run_view.task_browser.timer.isActive()


def test_selfplay_demo_button_runs_the_demo_job_and_follows_its_phases(window, qtbot, monkeypatch, tmp_path):
    # The engine's demo itself is tested in tests/engine/selfplay/test_selfplay_demo.py; here a short stand-in
    # with the same phase messages checks the window's side: start, fresh curves per phase, live task browser.
    import desktop_app.ui.train_jobs as demo  # the window runs the demo through train_jobs.run_demo
    from desktop_app.engine.events import Finished, Log, RunFolder, StepMetrics

    def short_demo(out, *, minutes, controls, **options):
        (out / "selfplay").mkdir(parents=True)
        (out / "selfplay" / LOG_NAME).write_text(json.dumps({"round": 1, "rollouts": [
            {"role": "solver", "type": "abduction", "prompt": "f(?)=2", "answer": "1", "verdict": "correct",
             "reward": 1.0, "reason": ""}], "proposals": []}) + "\n")
        yield Log("info", "1/6 seed corpus")
        yield Log("info", "3/6 pretraining")
        yield RunFolder(str(out / "pretrain"), "pretraining")
        yield StepMetrics(step=1, total_steps=5, metrics={"loss": 2.0})
        yield Log("info", "5/6 self-play")
        yield RunFolder(str(out / "selfplay"), "selfplay")
        yield StepMetrics(step=1, total_steps=5, metrics={"loss": 0.1, "reward": 0.5})
        while not controls.stop.is_set():
            controls.stop.wait(0.05)
        yield Finished("stopped", message="stopped")

    monkeypatch.setattr(demo, "run_demo", short_demo)
    tab = window.train_tab
    tab.setup.set_method("selfplay")
    with qtbot.waitSignal(tab.selfplay_demo_requested, timeout=1000):
        tab.setup.method_panel.demo_btn.click()
    assert tab.running and "selfplay-demo-" in str(tab.run_dir)
    qtbot.waitUntil(lambda: tab.run_view.task_browser.rollouts.rowCount() == 1, timeout=10000)
    assert str(tab.run_dir).endswith("selfplay") and "5/6 self-play" in tab.run_view.log_view.toPlainText()
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=10000)
    _wait_idle(qtbot, window)


def test_config_helpers_are_tolerant_of_the_engine():
    from desktop_app.engine.methods import method_of
    from desktop_app.engine.train.request import make_run_config

    def method_key_of(config: RunConfig) -> str:
        return method_of(config).key

    config, unknown = make_run_config(objective="sft", base_model="/b", pipeline_stage=2, empty_new_field=[])
    assert unknown == ["pipeline_stage"] and config.objective == "sft"  # an unset new field is no problem
    assert method_key_of(RunConfig(objective="sft", adapter={"kind": "qlora"})) == "qlora"
    assert method_key_of(RunConfig(objective="dpo", adapter={"kind": "lora"})) == "dpo"
    assert method_key_of(RunConfig()) == "pretraining"


@pytest.mark.parametrize("key", ["sft", "lora", "qlora", "dpo"])
def test_cli_command_builds_the_same_config_as_the_window(window, qtbot, tmp_path, base, key):
    """The command shown, parsed by the CLI's own argument parser, makes the config the window would start."""
    cli = pytest.importorskip("desktop_app.cli.train")
    if not hasattr(cli, "finetune_config"):
        pytest.skip("this CLI has no --method yet")
    import argparse

    from desktop_app.engine import specs

    tab = window.train_tab
    tab.setup.set_method(key)
    panel = tab.setup.method_panel
    panel.base_picker.set_path(base)
    panel.data_list.set_files([_jsonl(tmp_path / "data one.jsonl", DATA_FOR[key])])
    form = panel.option_forms["dpo" if key == "dpo" else "sft"]
    form.set_value("val_fraction", 0.2)
    if key == "dpo":
        form.set_value("beta", 0.3)
        panel.set_adapter_kind("lora")
    if panel.adapter() != "none":
        panel.adapter_form.set_value("rank", 4)
        panel.adapter_form.set_value("target_modules", ["q_proj", "v_proj"])
    tab.setup.form.set_value("steps", 9)
    tab.setup.form.set_value("lr", 1e-3)  # equal to TrainSpec's default, not the method's: must still be passed
    gui = tab.setup.build_config()
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    argv = shlex.split(tab.cli_command().splitlines()[0])
    assert argv[:4] == ["python", "-m", "desktop_app", "train"]
    made = cli.finetune_config(parser.parse_args(argv[4:]))

    def canonical(config):
        d = config.to_dict()
        d["train"] = specs.TrainSpec.from_dict(d["train"]).to_dict()
        d["adapter"] = specs.AdapterSpec.from_dict(d["adapter"]).to_dict()
        d["method_options"] = specs.method_options(d["objective"], d["method_options"]).to_dict()
        return d

    assert canonical(made) == canonical(gui)


def test_hooks_for_drops_and_the_library(window, tmp_path, base):
    tab = window.train_tab
    assert not tab.accepts_data_drops()  # pretraining: drops belong to the Data tab
    tab.use_as_base(base)
    assert tab.setup.current_method().key == "sft" and tab.setup.method_panel.base_model() == base
    assert tab.accepts_data_drops()
    assert tab.add_data_files([_jsonl(tmp_path / "a.jsonl", CHAT)]) == 1
    assert tab.setup.method_panel.data_files() == [str(tmp_path / "a.jsonl")]


def test_each_kind_of_data_keeps_its_own_files(window, tmp_path, base):
    """A chat file chosen for LoRA is not shown (red) under DPO or GRPO, and LoRA's command passes only its own."""
    tab = window.train_tab
    panel = tab.setup.method_panel
    chats = _jsonl(tmp_path / "chats.jsonl", CHAT)
    pairs = _jsonl(tmp_path / "pairs.jsonl", PREF)
    prompts = _jsonl(tmp_path / "prompts.jsonl", PROMPT)
    tab.setup.set_method("lora")
    panel.base_picker.set_path(base)
    panel.data_list.set_files([chats])
    tab.setup.set_method("dpo")
    assert panel.data_files() == [] and panel.data_list.count() == 0
    panel.data_list.add_paths([pairs])
    tab.setup.set_method("grpo")
    assert panel.data_files() == []
    panel.data_list.add_paths([prompts])
    assert panel.data_list.problems == {}
    tab.setup.set_method("qlora")  # the same records as LoRA: the same list
    assert panel.data_files() == [chats]
    tab.setup.set_method("lora")
    first = tab.cli_command().splitlines()[0]
    assert f"--data {shlex.quote(chats)}" in first and "pairs" not in first and "prompts" not in first
    assert tab.setup.build_config().data == [chats]
    tab.setup.set_method("dpo")
    assert tab.setup.build_config().data == [pairs]
    tab.setup.set_method("grpo")
    assert tab.setup.build_config().data == [prompts]


def test_epochs_follow_steps_and_batch_and_warn_of_many(window, qtbot, tmp_path, base):
    tab = window.train_tab
    setup = tab.setup
    setup.set_method("sft")
    setup.method_panel.base_picker.set_path(base)
    records = _jsonl(tmp_path / "twenty.jsonl", *[CHAT] * 20)
    setup.method_panel.data_list.set_files([records])
    setup.form.set_values({"steps": 200, "batch_size": 16})
    row = setup.epochs_row
    assert row.isVisibleTo(tab) and row.box.value() == 160.0  # 200 x 16 / 20
    assert row.warning.isVisibleTo(tab) and "160 epochs" in row.warning.text()
    row.box.setValue(2.0)  # typed: the steps that give 2 epochs
    row.box.valueChanged.emit(2.0)
    assert setup.form.spec().steps == 3 and not row.warning.isVisibleTo(tab)  # ceil(2 x 20 / 16)
    setup.set_method("selfplay")  # no data: no epochs
    assert not row.isVisibleTo(tab)
    _wait_idle(qtbot, window)  # the self-play method probed the sandbox


def test_the_demo_job_passes_its_runs_settings_to_the_recipe(monkeypatch, tmp_path):
    import desktop_app.ui.train_jobs as demo  # the window runs the demo through train_jobs.run_demo
    from desktop_app.engine.events import Controls, Finished
    from desktop_app.ui.train_jobs import demo_job

    calls = []

    def recipe(out, *, minutes, controls, **options):
        calls.append((minutes, options))
        yield Finished("completed")

    monkeypatch.setattr(demo, "run_demo", recipe)
    assert [e.reason for e in demo_job(tmp_path, Controls(), 2.0, {"time_budget_s": 55.0})] == ["completed"]
    list(demo_job(tmp_path, Controls(), 3.0))
    list(demo_job(tmp_path, Controls(), 4.0, None, "minimal"))
    assert calls == [(2.0, {"train_overrides": {"time_budget_s": 55.0}}), (3.0, {}), (4.0, {"tasks_from": "minimal"})]


def test_the_demo_shows_what_it_runs_in_place_of_the_form(window, qtbot, monkeypatch):
    """The CPU demo runs its own recipe: while it runs the column says what (seed corpus, pretraining, self-play),
    not the form's settings it does not use; the form comes back when it ends."""
    import desktop_app.ui.train_jobs as demo  # the window runs the demo through train_jobs.run_demo
    from desktop_app.engine.events import Finished

    asked = []

    def waiting_demo(out, *, minutes, controls, **options):
        asked.append(options)
        out.mkdir(parents=True)
        while not controls.stop.is_set():
            controls.stop.wait(0.05)
        yield Finished("stopped", message="stopped")

    monkeypatch.setattr(demo, "run_demo", waiting_demo)
    tab, setup = window.train_tab, window.train_tab.setup
    setup.set_method("selfplay")
    assert setup.method_panel.isVisibleTo(tab) and not setup.plan_group.isVisibleTo(tab)
    setup.method_panel.options_form().set_value("tasks_from", "minimal")  # the one field of the form it takes
    assert tab.start_selfplay_demo(minutes=10)
    plan = setup.plan_label.text()
    assert setup.plan_group.isVisibleTo(tab) and "seed corpus of 12,000" in plan and "up to 5.0 min" in plan
    assert "self-play (Absolute Zero)" in plan and "final and the best checkpoint" in plan
    qtbot.waitUntil(lambda: bool(asked), timeout=10000)
    assert asked == [{"tasks_from": "minimal"}]
    assert not setup.method_panel.isVisibleTo(tab) and not setup.hyper_group.isVisibleTo(tab)
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=10000)
    _wait_idle(qtbot, window)
    assert not setup.plan_group.isVisibleTo(tab) and setup.method_panel.isVisibleTo(tab)
    assert setup.hyper_group.isVisibleTo(tab) and setup.current_method().key == "selfplay"
    assert "Demo folder" in tab.run_view.status_label.text()  # the ended demo's status stays


def test_the_demo_plan_follows_its_settings():
    from desktop_app.engine.recipes.selfplay_demo import DemoSettings, demo_plan

    scratch = demo_plan(15.0)
    assert len(scratch) == 5 and scratch[0].startswith("1. writes a seed corpus") and "7.5 min" in scratch[1]
    based = demo_plan(15.0, DemoSettings(base="/models/chat", world="python", control=True))
    assert not any("seed corpus" in line for line in based) and "python's held-out tasks" in based[0]
    assert "measures the base model" in based[0] and "measures the pretrained model" in scratch[2]
    assert based[-1].endswith("each for self-play's wall time")
    minimal = demo_plan(15.0, DemoSettings(control=True, tasks_from="minimal"))
    assert "self-play's own seed (minimal" in minimal[-1] and "world's generated tasks" in minimal[-1]
