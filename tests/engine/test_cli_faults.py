"""The CLI says an OS fault a person can fix (a full disk, a read-only or forbidden folder, a vanished file) in one
line naming the verb's work, exit 2, and writes no "bug" log for it; a real bug still gets its log and exit 1.
Faults are injected at the lowest level (a verb's own write, os.open), so this works as root too."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import desktop_app.cli as cli
from desktop_app.cli import crash

ROOT = Path(__file__).resolve().parents[2]


def _raising(exc: BaseException):
    def run(_args) -> int:
        raise exc
    return run


@pytest.mark.parametrize("exc, words", [
    (OSError(errno.ENOSPC, "No space left on device", "/data/runs/x/metrics.jsonl"), "the disk is full"),
    (OSError(errno.EDQUOT, "Disk quota exceeded", "/home/me/runs"), "the disk quota is exceeded"),
    (PermissionError(errno.EACCES, "Permission denied", "/srv/shared"), "permission denied"),
    (OSError(errno.EROFS, "Read-only file system", "/media/dvd/runs"), "the disk is read-only"),
    (Exception("Error while serializing: I/O error: No space left on device (os error 28)"), "the disk is full"),
])
def test_a_fixable_fault_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, exc, words):
    import desktop_app.cli.runs as runs_verb

    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr(runs_verb, "run", _raising(exc))
    code = cli.main(["runs", "compare", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: reading the runs failed: {words}")
    assert "bug" not in err and "Traceback" not in err
    assert not (tmp_path / "ws" / "logs").exists()  # nothing for a bug report


def test_a_real_bug_still_gets_its_log_and_exit_1(monkeypatch, capsys, tmp_path):
    import desktop_app.cli.runs as runs_verb

    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr(runs_verb, "run", _raising(ValueError("Size of the thing is odd")))
    assert cli.main(["runs", "compare", str(tmp_path)]) == crash.EXIT_CRASH
    err = capsys.readouterr().err
    assert "a bug in AZR Model Trainer" in err
    assert list((tmp_path / "ws" / "logs").glob("error-*.log"))


def test_each_verb_names_its_work():
    assert set(crash.VERB_WORK) >= {"prepare", "train", "export", "eval", "serve", "models", "generate"}
    exc = OSError(errno.ENOSPC, "No space left on device")
    assert crash.fault_line(exc, "export").startswith("error: exporting the model failed: the disk is full")
    assert crash.fault_line(exc, "newverb").startswith("error: the newverb command failed:")
    assert crash.fault_line(ValueError("x"), "export") is None


def test_prepare_into_a_read_only_folder_exits_2_before_reading_the_files(tmp_path):
    """A real process: `prepare` whose output folder cannot take a file (os.open refused there, as on read-only
    media) says so in one line before the scan; nothing is written."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("the cat sat on the mat.\n\n" * 50, encoding="utf-8")
    media = tmp_path / "media"
    media.mkdir()
    code = textwrap.dedent(f"""
        import errno, os, sys
        real = os.open
        def fake(path, flags, *a, **k):
            if flags & os.O_CREAT and os.fsdecode(path).startswith({str(media)!r}):
                raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
            return real(path, flags, *a, **k)
        os.open = fake
        from desktop_app import cli
        sys.exit(cli.main(sys.argv[1:]))
    """)
    env = {**os.environ, "AZR_WORKSPACE": str(tmp_path / "ws"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code, "prepare", str(tmp_path / "in"), "--out",
                          str(media / "data")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines == [f"error: writing to the dataset folder failed: the disk is read-only ({media}): choose a folder "
                     "you can write to"], out.stderr
    assert list(media.iterdir()) == []
