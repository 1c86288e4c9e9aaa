"""Run tracking (engine/train/tracking.py): every scalar of metrics.jsonl read back by each library's own reader, a
resumed run continuing the same tracked run, nothing sent over the network, and a run that never fails because of a
tracker. Each library's tests skip cleanly where it is not installed (the optional tracking extra)."""

from __future__ import annotations

import argparse
import json
import socket
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from train_helpers import PoisonedObjective, make_dataset, tiny_config

from desktop_app.engine.events import Log
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.specs import SpecError, TrainSpec
from desktop_app.engine.train import tracking
from desktop_app.engine.train.loop import train

LIBRARIES = ["tensorboard", "mlflow", "wandb"]


def expected_scalars(run: Path) -> dict[str, dict[int, float]]:
    """Every scalar the run logged, from its metrics.jsonl: {"train/loss": {step: value}, "eval/val_loss": ...}."""
    out: dict[str, dict[int, float]] = {}
    for record in read_metrics(run):
        if record.get("type") in ("step", "eval"):
            for tag, value in tracking.scalars(record).items():
                out.setdefault(tag, {})[int(record["step"])] = value
    return out


class NoNetwork:
    """Refuses (and records) every connection that leaves this machine while the runs train."""

    def __init__(self) -> None:
        self.attempts: list[object] = []
        self.real = socket.socket.connect

    def connect(self, sock: socket.socket, address: object) -> object:
        host = address[0] if isinstance(address, tuple) else None
        if sock.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
            self.attempts.append(address)
            raise OSError("the tracking tests allow no network")
        return self.real(sock, address)


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """A tiny run tracked by every installed library: 4 steps, then resumed to 8 (same folder, same tracked runs)."""
    wanted = [name for name in LIBRARIES if tracking.installed(name)]
    if not wanted:
        pytest.skip("no tracking library installed (pip install -e .[tracking])")
    base = tmp_path_factory.mktemp("tracked")
    dataset, run = make_dataset(base / "ds"), base / "run"
    guard = NoNetwork()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mp.delenv("RANK", raising=False)
        mp.setattr(socket.socket, "connect", lambda sock, address: guard.connect(sock, address))
        first = list(train(tiny_config(dataset, steps=4, eval_every=2, save_every=2, sample_tokens=3,
                                       trackers=wanted), run))
        ids_before = json.loads((run / tracking.TRACKING_FILE).read_text())
        more = tiny_config(dataset, steps=8, eval_every=2, save_every=2, sample_tokens=3, trackers=wanted)
        second = list(train(more, run, resume=True, accept_config_change=True))
    return {"run": run, "first": first, "second": second, "ids": ids_before, "guard": guard, "wanted": wanted}


def test_the_runs_complete_untouched_by_the_network(resumed_run):
    for events in (resumed_run["first"], resumed_run["second"]):
        assert events[-1].type == "finished" and events[-1].reason == "completed"
        assert not [e for e in events if isinstance(e, Log) and e.level == "warning" and "track" in e.message]
    notes = [e.message for e in resumed_run["first"] if isinstance(e, Log) and e.message.startswith("tracking in")]
    assert len(notes) == len(resumed_run["wanted"])
    assert resumed_run["guard"].attempts == []
    with socket.socket() as outside, pytest.raises(OSError, match="no network"):  # the guard does refuse
        resumed_run["guard"].connect(outside, ("192.0.2.1", 443))
    steps = sorted(int(r["step"]) for r in read_metrics(resumed_run["run"]) if r.get("type") == "step")
    assert steps == list(range(1, 9))  # the resume continued at step 5


