"""`sandbox` and `tasks` verbs (the surfaces scripts rely on) and the unknown-verb error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import desktop_app.cli as cli

ROOT = Path(__file__).resolve().parents[3]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses the sandboxed executor")


def _run(*argv: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    done = subprocess.run([sys.executable, "-m", "desktop_app", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)
    return done.returncode, done.stdout, done.stderr


@linux_only
def test_sandbox_prints_one_verdict_per_file_then_the_layers(tmp_path: Path) -> None:
    files = {"ok.py": "print('hello')\n", "bad.py": "import os\n", "loop.py": "while True:\n    pass\n",
             "crash.py": "1 / 0\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, out, err = _run("sandbox", *(str(tmp_path / n) for n in files), "--timeout", "1", "--json")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    verdicts = {Path(r["file"]).name: r for r in records[:-1]}
    assert {k: v["status"] for k, v in verdicts.items()} == {"ok.py": "ok", "bad.py": "forbidden",
                                                              "loop.py": "timeout", "crash.py": "error"}
    assert verdicts["ok.py"]["stdout"] == "hello\n"
    assert all(set(r) == {"file", "status", "reason", "stdout", "seconds"} for r in verdicts.values())
    assert "ZeroDivisionError" in verdicts["crash.py"]["reason"]
    assert "audit-hook" in records[-1]["layers"] and len(records) == len(files) + 1


def test_sandbox_missing_file_is_a_one_line_error(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "VERBS", {"sandbox": cli.VERBS["sandbox"]})
    assert cli.main(["sandbox", str(tmp_path / "nope.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err


@linux_only
def test_tasks_writes_seeded_json_lines(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "VERBS", {"tasks": cli.VERBS["tasks"]})
    args = ["tasks", "--world", "python", "--type", "deduction", "--count", "5", "--seed", "4", "--json"]
    assert cli.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 5 and all({"program", "input", "output"} <= set(r) for r in records)
    assert cli.main([*args, "--out", str(tmp_path / "t.jsonl")]) == 0
    assert (tmp_path / "t.jsonl").read_text().splitlines() == lines


def test_unknown_verb_names_the_nearest_and_never_opens_the_window() -> None:
    code, out, err = _run("sandox", "prog.py")
    assert code == 2 and out == ""
    assert err.strip() == "error: unknown command 'sandox'; did you mean 'sandbox'?"
    code, _, err = _run("xyzzy")
    assert code == 2 and "the verbs are" in err


def test_an_unexpected_error_is_one_line_naming_the_log_that_holds_the_traceback(tmp_path: Path, monkeypatch,
                                                                                   capsys) -> None:
    import desktop_app.cli.sandbox as sandbox_verb

    def broken(_args) -> int:
        raise RuntimeError("the sandbox's fork server did not start\nsecond line")

    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr(cli, "VERBS", {"sandbox": cli.VERBS["sandbox"]})
    original = sandbox_verb.run
    monkeypatch.setattr(sandbox_verb, "run", broken)
    assert cli.main(["sandbox", "ok.py"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith("error: unexpected RuntimeError: the sandbox's fork server did not start (")
    (log,) = (tmp_path / "ws" / "logs").glob("error-*.log")
    assert str(log) in captured.err
    text = log.read_text(encoding="utf-8")
    assert "cli: azr-trainer sandbox ok.py" in text and "Traceback (most recent call last)" in text
    assert "in broken" in text and "second line" in text
    # a user mistake stays a one-line error with exit status 2 and writes no log
    monkeypatch.setattr(sandbox_verb, "run", original)
    assert cli.main(["sandbox", str(tmp_path / "nope.py")]) == 2
    assert log.read_text(encoding="utf-8") == text


def test_the_crash_log_falls_back_to_the_temporary_folder(tmp_path: Path, monkeypatch) -> None:
    from desktop_app.cli import crash

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setattr(crash.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    line = crash.crash_line(ValueError("bad"), ["train"], workspace=blocked)
    (log,) = (tmp_path / "tmp" / "azr-model-trainer-logs").glob("error-*.log")
    assert str(log) in line and "ValueError: bad" in log.read_text(encoding="utf-8")


def test_a_closed_pipe_ends_the_verb_quietly(tmp_path: Path, monkeypatch, capsys) -> None:
    import desktop_app.cli.tasks as tasks_verb

    def broken_pipe(_args) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr(cli, "VERBS", {"tasks": cli.VERBS["tasks"]})
    monkeypatch.setattr(tasks_verb, "run", broken_pipe)
    assert cli.main(["tasks"]) == 141  # `azr-trainer tasks | head`: no error line, no log
    assert capsys.readouterr().err == "" and not (tmp_path / "ws" / "logs").exists()
