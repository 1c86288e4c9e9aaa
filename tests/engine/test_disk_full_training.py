"""A full disk (or another fault the person can fix) while a run saves: the run pauses instead of ending, the last
committed checkpoint stays intact, and after a retry (or a move elsewhere) it goes on bit-exactly as a run that
never met the fault; stop ends it with the previous checkpoint intact, and resume continues from there."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch as st
import torch
from disk_faults import FullDisk
from train_helpers import final_weights, make_dataset, metrics_losses, step_losses, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.events import Controls, event_from_dict
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.loop import train
from desktop_app.engine.train.saving import move_target


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


@pytest.fixture(scope="module")
def reference(dataset, tmp_path_factory) -> tuple[Path, list[Any]]:
    """The run that never meets a fault."""
    run = tmp_path_factory.mktemp("ref") / "run"
    return run, list(train(_config(dataset), run))


def _config(dataset: Path):
    return tiny_config(dataset, steps=6, save_every=2)


def _assert_same_as_reference(run: Path, events: list[Any], reference: tuple[Path, list[Any]]) -> None:
    ref_dir, ref_events = reference
    losses, want_losses = step_losses(events), step_losses(ref_events)
    assert losses and losses == {step: want_losses[step] for step in losses}
    got, want = final_weights(run), final_weights(ref_dir)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
    opt_got = st.load_file(str(rf.list_committed(run)[-1] / "optimizer.safetensors"))
    opt_want = st.load_file(str(rf.list_committed(ref_dir)[-1] / "optimizer.safetensors"))
    assert all(torch.equal(opt_got[k], opt_want[k]) for k in opt_want)


def _until_blocked(gen) -> tuple[list[Any], Any]:
    seen = []
    for event in gen:
        seen.append(event)
        if event.type == "save_blocked":
            return seen, event
    raise AssertionError(f"the run never paused: {seen[-1]}")


def _finish(gen) -> list[Any]:
    """The rest of the run, which must not pause again (else the test would wait forever)."""
    out = []
    for event in gen:
        assert event.type != "save_blocked", event.message
        out.append(event)
    return out


def _past_first_checkpoint(dataset: Path, run: Path, controls: Controls, switch: dict[str, bool],
                           key: str = "on") -> tuple[Any, list[Any]]:
    """A run trained up to its first checkpoint, then `switch[key]` turned on (the fault begins): the generator
    and the events so far."""
    gen = train(_config(dataset), run, controls)
    events = []
    for event in gen:
        events.append(event)
        if event.type == "checkpoint":
            switch[key] = True
            break
    return gen, events


def _only_step_2_intact(run: Path) -> None:
    assert [rf.step_of(p) for p in rf.list_committed(run)] == [2]
    rf.verify_checkpoint(rf.list_committed(run)[0])
    assert not [p for p in rf.checkpoints_dir(run).iterdir() if p.name.startswith(".")]  # no partial checkpoint


def test_full_disk_pauses_the_run_and_retry_continues_bit_exactly(dataset, reference, tmp_path, monkeypatch):
    disk = FullDisk(monkeypatch, from_step=4)
    controls = Controls(answers_faults=True)
    gen = train(_config(dataset), tmp_path / "run", controls)
    events, blocked = _until_blocked(gen)
    assert blocked.step == 4 and blocked.folder == str(rf.checkpoints_dir(tmp_path / "run"))
    assert blocked.message.startswith("saving the step 4 checkpoint failed: the disk is full")
    assert "free some space" in blocked.message and "bug" not in blocked.message and blocked.needed > 0
    assert blocked.free > 0
    _only_step_2_intact(tmp_path / "run")
    # a retry while the disk is still full pauses again, with nothing lost
    controls.retry.set()
    more, again = _until_blocked(gen)
    assert again.step == 4 and not [e for e in more if e.type == "finished"]
    _only_step_2_intact(tmp_path / "run")
    disk.free()
    controls.retry.set()
    events += more + _finish(gen)
    assert events[-1].type == "finished" and events[-1].reason == "completed" and events[-1].step == 6
    assert [rf.step_of(p) for p in rf.list_committed(tmp_path / "run")] == [2, 4, 6]
    _assert_same_as_reference(tmp_path / "run", events, reference)
    assert metrics_losses(tmp_path / "run") == step_losses(reference[1])


def test_stop_while_blocked_ends_with_the_previous_checkpoint_and_resume_is_exact(dataset, reference, tmp_path,
                                                                                   monkeypatch):
    disk = FullDisk(monkeypatch, from_step=4)
    controls = Controls(answers_faults=True)
    gen = train(_config(dataset), tmp_path / "run", controls)
    _until_blocked(gen)
    controls.stop.set()
    rest = _finish(gen)
    final = rest[-1]
    assert final.type == "finished" and final.reason == "stopped" and final.step == 4
    assert "step-00000002" in final.message and "without saving" in final.message and "bug" not in final.message
    _only_step_2_intact(tmp_path / "run")
    disk.free()
    resumed = list(train(_config(dataset), tmp_path / "run", resume=True))
    assert resumed[-1].reason == "completed"
    _assert_same_as_reference(tmp_path / "run", resumed, reference)
    assert metrics_losses(tmp_path / "run") == step_losses(reference[1])


def test_save_elsewhere_moves_the_run_and_it_goes_on_there_bit_exactly(dataset, reference, tmp_path, monkeypatch):
    real = st.serialize_file
    FullDisk(monkeypatch, from_step=4)  # the first disk stays full
    first_disk = st.serialize_file
    other = tmp_path / "other disk"
    other.mkdir()
    monkeypatch.setattr(st, "serialize_file", lambda t, f, metadata=None: (real if str(other) in str(f) else
                                                                           first_disk)(t, f, metadata=metadata))
    controls = Controls(answers_faults=True)
    gen = train(_config(dataset), tmp_path / "run", controls)
    events, _ = _until_blocked(gen)
    controls.save_elsewhere(str(other))
    events += _finish(gen)
    assert events[-1].reason == "completed"
    moved = next(e for e in events if e.type == "run_folder" and e.path == str(other))
    assert moved.resumed
    note = next(e.message for e in events if e.type == "log" and "moved to" in e.message)
    assert str(other) in note and "keeps its checkpoints up to step 2" in note
    _only_step_2_intact(tmp_path / "run")
    assert [rf.step_of(p) for p in rf.list_committed(other)] == [4, 6]
    assert (other / rf.RUN_FILE).is_file() and events[-1].result["run_dir"] == str(other)
    _assert_same_as_reference(other, events, reference)
    assert metrics_losses(other) == step_losses(reference[1])  # the curve before the move came along


def test_save_elsewhere_into_a_place_that_cannot_take_it_asks_again(dataset, reference, tmp_path, monkeypatch):
    disk = FullDisk(monkeypatch, from_step=4)
    taken = tmp_path / "taken"
    shutil.copytree(reference[0], taken / "run")  # a folder already holding a run of the same name
    controls = Controls(answers_faults=True)
    gen = train(_config(dataset), tmp_path / "run", controls)
    _until_blocked(gen)
    controls.save_elsewhere(str(taken))
    events, blocked = _until_blocked(gen)
    assert "already holds a run" in blocked.message and str(taken / "run") in blocked.message
    assert [rf.step_of(p) for p in rf.list_committed(taken / "run")] == [2, 4, 6]  # nothing of it touched
    disk.free()
    controls.retry.set()
    events += _finish(gen)
    assert events[-1].reason == "completed"
    _assert_same_as_reference(tmp_path / "run", events, reference)


def test_too_little_free_space_is_refused_before_writing_and_pauses(dataset, reference, tmp_path, monkeypatch):
    real = shutil.disk_usage
    small = {"on": False}

    def usage(path):
        got = real(path)
        return got._replace(free=1_000_000) if small["on"] else got

    monkeypatch.setattr(shutil, "disk_usage", usage)
    staged: list[Path] = []
    monkeypatch.setattr(ckpt, "save_pause_hook", staged.append)
    controls = Controls(answers_faults=True)
    gen, events = _past_first_checkpoint(dataset, tmp_path / "run", controls, small)  # then the disk fills
    more, blocked = _until_blocked(gen)
    assert "needs about" in blocked.message and "1.0 MB is free" in blocked.message and blocked.free == 1_000_000
    assert len(staged) == 1  # the second checkpoint never started writing
    small["on"] = False
    controls.retry.set()
    events += more + _finish(gen)
    _assert_same_as_reference(tmp_path / "run", events, reference)


def test_nobody_to_answer_ends_the_run_cleanly_with_the_one_line(dataset, tmp_path, monkeypatch):
    FullDisk(monkeypatch, from_step=4)
    events = list(train(_config(dataset), tmp_path / "run"))  # Controls() by default: nobody answers
    final = events[-1]
    assert final.reason == "failed" and final.step == 4 and "disk is full" in final.message
    assert "step-00000002" in final.message and "bug" not in final.message
    _only_step_2_intact(tmp_path / "run")


def test_a_read_only_checkpoint_folder_pauses_too(dataset, reference, tmp_path, monkeypatch):
    import errno

    real = ckpt.os_faults.check_free_space
    state = {"ro": False}

    def refuse(folder, needed, what, **kw):
        if state["ro"]:
            raise OSError(errno.EROFS, "Read-only file system", str(folder))
        return real(folder, needed, what, **kw)

    monkeypatch.setattr(ckpt.os_faults, "check_free_space", refuse)
    controls = Controls(answers_faults=True)
    gen, events = _past_first_checkpoint(dataset, tmp_path / "run", controls, state, "ro")
    more, blocked = _until_blocked(gen)
    assert "read-only" in blocked.message and "choose a folder you can write to" in blocked.message
    state["ro"] = False
    controls.retry.set()
    events += more + _finish(gen)
    _assert_same_as_reference(tmp_path / "run", events, reference)


def test_save_blocked_round_trips_and_move_target():
    from desktop_app.engine.events import SaveBlocked

    event = SaveBlocked(step=4, message="m", folder="/x", needed=5, free=1)
    assert event_from_dict(event.to_dict()) == event and not event.recorded
    controls = Controls()
    controls.save_elsewhere("/y")
    assert controls.retry.is_set() and controls.take_decision() == (True, "/y")
    assert controls.take_decision() == (False, "") and not controls.retry.is_set()


def test_move_target_is_the_folder_when_empty_else_a_subfolder(tmp_path):
    run = tmp_path / "runs" / "r1"
    assert move_target(run, tmp_path / "new") == tmp_path / "new"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert move_target(run, tmp_path / "full") == tmp_path / "full" / "r1"
