"""A fine-tune whose base model folder is moved away while it trains: the run goes on (the base is in memory; a save
that needed one of its files would pause naming it, as any blocked save does), a resume while the base is still gone
is refused in one line naming the folder, and once the folder is back the run resumes bit-exactly (issue 41)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from ft_helpers import ft_config, make_base, newest, repeat_chats, write_jsonl
from safetensors.torch import load_file
from train_helpers import metrics_losses

from desktop_app.cli import main as cli_main
from desktop_app.engine import run_folder as rf
from desktop_app.engine.errors import UserError
from desktop_app.engine.train.loop import train


def _adapter(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(newest(run_dir) / "adapter_model.safetensors"))


@pytest.fixture
def world(tmp_path):
    return {"base": make_base(tmp_path / "base", "llama", width=64),
            "chats": write_jsonl(tmp_path / "chats.jsonl", repeat_chats(40))}


def test_a_base_moved_away_is_named_on_resume_and_the_run_resumes_exactly_once_it_is_back(world, tmp_path, capsys):
    config = ft_config(world["base"], [world["chats"]], adapter={"kind": "lora"}, steps=8, save_every=4,
                       micro_batch_size=2)
    assert list(train(config, tmp_path / "ref"))[-1].reason == "completed"
    run, away = tmp_path / "run", tmp_path / "base-moved"
    gen = train(config, run)
    for event in gen:
        if event.type == "checkpoint" and event.step == 4:
            shutil.move(world["base"], away)  # the drive is unplugged, the folder renamed
        if event.type == "step" and event.step >= 6:
            break
    gen.close()  # then the app is closed (or crashes)
    assert [rf.step_of(p) for p in rf.list_committed(run)] == [4]
    rf.verify_checkpoint(rf.list_committed(run)[0])
    with pytest.raises(UserError) as refused:
        list(train(config, run, resume=True))
    assert str(world["base"]) in str(refused.value) and "Traceback" not in str(refused.value)
    code = cli_main(["train", "--resume", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and str(world["base"]) in err and "bug" not in err
    assert [rf.step_of(p) for p in rf.list_committed(run)] == [4]  # nothing lost while it was gone
    shutil.move(away, world["base"])
    assert list(train(config, run, resume=True))[-1].reason == "completed"
    assert metrics_losses(run) == metrics_losses(tmp_path / "ref")
    got, want = _adapter(run), _adapter(tmp_path / "ref")
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
