"""The `prepare` verb as scripts use it: --json shape, exit codes, one-line errors, --append."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Runs the real dispatcher (desktop_app.cli.main: parsing, UserError handling) restricted to the
# prepare verb, so these tests do not depend on the other verbs' modules.
RUNNER = ("import sys; from desktop_app import cli; cli.VERBS = {'prepare': cli.VERBS['prepare']}; "
          "sys.exit(cli.main(sys.argv[1:]))")


def prepare(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", RUNNER, "prepare", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    docs = [f"Story {i}: the cat sat on the mat and looked at the {['sun', 'moon', 'sea'][i % 3]}." for i in range(60)]
    (folder / "a.txt").write_text("\n\n".join(docs))
    (folder / "b.md").write_text("# Notes\n\nSome notes about the cat.\n")
    (folder / "broken.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    return folder


def test_json_output_shape_and_exit_zero(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    proc = prepare(str(inputs), "--out", str(out), "--vocab-size", "300", "--context", "16", "--overlap", "4",
                   "--val-fraction", "0.1", "--seed", "3", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert proc.stdout.count("\n") == 1
    assert result["status"] == "completed"
    files = {Path(f["path"]).name: f for f in result["files"]}
    assert set(files) == {"a.txt", "b.md", "broken.txt"}
    for f in files.values():
        assert set(f) >= {"path", "verdict", "reason", "tokens"}
    assert files["a.txt"]["verdict"] == "ok" and files["a.txt"]["tokens"] > 0
    assert files["broken.txt"]["verdict"] == "binary" and "PNG" in files["broken.txt"]["reason"]
    assert set(result["tokens"]) == {"train", "val"} and set(result["chunks"]) == {"train", "val"}
    assert result["tokens"]["train"] > 0 and result["chunks"]["train"] > 0
    assert Path(result["tokenizer"]).is_file() and Path(result["manifest"]).is_file()
    assert result["context_length"] == 16 and result["overlap"] == 4
    manifest = json.loads(Path(result["manifest"]).read_text())
    assert manifest["spec"]["seed"] == 3 and manifest["spec"]["val_fraction"] == 0.1


def test_human_output_and_progress_on_stderr(inputs: Path, tmp_path: Path) -> None:
    proc = prepare(str(inputs / "a.txt"), str(inputs / "broken.txt"), "--out", str(tmp_path / "ds"),
                   "--vocab-size", "300", "--context", "16", "--tokenizer", "bpe", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "train:" in proc.stdout and "windows of 16 tokens" in proc.stdout
    assert "skipped" in proc.stderr and "broken.txt" in proc.stderr
    assert json.loads((tmp_path / "ds" / "manifest.json").read_text())["tokenizer"]["kind"] == "bpe"


def test_no_usable_file_exits_non_zero(inputs: Path, tmp_path: Path) -> None:
    proc = prepare(str(inputs / "broken.txt"), "--out", str(tmp_path / "ds"), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["status"] == "failed" and result["files"][0]["verdict"] == "binary"
    assert "error: none of the 1 file(s) can be used" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--context", "16", "--overlap", "16"], "overlap 16 must be smaller than the context length 16"),
    (["--vocab-size", "100"], "too small"),
    (["--val-fraction", "0.9"], "val_fraction must be between 0 and 0.5"),
    (["--tokenizer-file", "/nonexistent/tokenizer.json"], "does not exist"),
])
def test_setting_mistakes_are_one_line_errors(inputs: Path, tmp_path: Path, args: list[str], message: str) -> None:
    proc = prepare(str(inputs), "--out", str(tmp_path / "ds"), *args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ds").exists()


def test_existing_dataset_is_not_overwritten_then_append_works(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert prepare(str(inputs / "a.txt"), "--out", str(out), "--vocab-size", "300", "--context", "16",
                   cwd=tmp_path).returncode == 0
    manifest_before = (out / "manifest.json").read_text()
    proc = prepare(str(inputs / "b.md"), "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (out / "manifest.json").read_text() == manifest_before

    proc = prepare(str(inputs / "b.md"), "--out", str(out), "--append", "--vocab-size", "500", cwd=tmp_path)
    assert proc.returncode == 2 and "--append uses the dataset's own settings" in proc.stderr

    proc = prepare(str(inputs), "--out", str(out), "--append", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    verdicts = {Path(f["path"]).name: f["verdict"] for f in result["files"]}
    assert verdicts == {"a.txt": "duplicate", "b.md": "ok", "broken.txt": "binary"}
    assert len(json.loads((out / "manifest.json").read_text())["sources"]) == 3


def test_missing_arguments_are_usage_errors(tmp_path: Path) -> None:
    proc = prepare("--out", str(tmp_path / "x"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = prepare(str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "--out" in proc.stderr


def test_real_entry_point(inputs: Path, tmp_path: Path) -> None:
    """`python -m desktop_app prepare ... --json`, exactly as scripts call it."""
    proc = subprocess.run([sys.executable, "-m", "desktop_app", "prepare", str(inputs / "a.txt"), "--out",
                           str(tmp_path / "ds"), "--vocab-size", "300", "--context", "16", "--json", "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["files"][0]["verdict"] == "ok" and result["chunks"]["train"] > 0
