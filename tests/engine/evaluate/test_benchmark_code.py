"""HumanEval-style code benchmarks are scored in our sandbox, never by the harness's own exec.

A tiny code task in the harness's own YAML format (humaneval's shape: unsafe_code, a `!function` pass_at_k metric
and a filter that joins prompt and completion) over local JSON; its own utils.pass_at_k fails the test if the
harness ever calls it. A fixed-answer LM gives a correct, a wrong and hostile completions.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from desktop_app.engine.evaluate.benchmark_code import (
    CodeSandbox,
    CodeTaskRefused,
    is_code_task,
    pass_at_k,
    sandboxed_pass_at_k,
    take_over_code_tasks,
)
from desktop_app.engine.sandbox import Limits

FAST = Limits(cpu_seconds=1.0, memory_mb=256, wall_seconds=3.0)

DOCS = [
    {"prompt": "def add(a, b):\n", "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
     "entry_point": "add"},
    {"prompt": "def double(x):\n", "test": "def check(candidate):\n    assert candidate(4) == 8\n",
     "entry_point": "double"},
    {"prompt": "def sub(a, b):\n", "test": "def check(candidate):\n    assert candidate(5, 3) == 2\n",
     "entry_point": "sub"},
    {"prompt": "def neg(a):\n", "test": "def check(candidate):\n    assert candidate(1) == -1\n",
     "entry_point": "neg"},
    {"prompt": "def one():\n", "test": "def check(candidate):\n    assert candidate() == 1\n",
     "entry_point": "one"},
]


def _completions(marker: str) -> dict[str, str]:
    return {
        "def add(a, b):\n": "    return a + b\n",  # correct
        "def double(x):\n": "    return x + 1\n",  # wrong
        # hostile, each stopped by a different layer: a file write, a shell, an endless loop
        "def sub(a, b):\n": f"    open({marker!r}, 'w').write('x')\n    return a - b\n",
        "def neg(a):\n": f"    import os\n    os.system('touch {marker}')\n    return -a\n",
        "def one():\n": "    while True:\n        pass\n",
    }


YAML = """\
task: azr_tiny_code
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
unsafe_code: true
output_type: generate_until
test_split: test
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{test}}}}\\ncheck({{{{entry_point}}}})"
metric_list:
  - metric: !function utils.pass_at_k
    aggregation: mean
    higher_is_better: true
    k: [1]
generation_kwargs:
  until: ["\\ndef"]
  max_gen_toks: 64
  do_sample: false
repeats: 1
num_fewshot: 0
filter_list:
  - name: create_test
    filter:
      - function: custom
        filter_fn: !function utils.build_predictions
{extra}
"""

UTILS = '''\
def pass_at_k(references, predictions, k=None):
    raise AssertionError("the harness's own exec-based scoring was called")


def build_predictions(resps, docs):
    return [[doc["prompt"] + r for r in resp] for resp, doc in zip(resps, docs)]


def process(doc, results):
    raise AssertionError("a refused task ran")
'''


def _task_folder(tmp_path, extra: str = ""):
    folder = tmp_path / "code_tasks"
    folder.mkdir()
    data = folder / "code.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (folder / "azr_tiny_code.yaml").write_text(YAML.format(data=data, extra=extra))
    (folder / "utils.py").write_text(UTILS)
    return folder


def _task_dict(folder, nested: bool = False):
    """The harness's task dict as the app loads it (TaskManager.load), or in the older nested shape."""
    from lm_eval.tasks import TaskManager, get_task_dict

    manager = TaskManager(include_path=str(folder), include_defaults=False)
    return get_task_dict(["azr_tiny_code"], manager) if nested else manager.load(["azr_tiny_code"])


def _fixed_lm(answers: dict[str, str]):
    from lm_eval.api.model import LM

    class FixedAnswers(LM):
        def generate_until(self, requests, disable_tqdm=False):
            return [answers[r.args[0]] for r in requests]

        def loglikelihood(self, requests, disable_tqdm=False):
            raise AssertionError("not a log-likelihood task")

        def loglikelihood_rolling(self, requests, disable_tqdm=False):
            raise AssertionError("not a log-likelihood task")

    return FixedAnswers()


def test_code_task_is_scored_in_the_sandbox(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    from lm_eval.evaluator import evaluate

    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "escaped"
    task_dict = _task_dict(_task_folder(tmp_path))
    assert take_over_code_tasks(task_dict, FAST) == ["azr_tiny_code"]
    # the harness's unsafe-code guard is satisfied without confirm_run_unsafe_code: our sandbox scores it
    result = evaluate(_fixed_lm(_completions(str(marker))), task_dict["tasks"], log_samples=True, bootstrap_iters=0)
    samples = {s["doc"]["entry_point"]: s["pass@1"] for s in result["samples"]["azr_tiny_code"]}
    assert samples == {"add": 1.0, "double": 0.0, "sub": 0.0, "neg": 0.0, "one": 0.0}
    assert result["results"]["azr_tiny_code"]["pass@1,create_test"] == pytest.approx(1 / 5)
    assert not marker.exists()


def test_unsafe_task_is_refused_without_take_over(tmp_path):
    """The guard we lift stays in place for anyone who did not take the task over."""
    pytest.importorskip("lm_eval")
    from lm_eval.evaluator import evaluate

    task_dict = _task_dict(_task_folder(tmp_path))
    with pytest.raises(ValueError, match="unsafe"):
        evaluate(_fixed_lm(_completions(str(tmp_path / "x"))), task_dict["tasks"], bootstrap_iters=0)


def test_code_task_with_its_own_scoring_code_is_refused(tmp_path):
    pytest.importorskip("lm_eval")
    task_dict = _task_dict(_task_folder(tmp_path, "process_results: !function utils.process"), nested=True)
    with pytest.raises(CodeTaskRefused) as caught:
        take_over_code_tasks(task_dict, FAST)
    message = str(caught.value)
    assert "azr_tiny_code" in message and "process_results" in message and "leave azr_tiny_code out" in message


def test_tasks_without_code_are_left_alone(monkeypatch):
    pytest.importorskip("lm_eval")
    from pathlib import Path

    from lm_eval.tasks import TaskManager

    tasks = Path(__file__).resolve().parents[2] / "fixtures" / "benchmark_tasks"
    monkeypatch.chdir(tasks)  # its data_files are relative to its folder
    task_dict = TaskManager(include_path=str(tasks), include_defaults=False).load(["azr_tiny"])
    assert take_over_code_tasks(task_dict) == []
    assert sorted(task_dict["tasks"]) == ["azr_tiny_gen", "azr_tiny_mc"]
    assert not any(is_code_task(t) for t in task_dict["tasks"].values())


def test_pass_at_k_matches_code_eval_estimator():
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(3, 2, 2) == 1.0


def test_sandboxed_pass_at_k_several_samples():
    test = textwrap.dedent("""\
        def check(candidate):
            assert candidate(3) == 9
        check(square)
        """)
    programs = ["def square(x):\n    return x * x\n", "def square(x):\n    return x + x\n",
                "def square(x):\n    return x ** 2\n", "def square(x):\n    raise ValueError('no')\n"]
    scores = sandboxed_pass_at_k([test], [programs], [1, 2, 8], CodeSandbox(FAST))
    assert scores == {"pass@1": pytest.approx(0.5), "pass@2": pytest.approx(1 - 1 / 6)}  # pass@8: too few samples
