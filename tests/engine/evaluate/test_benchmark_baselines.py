"""Which model each evaluated model is compared with (its base when in the table, else the first), the local data
files of a task YAML, and the harness's figures as the eval record's keys: no harness needed."""

from __future__ import annotations

import json
from pathlib import Path

from desktop_app.engine.evaluate.baselines import base_of, differences
from desktop_app.engine.evaluate.benchmark_files import has_relative_files, resolve_data_files


def _run(folder: Path, base: str = "") -> Path:
    (folder / "checkpoints" / "step-00000002").mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"objective": "sft", **({"base_model": base} if base else {})}))
    return folder


def test_base_of_a_fine_tune_its_checkpoint_and_an_adapter(tmp_path: Path) -> None:
    base = tmp_path / "smol"
    base.mkdir()
    run = _run(tmp_path / "ft", str(base))
    assert base_of(run) == str(base) and base_of(run / "checkpoints" / "step-00000002") == str(base)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "HuggingFaceTB/SmolLM2"}))
    assert base_of(adapter) == "HuggingFaceTB/SmolLM2"
    assert base_of(_run(tmp_path / "scratch")) is None and base_of(tmp_path / "missing") is None
    assert base_of(base) is None  # someone else's folder records nothing


def test_differences_against_the_base_when_present_else_the_first(tmp_path: Path) -> None:
    base = tmp_path / "smol"
    base.mkdir()
    ft = _run(tmp_path / "ft", str(base))
    other = _run(tmp_path / "other")
    rows = [{"model": str(other), "bench/arc/acc": 0.30, "bench/arc/acc/stderr": 0.01, "bench/arc/items": 50},
            {"model": str(base), "bench/arc/acc": 0.40, "bench/arc/acc/stderr": 0.01, "bench/arc/items": 50},
            {"model": str(ft) + "/", "bench/arc/acc": 0.35, "world": "mini"}]
    found = differences(rows)
    assert str(other) not in found  # the first row is the reference
    assert found[str(base)][0] == str(other)
    assert abs(found[str(base)][1]["bench/arc/acc"] - 0.10) < 1e-12
    reference, delta = found[str(ft) + "/"]
    assert reference == str(base) and abs(delta["bench/arc/acc"] + 0.05) < 1e-12
    assert set(delta) == {"bench/arc/acc"}  # no stderr, counts or words
    assert differences([]) == {}


def test_relative_data_files_are_read_beside_the_yaml(tmp_path: Path) -> None:
    kwargs = {"data_files": {"test": "t.jsonl", "train": ["a.jsonl", "/abs/b.jsonl"],
                             "validation": "hf://datasets/x/v.jsonl"}, "field": "rows"}
    out = resolve_data_files(kwargs, tmp_path)
    assert out == {"data_files": {"test": str(tmp_path / "t.jsonl"), "train": [str(tmp_path / "a.jsonl"),
                                                                               "/abs/b.jsonl"],
                                  "validation": "hf://datasets/x/v.jsonl"}, "field": "rows"}
    assert kwargs["data_files"]["test"] == "t.jsonl"  # the task's own config untouched
    assert resolve_data_files({"data_files": "d/*.json"}, tmp_path) == {"data_files": str(tmp_path / "d/*.json")}
    assert has_relative_files({"dataset_path": "json", "dataset_kwargs": {"data_files": "x.jsonl"}})
    assert not has_relative_files({"dataset_path": "json", "dataset_kwargs": {"data_files": "/x.jsonl"}})
    assert not has_relative_files({"dataset_path": "cais/mmlu", "dataset_name": "all"})


def test_harness_figures_become_the_record_keys() -> None:
    from desktop_app.engine.evaluate import benchmarks

    results = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25,
                                     "exact_match_stderr,strict-match": 0.05, "exact_match,none": 0.5,
                                     "exact_match_stderr,none": "N/A", "sample_len": 8}},
               "n-shot": {"gsm8k": 5}, "n-samples": {"gsm8k": {"original": 1319, "effective": 8}}}
    version = {"benchmark_harness": "lm_eval 9.9"}
    out = {**benchmarks.benchmark_metrics(results), **version}
    assert out == {"bench/gsm8k/exact_match[strict-match]": 0.25, "bench/gsm8k/exact_match[strict-match]/stderr": 0.05,
                   "bench/gsm8k/exact_match": 0.5, "bench/gsm8k/exact_match/stderr": None,
                   "bench/gsm8k/items": 8, "bench/gsm8k/fewshot": 5, **version}


def test_without_the_harness_eval_benchmark_and_fetch_are_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """The default install (no [benchmarks] extra): asking for a benchmark says how to install the harness, in one
    line, exit 2, before any model loads; `benchmarks list` still lists the popular ones."""
    import sys

    from desktop_app import cli

    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` fails as where it is not installed
    model = tmp_path / "model"
    model.mkdir()
    for argv in (["eval", str(model), "--benchmark", "arc_easy"], ["benchmarks", "fetch", "arc_easy"]):
        code = cli.main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, (argv, err)
        assert err.startswith("error: ") and 'pip install "azr-model-trainer[benchmarks]"' in err, err
    assert cli.main(["benchmarks", "list"]) == 0
    out = capsys.readouterr().out
    assert "mmlu" in out and "hellaswag" in out
