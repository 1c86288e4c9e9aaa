"""Fine-tuning straight from a table (Parquet, CSV) whose columns have names nobody guesses: the column mapping goes
into the run request, the engine checks it before the run starts, saves it in run.json, and a resumed run reads its
table through the same mapping (losses bit for bit)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from ft_helpers import make_base, make_tokenizer, preference_pairs, repeat_chats
from train_helpers import metrics_losses

from desktop_app.engine import run_folder as rf
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.engine.finetune.examples import build_preference_examples, build_sft_examples
from desktop_app.engine.session import start
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.loop import train
from desktop_app.engine.train.request import RunRequest, plan_run, prepare_run

QA = {"instruction": "ask", "output": "reply"}  # names the guess does not know
TRAIN = {"steps": 6, "batch_size": 4, "lr": 5e-3, "warmup_steps": 0, "eval_every": 0, "save_every": 3,
         "sample_tokens": 0, "threads": 1, "log_every": 1, "precision": "fp32", "weight_decay": 0.0}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("table_runs")
    chats = repeat_chats(40)
    rows = [{"id": k, "ask": c["messages"][0]["content"], "reply": c["messages"][1]["content"]}
            for k, c in enumerate(chats)]
    parquet = root / "qa.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    csv = root / "pairs.csv"
    lines = ["p,good,poor"] + [f"{r['prompt']},{r['chosen']},{r['rejected']}" for r in preference_pairs(16)]
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"base": make_base(root / "base", "llama", width=64), "parquet": parquet, "csv": csv}


def request(world: dict[str, Path], **fields: object) -> RunRequest:
    given: dict = {"objective": "sft", "base_model": str(world["base"]), "data": [str(world["parquet"])],
                   "columns": dict(QA), "train": dict(TRAIN), "seed": 3, **fields}
    return RunRequest(**given)


def test_a_parquet_sft_run_trains_through_its_mapping_saves_it_and_resumes_with_it(world, tmp_path):
    ref = tmp_path / "ref"
    events = list(start(request(world), ref, Controls()))
    assert events[-1].reason == "completed", events[-1]
    saved = json.loads((ref / rf.RUN_FILE).read_text(encoding="utf-8"))
    assert saved["columns"] == QA
    assert any("qa.parquet" in getattr(e, "message", "") and "40 of 40" in getattr(e, "message", "")
               for e in events), "the data verdict counts every row of the table"
    # a run abandoned after its step-3 checkpoint, resumed from its own run.json
    run = tmp_path / "run"
    gen = start(request(world), run, Controls())
    for event in gen:
        if event.type == "step" and event.step >= 4:
            break
    gen.close()
    assert [rf.step_of(p) for p in rf.list_committed(run)] == [3]
    config = RunConfig.load(run / rf.RUN_FILE)
    assert config.columns == QA
    resumed = list(train(config, run, Controls(), resume=True))
    assert resumed[-1].reason == "completed"
    assert metrics_losses(run) == metrics_losses(ref)


def test_without_the_mapping_the_same_table_is_refused_by_name(world):
    with pytest.raises(UserError, match="no column to read: the file has id, ask, reply"):
        build_sft_examples([str(world["parquet"])], make_tokenizer(), 64)
    examples, _ = build_sft_examples([str(world["parquet"])], make_tokenizer(), 64, columns=QA)
    assert len(examples) == 40


def test_a_csv_of_preference_pairs_trains_dpo_through_its_mapping(world, tmp_path):
    columns = {"prompt": "p", "chosen": "good", "rejected": "poor"}
    pairs, _ = build_preference_examples([str(world["csv"])], make_tokenizer(), 64, columns=columns)
    assert len(pairs) == 16
    req = request(world, objective="dpo", data=[str(world["csv"])], columns=columns,
                  train={**TRAIN, "steps": 2, "save_every": 0})
    events = list(start(req, tmp_path / "dpo", Controls()))
    assert events[-1].reason == "completed", events[-1]
    assert json.loads((tmp_path / "dpo" / rf.RUN_FILE).read_text(encoding="utf-8"))["columns"] == columns


@pytest.mark.parametrize("columns, words", [
    ({"instruction": "ask", "output": "answer"},
     "qa.parquet has no column 'answer' (its columns: id, ask, reply): change the column mapping (--columns)"),
    ({"text": "ask"}, "qa.parquet: the column mapping reads a text column"),
    ({"instruction": "ask", "output": "reply", "colour": "id"}, "unknown role(s) 'colour'"),
])
def test_a_bad_mapping_is_one_error_before_the_run_starts(world, tmp_path, columns, words):
    req = request(world, columns=columns)
    with pytest.raises(UserError) as caught:
        prepare_run(req)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    run = tmp_path / "run"
    with pytest.raises(UserError, match=re.escape(words)):
        next(start(req, run, Controls()))
    assert not run.exists(), "nothing is written for a run that cannot start"
    assert plan_run(req).columns == columns, "the request's mapping is what the engine plans (then refuses)"


def test_the_cli_trains_from_a_table_with_columns_and_resume_keeps_them(world, tmp_path, capsys):
    from desktop_app.cli import main

    run = tmp_path / "cli"
    argv = ["train", "--method", "lora", "--base", str(world["base"]), "--data", str(world["parquet"]), "--columns",
            "instruction=ask,output=reply", "--steps", "2", "--batch-size", "2", "--threads", "1", "--out", str(run)]
    assert main(argv) == 0, capsys.readouterr().err
    assert RunConfig.load(run / rf.RUN_FILE).columns == QA
    assert main(["train", "--resume", str(run)]) == 0  # complete: resumes to the end, reading the table again
    assert RunConfig.load(run / rf.RUN_FILE).columns == QA


@pytest.mark.parametrize("columns, message", [
    ("instruction=ask,output=answer", "qa.parquet has no column 'answer' (its columns: id, ask, reply)"),
    ("instruction=ask,reply", "--columns: 'reply' is not role=column"),
])
def test_the_cli_refuses_a_bad_columns_option_in_one_line(world, tmp_path, capsys, columns, message):
    from desktop_app.cli import main

    out = tmp_path / "out"
    code = main(["train", "--method", "sft", "--base", str(world["base"]), "--data", str(world["parquet"]),
                 "--columns", columns, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_columns_without_a_base_is_refused_by_the_cli(world, tmp_path, capsys):
    from desktop_app.cli import main

    code = main(["train", "--dataset", str(tmp_path), "--columns", "text=body", "--out", str(tmp_path / "o")])
    assert code == 2 and "--columns go with --base MODEL" in capsys.readouterr().err
