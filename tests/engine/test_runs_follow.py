"""Following a run from outside its process (engine/runs.py): records appended while following, torn lines held
back until complete, a truncated or replaced file re-read after a reset marker, the end at "finished" or stop, and
the live / pipeline helpers the window uses."""

from __future__ import annotations

import json
import os
import queue
import threading
import time

from desktop_app.engine.run_folder import MetricsReader, last_record
from desktop_app.engine.runs import follow_run, is_live, pipeline_resumable, pipeline_root


def _line(step: int, kind: str = "step", **extra) -> str:
    return json.dumps({"type": kind, "step": step, **extra}) + "\n"


def _append(path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()


class _Follower:
    """follow_run in a thread; the records arrive in a queue."""

    def __init__(self, run_dir, poll_s: float = 0.01):
        self.stop = threading.Event()
        self.records: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, args=(run_dir, poll_s), daemon=True)
        self.thread.start()

    def _run(self, run_dir, poll_s) -> None:
        for record in follow_run(run_dir, self.stop, poll_s=poll_s):
            self.records.put(record)
        self.records.put(None)  # the generator ended

    def take(self, n: int, timeout: float = 5.0) -> list:
        return [self.records.get(timeout=timeout) for _ in range(n)]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive()


def test_existing_then_appended_records_until_finished(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_line(1) + _line(2), encoding="utf-8")
    follower = _Follower(tmp_path)
    try:
        assert [r["step"] for r in follower.take(2)] == [1, 2]
        for step in (3, 4):
            _append(path, _line(step, loss=1.0 / step))
        got = follower.take(2)
        assert [r["step"] for r in got] == [3, 4] and got[1]["loss"] == 0.25
        _append(path, _line(4, "finished", reason="completed") + _line(5))  # nothing after finished is read
        assert follower.take(2) == [{"type": "finished", "step": 4, "reason": "completed"}, None]
    finally:
        follower.close()


def test_waits_for_the_file_and_holds_a_torn_line_until_complete(tmp_path):
    run = tmp_path / "run"  # not even the folder exists yet
    follower = _Follower(run)
    try:
        time.sleep(0.05)
        run.mkdir()
        path = run / "metrics.jsonl"
        whole = _line(1, loss=2.5)
        _append(path, whole[:10])  # the writer is mid-line
        time.sleep(0.1)
        assert follower.records.empty()
        _append(path, whole[10:] + "not json\n" + _line(2))  # a damaged complete line is skipped
        assert [r["step"] for r in follower.take(2)] == [1, 2]
        assert follower.records.empty()
    finally:
        follower.close()
    assert follower.records.get(timeout=1) is None  # stop ends it


def test_truncation_yields_a_reset_and_the_file_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(_line(s) for s in range(1, 6)), encoding="utf-8")
    reader = MetricsReader(path)
    assert [r["step"] for r in reader.poll()] == [1, 2, 3, 4, 5]
    keep = len("".join(_line(s) for s in range(1, 4)).encode())
    with open(path, "r+b") as fh:  # what a resume does: cut back to the checkpoint's offset
        fh.truncate(keep)
    _append(path, _line(4, elapsed_s=9.0))
    records = reader.poll()
    assert records[0] == {"type": "reset"} and [r["step"] for r in records[1:]] == [1, 2, 3, 4]
    assert records[-1]["elapsed_s"] == 9.0
    assert reader.poll() == []


def test_cut_back_and_regrown_past_the_position_between_polls_is_noticed(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_line(1) + _line(2, elapsed_s=1.0), encoding="utf-8")
    reader = MetricsReader(path)
    assert len(reader.poll()) == 2
    with open(path, "r+b") as fh:
        fh.truncate(len(_line(1).encode()))
    _append(path, _line(2, elapsed_s=7.0) + _line(3) + _line(4))  # already longer than before
    records = reader.poll()
    assert records[0]["type"] == "reset" and [r["step"] for r in records[1:]] == [1, 2, 3, 4]
    assert records[2]["elapsed_s"] == 7.0


def test_a_replaced_or_removed_file_starts_again(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_line(1) + _line(2), encoding="utf-8")
    reader = MetricsReader(path)
    assert len(reader.poll()) == 2
    path.unlink()  # a fresh run in the same folder removes the old history first
    assert reader.poll() == [{"type": "reset"}]
    assert reader.poll() == []
    path.write_text(_line(1, loss=9.0), encoding="utf-8")
    assert reader.poll() == [{"type": "step", "step": 1, "loss": 9.0}]


