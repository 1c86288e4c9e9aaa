"""`python -m desktop_app train`: flags form, --config, --resume, --json events, errors, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import make_dataset, tiny_config

from desktop_app.cli import main
from desktop_app.engine import run_folder as rf
from desktop_app.engine.model.architecture import padded_vocab
from desktop_app.engine.specs import RunConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("data") / "ds")


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_flags_form_writes_run_json_and_prints_json_events(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["train", "--dataset", str(dataset), "--preset", "tiny", "--steps", "3", "--batch-size", "4",
                 "--eval-every", "3", "--save-every", "0", "--seed", "7", "--threads", "1", "--out", str(out),
                 "--json"])
    assert code == 0
    events = _json_lines(capsys.readouterr().out)
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3] and all("loss" in e for e in steps)
    assert any(e["type"] == "eval" and "val_loss" in e for e in events)
    assert events[-1]["type"] == "finished" and events[-1]["reason"] == "completed"
    assert any(e["type"] == "log" and "vocab_size set to" in e["message"] for e in events)
    config = RunConfig.load(out / "run.json")
    assert config.seed == 7 and config.train["steps"] == 3 and config.train["batch_size"] == 4
    tokens = json.loads((dataset / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    assert config.model["vocab_size"] == padded_vocab(tokens)  # the tokenizer's size rounded up to a multiple of 64
    latest = rf.latest_checkpoint(out)
    rf.verify_checkpoint(latest)
    # The checkpoint is a plain Hugging Face folder: transformers loads model and tokenizer offline.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(latest))
    tok = AutoTokenizer.from_pretrained(str(latest))
    ids = tok("the cat", return_tensors="pt").input_ids
    assert model(input_ids=ids).logits.shape[-1] == config.model["vocab_size"]


def test_config_form_and_resume_with_changed_config(dataset, tmp_path, capsys):
    config_file = tmp_path / "my-run.json"
    tiny_config(dataset, steps=3).save(config_file)
    out = tmp_path / "run"
    assert main(["train", "--config", str(config_file), "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    # The user edits run.json: resume refuses with a diff, then accepts when asked to.
    data = json.loads((out / "run.json").read_text())
    data["train"]["steps"] = 5
    (out / "run.json").write_text(json.dumps(data))
    assert main(["train", "--resume", str(out), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "train.steps: 3 -> 5" in err and "--accept-config-change" in err
    assert main(["train", "--resume", str(out), "--accept-config-change", "--json"]) == 0
    events = _json_lines(capsys.readouterr().out)
    assert [e["step"] for e in events if e["type"] == "step"] == [4, 5]
    assert events[-1]["reason"] == "completed"


@pytest.mark.parametrize("argv, message", [
    (["--dataset", "{missing}", "--out", "{out}"], "not a prepared dataset"),
    (["--resume", "{empty}"], "not a training run"),
    (["--dataset", "{dataset}"], "--out RUN_DIR is required"),
    (["--dataset", "{dataset}", "--preset", "nope", "--out", "{out}"], "unknown preset"),
    (["--dataset", "{dataset}", "--steps", "0", "--out", "{out}"], "steps must be"),
    (["--config", "{missing}/run.json", "--out", "{out}"], "does not exist"),
    (["--dataset", "{dataset}", "--out", "{afile}/run"], "cannot write the run folder"),
])
def test_bad_input_is_one_clear_line(dataset, tmp_path, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "afile").write_text("not a folder")
    subst = {"afile": str(tmp_path / "afile"), "missing": str(tmp_path / "missing"), "out": str(tmp_path / "out"),
             "empty": str(tmp_path / "empty"),
             "dataset": str(dataset)}
    code = main(["train", *[a.format(**subst) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and "Traceback" not in err
    assert not rf.list_committed(tmp_path / "out")


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="POSIX signals")
def test_sigusr1_saves_and_ctrl_c_stops_gracefully(dataset, tmp_path):
    config_file = tmp_path / "run.json"
    tiny_config(dataset, steps=100000, save_every=0).save(config_file)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "desktop_app", "train", "--config", str(config_file),
                             "--out", str(out), "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    events = []
    try:
        sent_usr1 = sent_int = False
        for line in proc.stdout:
            event = json.loads(line)
            events.append(event)
            if event["type"] == "step" and event["step"] == 3 and not sent_usr1:
                proc.send_signal(signal.SIGUSR1)
                sent_usr1 = True
            if event["type"] == "checkpoint" and not sent_int:
                proc.send_signal(signal.SIGINT)
                sent_int = True
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    saves = [e["step"] for e in events if e["type"] == "checkpoint"]
    # save-now at step >= 3; then the stop saves at its step (unless the signal came before the next step)
    assert 1 <= len(saves) <= 2 and saves[0] >= 3
    final = events[-1]
    assert final["type"] == "finished" and final["reason"] == "stopped" and final["step"] == saves[-1]
    assert max(e["step"] for e in events if e["type"] == "step") == saves[-1]
    assert "stopping after this step" in proc.stderr.read()
    for path in rf.list_committed(out):
        rf.verify_checkpoint(path)


def test_preflight_warning_is_printed_before_the_run_starts(dataset, tmp_path, capsys):
    out = tmp_path / "run"
    # 3 steps with the default warm-up of 20: the learning rate would never reach its peak
    code = main(["train", "--dataset", str(dataset), "--preset", "tiny", "--steps", "3", "--batch-size", "4",
                 "--eval-every", "0", "--save-every", "0", "--threads", "1", "--out", str(out)])
    assert code == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "check before start" in x)
    assert line.startswith("[warning] check before start: Warm-up of 20 steps") and "(3 steps)" in line
    assert err.index("check before start") < err.index("completed")  # printed before the run, which still ran
    assert main(["train", "--dataset", str(dataset), "--preset", "tiny", "--steps", "3", "--batch-size", "4",
                 "--eval-every", "0", "--save-every", "0", "--threads", "1", "--out", str(tmp_path / "json"),
                 "--json"]) == 0
    events = _json_lines(capsys.readouterr().out)
    assert events[0]["type"] == "log" and events[0]["level"] == "warning" and "Warm-up" in events[0]["message"]


def test_a_run_that_cannot_fit_in_memory_is_refused_unless_forced(dataset, tmp_path, capsys, monkeypatch):
    from patching import patch_everywhere

    from desktop_app.engine.train import memory_plan as mp

    tiny_machine = mp.Machine(ram_free=1 << 20, ram_total=1 << 30)  # 1 MiB free
    patch_everywhere(monkeypatch, mp, "this_machine", lambda probe_gpu=None: tiny_machine)
    argv = ["train", "--dataset", str(dataset), "--preset", "tiny", "--steps", "2", "--batch-size", "4",
            "--eval-every", "0", "--save-every", "0", "--threads", "1", "--out", str(tmp_path / "run"), "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: this run cannot work on this machine: Memory: this run needs about")
    assert "1 MiB free" in captured.err and "--force" in captured.err and "Traceback" not in captured.err
    assert captured.out == "" and not (tmp_path / "run").exists()  # nothing started, nothing written
    assert main([*argv, "--force"]) == 0
    events = _json_lines(capsys.readouterr().out)
    assert any(e["type"] == "log" and e["level"] == "error" and "Memory" in e["message"] for e in events)
    assert events[-1]["type"] == "finished" and events[-1]["reason"] == "completed"
