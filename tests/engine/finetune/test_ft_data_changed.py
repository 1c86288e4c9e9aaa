"""A fine-tune's data files are fingerprinted when it starts (RUN/data_files.json): a resume over an edited file is
refused in one line naming it (a changed size, or the same size with other contents), nothing in the run touched;
with --accept-config-change it continues with a warning and records the new files; an unchanged file resumes
silently."""

from __future__ import annotations

import json

import pytest
from ft_helpers import ft_config, make_base, repeat_chats, write_jsonl
from train_helpers import metrics_losses

from desktop_app.cli import main as cli_main
from desktop_app.engine import run_folder as rf
from desktop_app.engine.data.store_check import CHECKSUM
from desktop_app.engine.errors import UserError
from desktop_app.engine.train.data_files import DATA_FILES
from desktop_app.engine.train.loop import train


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_base(tmp_path_factory.mktemp("data-changed") / "base", "llama", width=32)


@pytest.fixture
def run(base, tmp_path):
    """(run folder, config, chat file) of an SFT run stopped after its checkpoint at step 2 (of 4)."""
    chats = write_jsonl(tmp_path / "chats.jsonl", repeat_chats(24))
    config = ft_config(base, [chats], steps=4, save_every=2, micro_batch_size=2)
    gen = train(config, tmp_path / "run")
    for event in gen:
        if event.type == "checkpoint":
            break
    gen.close()
    return tmp_path / "run", config, chats


def test_the_start_records_each_data_file(run):
    run_dir, _config, chats = run
    files = json.loads((run_dir / DATA_FILES).read_text(encoding="utf-8"))["files"]
    assert list(files) == [str(chats)]
    assert files[str(chats)]["size"] == chats.stat().st_size and len(files[str(chats)][CHECKSUM]) == 64


def test_an_unchanged_file_resumes_silently(run):
    run_dir, config, _data = run
    events = list(train(config, run_dir, resume=True))
    assert events[-1].reason == "completed"
    assert not [e for e in events if e.type == "log" and "changed data" in e.message]


@pytest.mark.parametrize("edit", ["appended", "same size"])
def test_an_edited_file_is_refused_naming_it_and_nothing_is_touched(run, edit, capsys):
    run_dir, config, data = run
    text = data.read_text(encoding="utf-8")
    if edit == "appended":
        data.write_text(text + json.dumps(repeat_chats(1, seed=9)[0]) + "\n", encoding="utf-8")
    else:
        data.write_text(text.replace("a", "e", 1), encoding="utf-8")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    checkpoints = rf.list_committed(run_dir)
    with pytest.raises(UserError) as refused:
        list(train(config, run_dir, resume=True))
    message = str(refused.value)
    assert message.startswith("cannot resume: a data file changed") and str(data) in message and "\n" not in message
    assert ("same size, another checksum" in message) == (edit == "same size")
    code = cli_main(["train", "--resume", str(run_dir)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and str(data) in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before  # nothing lost
    assert rf.list_committed(run_dir) == checkpoints


def test_accepting_the_change_continues_with_a_warning_and_records_the_new_file(run):
    run_dir, config, data = run
    data.write_text(data.read_text(encoding="utf-8") + json.dumps(repeat_chats(1, seed=9)[0]) + "\n",
                    encoding="utf-8")
    events = list(train(config, run_dir, resume=True, accept_config_change=True))
    assert events[-1].reason == "completed"
    warned = [e.message for e in events if e.type == "log" and "continuing on changed data" in e.message]
    assert len(warned) == 1 and str(data) in warned[0]
    files = json.loads((run_dir / DATA_FILES).read_text(encoding="utf-8"))["files"]
    assert files[str(data)]["size"] == data.stat().st_size
    assert len(metrics_losses(run_dir)) == 4
    assert list(train(config, run_dir, resume=True))[-1].reason == "completed"  # the new file is the run's now


def test_an_unchanged_file_is_not_hashed_again_on_resume(run, monkeypatch):
    from desktop_app.engine.train import data_files

    run_dir, config, _data = run
    hashed = []
    real = data_files.hash_prefix
    monkeypatch.setattr(data_files, "hash_prefix", lambda path, n: hashed.append(path) or real(path, n))
    assert list(train(config, run_dir, resume=True))[-1].reason == "completed"
    assert hashed == []  # its stat is the one recorded at the start: the recorded checksum stands
