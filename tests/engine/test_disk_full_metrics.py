"""metrics.jsonl on a full disk loses nothing: the refused records wait in memory, the file keeps ending on a whole
line, the next checkpoint writes them first (or pauses the run until it can), and the history on disk ends up the same
as that of a run that never met the fault."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
from train_helpers import make_dataset, metrics_losses, step_losses, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine.events import Controls
from desktop_app.engine.train.loop import train

NO_SPACE = OSError(errno.ENOSPC, "No space left on device")



class _RefusingFile:
    """metrics.jsonl opened on a disk that fills: while `disk["full"]`, a flush writes part of a line and fails."""

    def __init__(self, real: Any, disk: dict[str, bool]) -> None:
        self.real, self.disk, self.buffer = real, disk, ""

    def write(self, text: str) -> int:
        self.buffer += text
        return len(text)

    def flush(self) -> None:
        if self.disk["full"] and self.buffer:
            self.buffer = ""
            self.real.write('{"torn": ')  # what a full disk leaves: part of a line
            self.real.flush()
            raise NO_SPACE
        self.real.write(self.buffer)
        self.buffer = ""
        self.real.flush()

    def close(self) -> None:
        self.flush()
        self.real.close()

    def fileno(self) -> int:
        return self.real.fileno()


def _refusing(monkeypatch, disk: dict[str, bool]) -> None:
    def fake_open(path, *args, **kwargs):
        real = open(path, *args, **kwargs)  # noqa: SIM115 - handed to the writer, which closes it
        return _RefusingFile(real, disk) if str(path).endswith(rf.METRICS_FILE) and "a" in args[:1] else real

    monkeypatch.setattr(rf, "open", fake_open, raising=False)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_refused_records_wait_in_memory_and_the_file_stays_whole(tmp_path, monkeypatch):
    disk = {"full": False}
    _refusing(monkeypatch, disk)
    writer = rf.MetricsWriter(tmp_path)
    assert writer.write({"type": "step", "step": 1}) is None
    disk["full"] = True
    warning = writer.write({"type": "step", "step": 2})
    assert warning and "wait in memory" in warning and rf.METRICS_FILE in warning
    assert writer.write({"type": "step", "step": 3}) is None  # said once
    assert [r["step"] for r in _lines(writer.path)] == [1]  # cut back to the last whole line
    with pytest.raises(OSError):
        writer.flush_pending()
    assert writer.offset() == writer.path.stat().st_size
    disk["full"] = False
    writer.write({"type": "step", "step": 4})
    assert [r["step"] for r in _lines(writer.path)] == [1, 2, 3, 4]
    writer.close()


def test_a_run_whose_metrics_disk_fills_pauses_at_its_checkpoint_and_loses_no_record(tmp_path, monkeypatch):
    dataset = make_dataset(tmp_path / "ds")
    config = tiny_config(dataset, steps=6, save_every=2, log_every=1)
    reference = list(train(config, tmp_path / "ref"))
    disk = {"full": False}
    _refusing(monkeypatch, disk)
    controls = Controls(answers_faults=True)
    events: list[Any] = []
    blocked = None
    for event in train(config, tmp_path / "run", controls):
        events.append(event)
        if event.type == "checkpoint" and event.step == 2:
            disk["full"] = True  # the disk fills after the first checkpoint
        if event.type == "save_blocked":
            blocked = event
            assert blocked.step == 4 and "writing the run's metrics failed: the disk is full" in blocked.message
            assert [rf.step_of(p) for p in rf.list_committed(tmp_path / "run")] == [2]
            disk["full"] = False
            controls.retry.set()
    assert blocked is not None
    assert events[-1].type == "finished" and events[-1].reason == "completed"
    assert step_losses(events) == step_losses(reference)
    assert metrics_losses(tmp_path / "run") == metrics_losses(tmp_path / "ref")
    assert all(line.endswith("}") for line in (tmp_path / "run" / rf.METRICS_FILE).read_text().splitlines())