def test_following_in_a_thread_sees_a_resume_truncation(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(_line(1) + _line(2) + _line(3), encoding="utf-8")
    follower = _Follower(tmp_path)
    try:
        assert [r["step"] for r in follower.take(3)] == [1, 2, 3]
        with open(path, "r+b") as fh:
            fh.truncate(len((_line(1) + _line(2)).encode()))
        time.sleep(0.1)
        _append(path, _line(3, resumed=True) + _line(4, "finished", reason="completed"))
        got = []
        while not got or got[-1] is not None:
            got.append(follower.records.get(timeout=5))
        assert {"type": "reset"} in got
        after = got[got.index({"type": "reset"}) + 1:-1]
        assert [r["step"] for r in after][-2:] == [3, 4] and after[-1]["type"] == "finished"
        assert after[-2].get("resumed") is True
    finally:
        follower.close()


def test_a_long_history_arrives_in_batches(tmp_path, monkeypatch):
    from desktop_app.engine import run_folder, runs

    monkeypatch.setattr(run_folder, "_READ_CAP", 100)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(_line(s) for s in range(1, 41)), encoding="utf-8")
    stop = threading.Event()
    batches = []
    for batch in runs.follow_run_batches(tmp_path, stop, poll_s=5.0):
        batches.append(batch)
        if sum(len(b) for b in batches) == 40:
            break
    assert len(batches) > 5  # no poll_s wait between batches while more is there
    assert [r["step"] for b in batches for r in b] == list(range(1, 41))


def test_live_means_recent_and_not_finished(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert not is_live(run) and last_record(run) is None
    path = run / "metrics.jsonl"
    path.write_text(_line(1) + _line(2) + '{"type": "st', encoding="utf-8")
    assert is_live(run)
    assert last_record(run)["step"] == 2  # the torn line is passed over
    assert not is_live(run, now=time.time() + 600)  # quiet for ten minutes: not live
    old = time.time() - 3600
    os.utime(path, (old, old))
    assert not is_live(run)
    path.write_text(_line(2) + _line(2, "finished", reason="stopped"), encoding="utf-8")
    assert not is_live(run)


def test_pipeline_helpers(tmp_path):
    out = tmp_path / "pipe"
    stage = out / "stages" / "02-dpo"
    stage.mkdir(parents=True)
    assert pipeline_root(out) is None and not pipeline_resumable(out)
    (out / "pipeline.json").write_text(json.dumps({"stages": []}), encoding="utf-8")
    assert pipeline_root(out) == out and pipeline_root(stage) == out
    assert pipeline_root(tmp_path) is None
    assert pipeline_resumable(out)  # nothing ran yet
    state = {"stages": [{"name": "sft", "status": "completed"}, {"name": "dpo", "status": "stopped"}]}
    (out / "pipeline_state.json").write_text(json.dumps(state), encoding="utf-8")
    assert pipeline_resumable(out)
    state["stages"][1]["status"] = "early_stopped"
    (out / "pipeline_state.json").write_text(json.dumps(state), encoding="utf-8")
    assert not pipeline_resumable(out)


def test_nested_runs_of_a_demo_folder_and_a_pipeline(tmp_path):
    from desktop_app.engine.runs import nested_runs

    demo = tmp_path / "selfplay-demo"
    for i, name in enumerate(("selfplay", "pretrain")):  # written in this order: the older first whatever its name
        (demo / name).mkdir(parents=True)
        (demo / name / "run.json").write_text("{}", encoding="utf-8")
        os.utime(demo / name / "run.json", (1_000_000 + i, 1_000_000 + i))
    (demo / "dataset").mkdir()  # no run: not listed
    (demo / "corpus").mkdir()
    assert nested_runs(demo) == [demo / "selfplay", demo / "pretrain"]
    assert nested_runs(demo / "pretrain") == []  # a run holds no runs
    assert nested_runs(tmp_path / "missing") == []
    pipe = tmp_path / "pipe"
    for stage in ("02-dpo", "01-sft"):
        (pipe / "stages" / stage).mkdir(parents=True)
        (pipe / "stages" / stage / "run.json").write_text("{}", encoding="utf-8")
    (pipe / "pipeline.json").write_text(json.dumps({"stages": []}), encoding="utf-8")
    assert nested_runs(pipe) == [pipe / "stages" / "01-sft", pipe / "stages" / "02-dpo"]
