"""`eval` from the CLI: one JSON object per model (the shape scripts rely on), a table without --json, the results
kept in each run folder, one-line errors for bad input with nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.evaluate.results import RESULTS_FILE, read_results
from desktop_app.engine.train.loop import train

TYPES = ("deduction", "abduction", "induction")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("evalruns")
    dataset = make_dataset(root / "ds", context=64)
    list(train(tiny_config(dataset, steps=2, save_every=2), root / "a"))
    list(train(tiny_config(dataset, steps=4, save_every=2, seed=2), root / "b"))
    return dataset, root / "a", root / "b"


def test_two_models_one_json_object_each_with_what_was_asked(runs, tmp_path: Path, run_cli) -> None:
    dataset, a, b = runs
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "the cat", "answer": "sat"}\n{"prompt": "a dog", "answers": ["ran", "sat"]}\n')
    code, out, err = run_cli(a, b / "checkpoints" / "step-00000004", "--world", "mini", "--per-type", "5",
                             "--samples", "2", "--qa", qa, "--text", dataset, "--max-text-bytes", "1200", "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["model"] for r in rows] == [str(a), str(b / "checkpoints" / "step-00000004")]
    for row in rows:
        for t in TYPES:
            assert 0.0 <= row[f"solve_rate/{t}"] <= 1.0 and 0.0 <= row[f"pass@2/{t}"] <= 1.0
            low, high = row[f"solve_rate/{t}/ci95"]
            assert low <= row[f"solve_rate/{t}"] <= high and row[f"tasks/{t}"] == 5
        assert 0.0 <= row["qa_accuracy"] <= 1.0 and row["questions"] == 2
        assert row["bits_per_byte"] > 0 and math.isfinite(row["perplexity"]) and row["perplexity"] > 1
        assert row["world"] == "mini" and row["prompt_style"] == "plain"
    assert rows[0]["step"] == 2 and rows[1]["step"] == 4
    # the same held-out tasks for both, kept in each run folder with the spec they were measured with
    for run in (a, b):
        kept = read_results(run)
        assert kept[-1]["spec"]["per_type"] == 5 and kept[-1]["metrics"]["tasks/deduction"] == 5


def test_without_json_a_table_and_only_what_was_asked(runs, run_cli) -> None:
    dataset, a, b = runs
    code, out, err = run_cli(a, b, "--text", dataset, "--max-text-bytes", "800", "--no-save")
    assert code == 0, err
    header, *lines = out.strip().splitlines()
    assert header.split()[:3] == ["model", "bits_per_byte", "perplexity"] and len(lines) == 2
    assert "solve_rate" not in out  # no world asked, none measured


def test_eval_says_how_many_held_out_programs_a_runs_records_hold(runs, run_cli, tmp_path: Path) -> None:
    """A run trained on English text holds none of them; a run whose self-play log says it practised two of them
    is reported with both, per type, with a warning (a held-out or duplicate proposal was never practised)."""
    import shutil

    from desktop_app.engine.tasks.mini_world import MiniWorld

    _, a, _ = runs
    code, out, err = run_cli(a, "--world", "mini", "--per-type", "6", "--json", "--no-save")
    assert code == 0, err
    row = json.loads(out)
    assert {t: row[f"heldout_in_training/{t}"] for t in TYPES} == dict.fromkeys(TYPES, 0)
    leaky = tmp_path / "leaky"
    shutil.copytree(a, leaky)
    held = MiniWorld().heldout_set("abduction", 6, 9002)
    (leaky / "selfplay.jsonl").write_text(json.dumps({"round": 1, "proposals": [
        {"program": held[0].program, "verdict": "valid"}, {"program": held[3].program, "verdict": "valid"},
        {"program": held[4].program, "verdict": "held-out"}, {"program": held[5].program, "verdict": "duplicate"}]})
        + "\n")
    code, out, err = run_cli(leaky, "--world", "mini", "--per-type", "6", "--no-save")
    assert code == 0, err
    assert "trained on held-out programs" in err and "abduction 2 of 6" in err
    header, line = out.strip().splitlines()
    assert line[header.index("heldout_in_training/abduction"):].split()[0] == "2"


def test_greedy_pass_at_1_matches_a_second_run_on_one_thread(runs, run_cli) -> None:
    _, a, _ = runs
    first = json.loads(run_cli(a, "--world", "mini", "--per-type", "6", "--json", "--no-save")[1])
    again = json.loads(run_cli(a, "--world", "mini", "--per-type", "6", "--json", "--no-save", "--threads", "1")[1])
    assert {k: v for k, v in first.items() if k != "seconds"} == {k: v for k, v in again.items() if k != "seconds"}


@pytest.mark.parametrize("argv, needle", [
    (["no-such-run"], "does not exist"),
    (["RUN", "--world-options", "{depth"], "--world-options must be JSON"),
    (["RUN", "--qa", "QA"], "line 2"),
    (["RUN", "--text", "no-such-text"], "does not exist"),
    (["RUN", "--samples", "100"], "at most 64"),
    (["RUN", "--world", "none"], "nothing to evaluate"),
    (["RUN", "--threads", "-1"], "threads"),
])
def test_bad_input_is_a_one_line_error_and_nothing_is_written(runs, tmp_path: Path, run_cli, argv, needle) -> None:
    _, a, _ = runs
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "q", "answer": "a"}\n{"question": "no answer"}\n')
    before = (a / RESULTS_FILE).read_bytes() if (a / RESULTS_FILE).exists() else None
    argv = [str(a) if x == "RUN" else str(qa) if x == "QA" else x for x in argv]
    code, out, err = run_cli(*argv)
    assert code == 2 and needle in err and err.count("\n") == 1 and not out, err
    assert ((a / RESULTS_FILE).read_bytes() if (a / RESULTS_FILE).exists() else None) == before
