"""Bad input to a sweep is one clear line (UserError; the CLI: one line on stderr, exit 2): an empty range, a setting
the method does not have, a metric it never reports, a database that is damaged or read-only, a sweep another process
runs, Optuna missing. Nothing here trains."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
from sweep_cases import base_config, new_sweep, resume, run_to_end

from desktop_app.cli import main
from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep import study as studies
from desktop_app.engine.sweep.goal import goal_of
from desktop_app.engine.sweep.runner import ResumeSweep, open_sweep
from desktop_app.engine.sweep.space import apply, parse_space, parse_vary, resolve, suggested
from desktop_app.engine.sweep.spec import SweepSpec
from desktop_app.engine.sweep_folder import STUDY_FILE, SWEEP_FILE, write_json

optuna = pytest.importorskip("optuna", reason="sweeps need the optional sweep extra: pip install -e .[sweep]")


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return base_config(tmp_path_factory.mktemp("errors"))


def lora_config() -> RunConfig:
    return RunConfig(objective="sft", base_model="some-base", data=["chats.jsonl"], adapter={"kind": "lora"},
                     train={"eval_every": 10})


@pytest.mark.parametrize("spec, words", [
    ("lr=1e-3..1e-5", "the range 0.001..1e-05 is empty"),
    ("warmup_steps=5..5", "the range 5..5 is empty"),
    ("lora_rank=8,16,32", "lora_rank is not a setting of a Pretraining run: it trains no adapters"),
    ("beta=0.05..0.5", "beta is not a setting of a Pretraining run (it is an option of dpo)"),
    ("lrr=1e-4..1e-3", "unknown setting 'lrr' (did you mean lr?)"),
    ("eval_every=10,20", "eval_every cannot vary: it changes how trials are run or measured"),
    ("data=a,b", "unknown setting 'data'"),
    ("lr=0..1e-3:log", "a log scale needs a range above 0"),
    ("lr=1e-5..1e-3:ln", "after the range comes :log"),
    ("schedule=cosine,square", "schedule is one of cosine, linear, constant, not 'square'"),
    ("schedule=0..1", "schedule takes values to choose from"),
    ("batch_size=4..8.5", "batch_size is a whole number, not 8.5"),
    ("lr=abc..1", "'abc' is not a number"),
    ("lr", "write NAME=LOW..HIGH"),
    ("lr=1e-3", "give at least two values"),
    ("lr=1e-3,,2e-3", "an empty value between commas"),
    ("min_lr_ratio=0..2", "min_lr_ratio must be between 0 and 1, not 2"),
])
def test_a_bad_vary_spec_is_one_line(config, spec, words):
    with pytest.raises(UserError) as caught:
        parse_vary(spec, config)
    assert words in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_each_method_offers_its_own_settings(config):
    lora = lora_config()
    assert resolve("lora_rank", lora).path == "adapter.rank" and resolve("adapter.alpha", lora).name == "lora_alpha"
    assert parse_vary("lora_rank=8,16,32", lora).choices == (8, 16, 32)
    with pytest.raises(UserError, match="its model is the base model's"):
        resolve("dropout", lora)
    assert resolve("dropout", config).path == "model.dropout"
    grpo = RunConfig(objective="grpo", base_model="b", data=["p.jsonl"])
    assert resolve("kl_coef", grpo).path == resolve("kl_weight", grpo).path == "method_options.kl_coef"
    assert suggested(lora)[0] == "lr=2e-05..0.002:log" and "lora_rank=4,8,16,32" in suggested(lora)
    assert suggested(config)[0] == "lr=0.0001..0.01:log"  # around each method's own default learning rate
    for spec in suggested(lora) + suggested(config):  # every suggestion parses for its method
        parse_vary(spec, lora if spec.startswith("lora") else config)
    dims = parse_space(["lr=1e-4..1e-2:log", "lora_rank=8,16"], lora)
    assert apply(lora.to_dict(), {d.path: d.grid()[-1] for d in dims})["adapter"] == {"kind": "lora", "rank": 16}
    with pytest.raises(UserError, match="vary one setting"):
        parse_space(["lr=1e-4..1e-2", "train.lr=1e-3,1e-2"], config)


def test_a_metric_the_method_never_reports_is_one_line(config):
    with pytest.raises(UserError, match="a Pretraining run never reports it; it reports val_loss, val_ppl, val_bpb"):
        goal_of(config, "eval_reward")
    with pytest.raises(UserError, match="val_loss is better lower, so maximize would look for the worst"):
        goal_of(config, "val_loss", "maximize")
    never = RunConfig.from_dict({**config.to_dict(), "train": {**config.train, "eval_every": 0}})
    with pytest.raises(UserError, match="never evaluates"):
        goal_of(never, "val_loss")
    assert goal_of(lora_config().replace(objective="dpo", adapter={}), "val_preference_accuracy").direction == \
        "maximize"


def test_a_base_run_without_a_validation_set_is_refused(tmp_path, config):
    dataset = tmp_path / "ds"
    shutil.copytree(config.dataset, dataset)
    manifest = json.loads((dataset / "manifest.json").read_text())
    manifest["splits"]["val"]["tokens"] = 0  # nothing held out: no evaluation can measure a trial
    (dataset / "manifest.json").write_text(json.dumps(manifest))
    unmeasured = config.replace(dataset=str(dataset))
    with pytest.raises(UserError, match="no trial could report val_loss: No validation curve"):
        new_sweep(unmeasured, tmp_path / "sw", vary=["lr=1e-4..1e-2"])
    assert not (tmp_path / "sw").exists()


def _sweep_folder(tmp_path, config):
    """A sweep folder as a run writes it, with a real study database (no trial run)."""
    folder = tmp_path / "sweep"
    spec = SweepSpec(base=config.to_dict(), vary=["lr=1e-4..1e-2:log"], trials=2)
    write_json(folder / SWEEP_FILE, spec.to_dict())
    studies.open_study(folder, spec, parse_space(spec.vary, config), "minimize")
    return folder


def _one_line_from_cli(capsys, *argv: str) -> str:
    code = main(["sweep", *map(str, argv)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


def test_a_damaged_database_is_one_line(tmp_path, config, capsys):
    folder = _sweep_folder(tmp_path, config)
    db = folder / STUDY_FILE
    shutil.copy(db, tmp_path / "good.db")
    db.write_bytes(b"this is no database" * 100)
    assert "is damaged (not an SQLite file): it cannot be resumed" in _one_line_from_cli(capsys, "--resume", folder)
    data = bytearray((tmp_path / "good.db").read_bytes())  # SQLite's header kept, its pages overwritten
    data[100:] = bytes(len(data) - 100)
    db.write_bytes(bytes(data))
    err = _one_line_from_cli(capsys, "--resume", folder)
    assert "is damaged (" in err and "start a new sweep" in err, err
    db.unlink()
    assert "is missing, and with it the sweep's history" in _one_line_from_cli(capsys, "--resume", folder)


def test_a_read_only_database_is_one_line(tmp_path, config, capsys, monkeypatch):
    folder = _sweep_folder(tmp_path, config)
    if os.geteuid() != 0:  # a normal user: the file's own permissions
        (folder / STUDY_FILE).chmod(0o444)
    else:  # root writes anywhere: SQLite opens the file read-only, as it does a read-only file
        monkeypatch.setattr(studies, "storage_url", lambda db: f"sqlite:///file:{db.resolve()}?mode=ro&uri=true")
    err = _one_line_from_cli(capsys, "--resume", folder)
    assert err.endswith(f"the sweep's database {folder / STUDY_FILE} is read-only: copy the sweep folder somewhere "
                        "you can write and resume it there"), err


def test_a_sweep_another_process_runs_is_refused(tmp_path, config):
    folder = _sweep_folder(tmp_path, config)
    with studies.sweep_lock(folder), pytest.raises(UserError, match="is running in another process"):
        resume(folder)


def test_the_cli_says_a_wrong_setting_or_metric_in_one_line(tmp_path, config, capsys):
    config.save(tmp_path / "run.json")
    run = ["--config", tmp_path / "run.json", "--out", tmp_path / "sw"]
    assert "lora_rank is not a setting" in _one_line_from_cli(capsys, *run, "--vary", "lora_rank=8,16")
    assert "never reports it" in _one_line_from_cli(capsys, *run, "--vary", "lr=1e-4..1e-2", "--metric", "reward")
    assert "--parallel takes" in _one_line_from_cli(capsys, *run, "--parallel", "many")
    assert "cannot change a sweep being resumed" in _one_line_from_cli(capsys, "--resume", tmp_path, "--vary", "lr=1,2")
    assert "is not a sweep folder" in _one_line_from_cli(capsys, "--resume", tmp_path)
    assert not (tmp_path / "sw").exists()  # nothing written for a sweep that cannot start
    assert main(["sweep", "--config", str(tmp_path / "run.json"), "--suggest"]) == 0
    assert "--vary lr=0.0001..0.01:log" in capsys.readouterr().out


def test_without_optuna_a_sweep_says_how_to_get_it(tmp_path, config, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(UserError, match=r"need Optuna, which is not installed here: pip install .*\[sweep\]"):
        open_sweep(ResumeSweep(tmp_path))


def test_a_grid_sweep_has_as_many_trials_as_combinations(tmp_path, config):
    grid = new_sweep(config, tmp_path / "sw", vary=["lr=1e-4..1e-2:log", "batch_size=4,8"], trials=50, sampler="grid")
    assert grid.spec.trials == 10 and "the grid holds 10 combinations" in grid.notes[-1]
    assert grid.dims[0].grid() == (0.0001, 0.000316228, 0.001, 0.00316228, 0.01)
    assert parse_vary("warmup_steps=0..3", config).grid() == (0, 1, 2, 3)  # whole numbers, each once
    spec = SweepSpec(base=config.to_dict(), vary=["lr=1e-4..1e-2"])
    pruners = {name: type(studies.make_pruner(optuna, spec.replace(pruner=name), config.train_spec())).__name__
               for name in ("median", "hyperband", "halving", "none")}
    assert pruners == {"median": "MedianPruner", "hyperband": "HyperbandPruner", "halving": "SuccessiveHalvingPruner",
                       "none": "NopPruner"}


def test_a_sweep_whose_trials_cannot_train_stops_after_three_with_their_reason(tmp_path, config):
    odd = config.replace(train={**config.train, "micro_batch_size": 2})  # an odd batch cannot be split in twos
    events = run_to_end(new_sweep(odd, tmp_path / "sw", vary=["batch_size=3,5,7"], trials=6, sampler="grid"))
    ends = [e for e in events if e.type == "trial_end"]
    assert [e.state for e in ends] == ["failed"] * 3 and "is not a multiple of micro_batch_size 2" in ends[0].message
    finished = events[-1]
    assert finished.reason == "failed" and finished.message.startswith("3 trial(s) failed, none completed: ")
    assert "is not a multiple of micro_batch_size 2" in finished.message and finished.result["best"] is None
