"""A sweep's trials tracked under their sweep (engine/train/tracking.py), read back by each library's own reader: MLflow
child runs of the sweep's parent run (which gets the best trial), a W&B group, TensorBoard hyperparameters that are
the settings each trial tried. Nothing leaves the machine; each library is skipped where it is not installed."""

from __future__ import annotations

import json
import socket

import pytest
from sweep_cases import base_config, new_sweep, run_to_end
from test_tracking import NoNetwork, wandb_records

from desktop_app.engine.sweep_folder import read_best, trial_dir
from desktop_app.engine.train import tracking

pytest.importorskip("optuna", reason="sweeps need the optional sweep extra: pip install -e .[sweep]")
TRIALS = 2


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    wanted = [name for name in ("tensorboard", "mlflow", "wandb") if tracking.installed(name)]
    if not wanted:  # the tracking extra is optional; bootstrap (and so CI) installs it, a lean install skips cleanly
        pytest.skip("no tracking library installed (pip install -e .[tracking])")
    root = tmp_path_factory.mktemp("tracked")
    config = base_config(root, steps=8, trackers=wanted)
    guard = NoNetwork()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.setattr(socket.socket, "connect", lambda sock, address: guard.connect(sock, address))
        events = run_to_end(new_sweep(config, root / "lr-sweep", vary=["lr=1e-3..3e-2:log"], trials=TRIALS,
                                      pruner="none"))
    assert events[-1].reason == "completed" and not guard.attempts
    return root / "lr-sweep", wanted


def test_mlflow_holds_one_parent_run_with_each_trial_as_its_child(tracked):
    folder, wanted = tracked
    if "mlflow" not in wanted:  # each library of the optional tracking extra can be left out on its own
        pytest.skip("mlflow is not installed")
    from mlflow import MlflowClient

    parent = json.loads((folder / tracking.TRACKING_FILE).read_text())["mlflow"]
    assert parent["tracking_uri"] == (folder / "mlruns").resolve().as_uri()
    client = MlflowClient(tracking_uri=parent["tracking_uri"])
    experiment = client.get_experiment_by_name(tracking.PROJECT)
    runs = {r.info.run_id: r for r in client.search_runs([experiment.experiment_id])}
    children = [r for r in runs.values() if r.data.tags.get("mlflow.parentRunId") == parent["run_id"]]
    assert len(runs) == TRIALS + 1 and len(children) == TRIALS
    assert sorted(r.data.tags["azr.trial"] for r in children) == [str(n) for n in range(TRIALS)]
    assert {r.data.tags["azr.sweep"] for r in children} == {folder.name}
    best = read_best(folder)
    top = client.get_run(parent["run_id"])
    assert top.info.status == "FINISHED" and top.data.tags["azr.best_trial"] == str(best["number"])
    assert top.data.metrics["best/val_loss"] == pytest.approx(best["value"])
    assert float(top.data.tags["best.train.lr"]) == best["params"]["train.lr"]
    for child in children:  # each child holds its own run's figures
        history = client.get_metric_history(child.info.run_id, "eval/val_loss")
        assert [m.step for m in history] == [4, 8]


def test_wandb_puts_every_trial_in_the_sweeps_group(tracked):
    folder, wanted = tracked
    if "wandb" not in wanted:  # each library of the optional tracking extra can be left out on its own
        pytest.skip("wandb is not installed")
    for number in range(TRIALS):
        files = list(trial_dir(folder, number).glob("wandb/offline-run-*/run-*.wandb"))
        runs = [r.run for f in files for r in wandb_records(f) if r.HasField("run")]
        assert runs and {(r.run_group, r.job_type) for r in runs} == {(folder.name, "trial")}


def test_tensorboard_shows_the_settings_each_trial_tried(tracked):
    folder, wanted = tracked
    if "tensorboard" not in wanted:  # each library of the optional tracking extra can be left out on its own
        pytest.skip("tensorboard is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    for number in range(TRIALS):
        run = trial_dir(folder, number)
        reader = EventAccumulator(str(run))
        reader.Reload()
        content = reader.PluginTagToContent("hparams")
        session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        hparams = session.session_start_info.hparams
        tried = json.loads((run / "sweep_trial.json").read_text())["params"]["train.lr"]
        assert hparams["train.lr"].number_value == pytest.approx(tried)
        assert hparams["trial"].number_value == number and hparams["sweep"].string_value == folder.name