def test_tensorboard_reads_back_every_scalar(resumed_run):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = resumed_run["run"]
    assert len(list(run.glob("events.out.tfevents.*"))) == 2  # one logdir, one file per session
    reader = EventAccumulator(str(run), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    expected = expected_scalars(run)
    assert set(expected) <= set(reader.Tags()["scalars"]) and "train/loss" in expected and "eval/val_loss" in expected
    for tag, by_step in expected.items():
        got = {e.step: e.value for e in reader.Scalars(tag)}
        assert sorted(got) == sorted(by_step), tag
        for step, value in by_step.items():  # event files keep scalars as float32
            assert got[step] == pytest.approx(float(np.float32(value)), rel=0, abs=0, nan_ok=True), (tag, step)
    assert "_hparams_/experiment" in reader.PluginTagToContent("hparams")  # the run config as hyperparameters
    samples = reader.Tensors("samples/text_summary")
    assert sorted({s.step for s in samples}) == [2, 4, 6, 8]


def test_tensorboard_purges_what_a_resume_rewrites(tmp_path, monkeypatch):
    """A run that stops after its checkpoint and resumes from it writes those steps again: TensorBoard shows each once,
    with the values metrics.jsonl ends with."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    dataset, run = make_dataset(tmp_path / "ds"), tmp_path / "run"
    config = tiny_config(dataset, steps=6, save_every=3, trackers=["tensorboard"])
    events = train(config, run)
    for event in events:  # leave after step 5: the checkpoint of step 3 is the newest
        if event.type == "step" and event.step == 5:
            events.close()
    list(train(config, run, resume=True))
    reader = EventAccumulator(str(run), size_guidance={"scalars": 0})
    reader.Reload()
    got = [(e.step, e.value) for e in reader.Scalars("train/loss")]
    want = expected_scalars(run)["train/loss"]
    assert [s for s, _ in got] == list(range(1, 7))
    assert all(v == float(np.float32(want[s])) for s, v in got)


def test_mlflow_reads_back_every_scalar_in_one_run(resumed_run):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    run, ids = resumed_run["run"], resumed_run["ids"]["mlflow"]
    now = json.loads((run / tracking.TRACKING_FILE).read_text())["mlflow"]
    assert now == ids  # the resumed run went on in the same MLflow run
    assert ids["tracking_uri"] == (run / "mlruns").resolve().as_uri()
    client = MlflowClient(tracking_uri=ids["tracking_uri"])
    experiment = client.get_experiment_by_name(tracking.PROJECT)
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [ids["run_id"]]
    recorded = client.get_run(ids["run_id"])
    assert recorded.info.status == "FINISHED"
    assert float(recorded.data.params["train.lr"]) == TrainSpec.from_dict(
        json.loads((run / "run.json").read_text())["train"]).lr
    for tag, by_step in expected_scalars(run).items():
        history = {m.step: m.value for m in client.get_metric_history(ids["run_id"], tag)}
        assert history == pytest.approx(by_step, rel=0, abs=0, nan_ok=True), tag
    assert len(client.list_artifacts(ids["run_id"], "samples")) == 4


def wandb_records(path: Path):
    """The records of a W&B offline run file, decoded by wandb's own protobuf messages. wandb 0.31 reads these files
    only inside its Go service (its Python DataStore is gone), so the record framing is read here: the header
    (':W&B', 0xBEE1, version 0), then LevelDB log records in 32 KiB blocks (crc32, length, type)."""
    from wandb.proto.wandb_internal_pb2 import Record

    data = path.read_bytes()
    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0)
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (kind == 0 and length == 0):  # the rest of a block is padding
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # full, or the last piece of one
            yield Record.FromString(pending)


def test_wandb_offline_files_hold_every_scalar_of_one_run(resumed_run):
    pytest.importorskip("wandb")
    run, run_id = resumed_run["run"], resumed_run["ids"]["wandb"]["run_id"]
    files = sorted(run.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2 and all(f.name == f"run-{run_id}.wandb" for f in files)  # one W&B run, two sessions
    got: dict[str, dict[int, float]] = {}
    for file in files:
        for record in wandb_records(file):
            if record.HasField("run"):
                assert record.run.run_id == run_id
            if record.HasField("history"):
                for item in record.history.item:
                    key = item.key or "/".join(item.nested_key)
                    if not key.startswith("_"):
                        got.setdefault(key, {})[record.history.step.num] = float(json.loads(item.value_json))
    expected = expected_scalars(run)
    assert got.keys() == expected.keys()
    for tag, by_step in expected.items():
        assert got[tag] == pytest.approx(by_step, rel=0, abs=0, nan_ok=True), tag


def wandb_history(file: Path) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """A W&B offline run file's run id and, per scalar, every (step, value) it logged in order."""
    run_id, got = "", {}
    for record in wandb_records(file):
        if record.HasField("run"):
            run_id = record.run.run_id
        if record.HasField("history"):
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    got.setdefault(key, []).append((record.history.step.num, float(json.loads(item.value_json))))
    return run_id, got


@pytest.mark.parametrize("back", ["killed then resumed", "rolled back"])
def test_going_back_before_steps_already_sent_continues_in_a_new_tracked_run(tmp_path, monkeypatch, back):
    """Killed after step 5 with the checkpoint of step 3 (then resumed), or a non-finite step 5 rolled back to that
    checkpoint: MLflow and W&B had step 4 already and cannot drop it, so the run goes on in a new tracked run that
    holds every step once, with metrics.jsonl's values; the abandoned run says which replaced it."""
    wanted = [name for name in ("mlflow", "wandb") if tracking.installed(name)]
    if not wanted:
        pytest.skip("neither MLflow nor W&B is installed (pip install -e .[tracking])")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    dataset, run = make_dataset(tmp_path / "ds"), tmp_path / "run"
    config = tiny_config(dataset, steps=6, save_every=3, eval_every=3, trackers=wanted, nonfinite_policy="rollback")
    before: dict = {}
    events = train(config, run, objective=PoisonedObjective({5}) if back == "rolled back" else None)
    seen = []
    for event in events:
        seen.append(event)
        if event.type == "step" and event.step == 2:
            before = json.loads((run / tracking.TRACKING_FILE).read_text())
        if back == "killed then resumed" and event.type == "step" and event.step == 5:
            events.close()  # the checkpoint of step 3 is the newest
    if back == "killed then resumed":
        seen = list(train(config, run, resume=True))
    assert seen[-1].reason == "completed"
    after = json.loads((run / tracking.TRACKING_FILE).read_text())
    expected = expected_scalars(run)
    assert sorted(expected["train/loss"]) == list(range(1, 7)) and "eval/val_loss" in expected
    if "mlflow" in wanted:
        _assert_mlflow_continued(before["mlflow"]["run_id"], after["mlflow"], expected)
    if "wandb" in wanted:
        old, new = before["wandb"]["run_id"], after["wandb"]["run_id"]
        files = {run_id: got for run_id, got in map(wandb_history, run.glob("wandb/offline-run-*/run-*.wandb"))}
        assert new != old and set(files) == {old, new}
        for tag, by_step in expected.items():
            history = files[new][tag]
            assert sorted(s for s, _ in history) == sorted(by_step), tag  # each step once
            assert dict(history) == pytest.approx(by_step, rel=0, abs=0, nan_ok=True), tag
    said = [e.message for e in seen if isinstance(e, Log) and "tracking goes on in" in e.message]
    assert len(said) == len(wanted) and all("had steps after step 3 already" in m for m in said)
    assert all(after[name]["run_id"] in m for name, m in zip(wanted, said, strict=True))
    assert not [e for e in seen if isinstance(e, Log) and "stopped tracking" in e.message]


def _assert_mlflow_continued(old: str, ids: dict, expected: dict) -> None:
    from mlflow import MlflowClient

    new = ids["run_id"]
    assert new != old
    client = MlflowClient(tracking_uri=ids["tracking_uri"])
    for tag, by_step in expected.items():
        history = [(m.step, m.value) for m in client.get_metric_history(new, tag)]
        assert sorted(s for s, _ in history) == sorted(by_step), tag  # each step once
        assert dict(history) == pytest.approx(by_step, rel=0, abs=0, nan_ok=True), tag
    replaced, continued = client.get_run(old), client.get_run(new)
    assert replaced.info.status == "KILLED" and replaced.data.tags["azr.superseded_by"] == new
    assert continued.info.status == "FINISHED" and continued.info.run_name == "run (from step 3)"
    assert continued.data.tags["azr.resumed_from_run"] == old and continued.data.tags["azr.resumed_at_step"] == "3"


# --- a tracker never fails a run ----------------------------------------------------------------------------------

def test_a_tracker_that_breaks_is_dropped_with_one_warning(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    calls: list[int] = []

    def broken(self, step, values):
        calls.append(step)
        if step == 3:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(tracking.TensorBoardTracker, "log_scalars", broken)
    dataset, run = make_dataset(tmp_path / "ds"), tmp_path / "run"
    events = list(train(tiny_config(dataset, steps=6, trackers=["tensorboard"]), run))
    assert events[-1].type == "finished" and events[-1].reason == "completed"
    assert calls == [1, 2, 3]  # dropped at its first failure
    records = read_metrics(run)
    warnings = [r["message"] for r in records if r.get("type") == "log" and "stopped tracking" in r["message"]]
    assert len(warnings) == 1 and "TensorBoard" in warnings[0] and "No space left" in warnings[0]
    assert [r["step"] for r in records if r.get("type") == "step"] == [1, 2, 3, 4, 5, 6]  # nothing lost
    said = [i for i, e in enumerate(events) if e.type == "log" and "stopped tracking" in e.message]
    steps = [e.step for e in events if e.type == "step"]
    assert len(said) == 1 and events[said[0]].level == "warning"  # said live, once, while the run goes on
    assert [e.step for e in events[:said[0]] if e.type == "step"] == steps[:3]


def test_a_missing_library_is_a_warning_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking, "installed", lambda name: False)
    dataset, run = make_dataset(tmp_path / "ds"), tmp_path / "run"
    events = list(train(tiny_config(dataset, steps=2, trackers=["tensorboard", "mlflow"]), run))
    assert events[-1].reason == "completed"
    notes = {e.level: e.message for e in events if isinstance(e, Log) and "not installed" in e.message}
    assert "MLflow is not installed" in notes["warning"] and "pip install" in notes["warning"]
    assert "TensorBoard is not installed" in notes["info"]  # on by default where installed: not a warning
    assert not list(run.glob("events.out.tfevents.*")) and not (run / "mlruns").exists()


def test_a_library_that_cannot_start_leaves_the_run_running(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("tracking server unreachable")

    monkeypatch.setattr(tracking, "installed", lambda name: True)
    monkeypatch.setattr(tracking, "open_tracker", refuse)
    dataset, run = make_dataset(tmp_path / "ds"), tmp_path / "run"
    events = list(train(tiny_config(dataset, steps=2, trackers=["mlflow"]), run))
    assert events[-1].reason == "completed"
    assert any(isinstance(e, Log) and e.level == "warning" and "cannot track this run in MLflow" in e.message
               and "unreachable" in e.message for e in events)


def test_only_process_zero_tracks(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    config = tiny_config(make_dataset(tmp_path / "ds"), trackers=["tensorboard"])
    assert tracking.open_trackers(tmp_path / "run", config, None) == ([], [])


# --- the setting: spec, run.json, command line --------------------------------------------------------------------

def test_the_setting_defaults_to_tensorboard_and_is_saved_in_run_json(tmp_path):
    assert TrainSpec().trackers == ["tensorboard"]
    config = tiny_config(make_dataset(tmp_path / "ds"), trackers=["mlflow", "wandb"])
    config.save(tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text())["train"]["trackers"] == ["mlflow", "wandb"]


@pytest.mark.parametrize("bad", [["tensorbored"], ["mlflow", "mlflow"], "tensorboard", [1]])
def test_bad_trackers_in_a_config_are_named(bad):
    problems = TrainSpec(trackers=bad).validate()
    assert problems == [f"trackers must be distinct names among tensorboard, mlflow, wandb, got {bad!r}"]


def test_track_flag_reads_lists_and_none():
    assert tracking.parse_trackers("tensorboard, MLflow") == ["tensorboard", "mlflow"]
    assert tracking.parse_trackers("none") == [] and tracking.parse_trackers("") == []
    with pytest.raises(SpecError, match=r"--track takes tensorboard, mlflow, wandb .* or none, got 'tensorbord'"):
        tracking.parse_trackers("tensorbord")


def test_track_flag_through_the_train_verb_and_back(tmp_path, capsys):
    from desktop_app.cli import train as train_cli
    from desktop_app.engine.methods import METHOD_BY_KEY
    from desktop_app.engine.run_commands import method_command
    from desktop_app.engine.specs import RunConfig

    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    args = parser.parse_args(["--config", "run.json", "--out", "o", "--track", "mlflow,wandb"])
    assert train_cli._overrides(args) == {"trackers": ["mlflow", "wandb"]}
    assert parser.parse_args(["--config", "r", "--track", "none"]).trackers == []
    with pytest.raises(SystemExit):
        parser.parse_args(["--config", "r", "--track", "neptune"])
    assert "--track takes tensorboard, mlflow, wandb" in capsys.readouterr().err
    # Show CLI command: a config that tracks nowhere gives --track none, which reads back as []
    config = RunConfig(objective="sft", base_model="/b", data=["/d.jsonl"], train=TrainSpec(trackers=[]).to_dict())
    command, _ = method_command(config, METHOD_BY_KEY["sft"], "python -m desktop_app")
    assert "--track none" in command
    default, _ = method_command(config.replace(train=TrainSpec().to_dict()), METHOD_BY_KEY["sft"], "x")
    assert "--track" not in default


def test_flat_config_gives_hyperparameters():
    flat = tracking.flat_config({"train": {"lr": 0.001, "sample_prompts": ["a"], "compile": False}, "seed": 3,
                                 "model": {}, "base_model": ""})
    assert flat == {"train.lr": 0.001, "train.sample_prompts": '["a"]', "train.compile": False, "seed": 3,
                    "base_model": ""}
