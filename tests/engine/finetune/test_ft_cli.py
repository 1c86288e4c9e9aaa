"""The fine-tuning surfaces scripts rely on: `train --method ... --base ... --data ... --json`, `--config`,
`--pipeline`, `export RUN --merge --format hf`, `generate` on an unmerged adapter run, and clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ft_helpers import make_base, newest, preference_pairs, repeat_chats, write_jsonl

from desktop_app.cli import main
from desktop_app.engine.methods import default_lr
from desktop_app.engine.specs import RunConfig


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    chats = root / "chats.jsonl"
    lines = [json.dumps(r) for r in repeat_chats(12)]
    chats.write_text("\n".join([*lines[:3], "{broken", *lines[3:]]) + "\n", encoding="utf-8")
    return {"base": make_base(root / "base", "llama"), "chats": chats,
            "pairs": write_jsonl(root / "pairs.jsonl", preference_pairs(12)), "root": root}


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


COMMON = ["--steps", "3", "--batch-size", "2", "--threads", "1", "--eval-every", "3"]


def test_lora_run_json_events_merge_export_and_generate(world, tmp_path, capsys):
    run = tmp_path / "run"
    code = main(["train", "--method", "lora", "--base", str(world["base"]), "--data", str(world["chats"]),
                 "--lora-rank", "4", "--lora-alpha", "8", "--option", "loss_on=all", *COMMON, "--out", str(run),
                 "--json"])
    assert code == 0
    events = _json_lines(capsys.readouterr().out)
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3] and all(isinstance(e["loss"], float) for e in steps)
    assert any(e["type"] == "log" and f"{world['chats']}:4: error" in e["message"] for e in events)  # verdicts
    assert events[-1]["reason"] == "completed"
    samples = [e for e in events if e["type"] == "sample"]
    assert samples and samples[0]["prompt"].startswith("repeat")  # held-out prompt, even with loss on all tokens
    config = RunConfig.load(run / "run.json")
    assert (config.objective, config.adapter["kind"], config.adapter["rank"]) == ("sft", "lora", 4)
    assert config.method_options == {"loss_on": "all"} and config.train["lr"] == default_lr("sft", "lora")
    assert len(config.base_model_sha256) == 64
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in newest(run).iterdir()}

    out = tmp_path / "merged"
    assert main(["export", str(run), "--merge", "--format", "hf", "--out", str(out)]) == 0
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    assert model(**tok("repeat cat dog", return_tensors="pt")).logits.shape[-1] == model.config.vocab_size
    capsys.readouterr()

    assert main(["generate", str(run), "--prompt", "repeat cat dog", "--chat", "--max-new-tokens", "3",
                 "--temperature", "0", "--json"]) == 0
    result = _json_lines(capsys.readouterr().out)
    assert len(result) == 1 and 1 <= len(result[0]["token_ids"]) <= 3

    assert main(["export", str(run), "--format", "hf", "--out", str(tmp_path / "x")]) == 2
    assert "--merge" in capsys.readouterr().err


def test_dpo_json_steps_carry_the_reward_metrics_and_resume_works(world, tmp_path, capsys):
    run = tmp_path / "dpo"
    code = main(["train", "--method", "dpo", "--adapter", "lora", "--base", str(world["base"]), "--data",
                 str(world["pairs"]), "--option", "beta=0.2", *COMMON, "--save-every", "2", "--out", str(run),
                 "--json"])
    assert code == 0
    steps = [e for e in _json_lines(capsys.readouterr().out) if e["type"] == "step"]
    for key in ("step", "loss", "rewards_chosen", "rewards_rejected", "reward_margin", "preference_accuracy"):
        assert all(key in e for e in steps), key
    assert main(["train", "--resume", str(run), "--json"]) == 0  # already complete: resumes to the end at once
    assert _json_lines(capsys.readouterr().out)[-1]["reason"] == "completed"


def test_config_form_and_pipeline_form(world, tmp_path, capsys):
    config = RunConfig(base_model=str(world["base"]), objective="sft", data=[str(world["chats"])],
                       train={"steps": 2, "batch_size": 2, "threads": 1, "eval_every": 0})
    config.save(tmp_path / "run.json")
    assert main(["train", "--config", str(tmp_path / "run.json"), "--out", str(tmp_path / "a"), "--json"]) == 0
    assert _json_lines(capsys.readouterr().out)[-1]["reason"] == "completed"
    pipeline = {"stages": [{"name": "sft", "config": config.to_dict()},
                           {"name": "dpo", "config": {"objective": "dpo", "data": [str(world["pairs"])],
                                                      "train": {"steps": 2, "batch_size": 2, "threads": 1,
                                                                "eval_every": 0}}}]}
    (tmp_path / "pipeline.json").write_text(json.dumps(pipeline))
    assert main(["train", "--pipeline", str(tmp_path / "pipeline.json"), "--out", str(tmp_path / "p"),
                 "--json"]) == 0
    events = _json_lines(capsys.readouterr().out)
    assert events[-1]["type"] == "finished" and events[-1]["reason"] == "completed"
    assert sum(e["type"] == "finished" for e in events) == 1  # one end for the whole pipeline
    assert main(["train", "--resume", str(tmp_path / "p"), "--json"]) == 0  # nothing left: skips both stages
    assert _json_lines(capsys.readouterr().out)[-1]["reason"] == "completed"


@pytest.mark.parametrize("argv, message", [
    (["--base", "{base}", "--data", "{chats}", "--out", "{out}"], "--base needs --method"),
    (["--method", "sft", "--base", "{base}", "--out", "{out}"], "needs --data"),
    (["--method", "lora", "--adapter", "qlora", "--base", "{base}", "--data", "{chats}", "--out", "{out}"],
     "contradicts"),
    (["--method", "sft", "--base", "{base}", "--data", "{chats}", "--lora-rank", "4", "--out", "{out}"],
     "need adapters"),
    (["--method", "sft", "--base", "{base}", "--data", "{chats}", "--option", "beta=1", "--out", "{out}"],
     "unknown option 'beta' for the sft method"),
    (["--method", "dpo", "--base", "{base}", "--data", "{chats}", "--out", "{out}"], "DPO needs preference pairs"),
    (["--method", "sft", "--base", "{base}", "--data", "{root}/missing.jsonl", "--out", "{out}"], "does not exist"),
    (["--method", "sft", "--base", "{root}/nowhere", "--data", "{chats}", "--out", "{out}"], "does not exist"),
    (["--config", "{root}/x.json", "--data", "{chats}", "--out", "{out}"], "go with --base"),
    (["--pipeline", "{root}/p.json"], "--out DIR is required"),
])
def test_bad_input_is_one_clear_line(world, tmp_path, capsys, argv, message):
    subst = {"base": str(world["base"]), "chats": str(world["chats"]), "out": str(tmp_path / "out"),
             "root": str(world["root"])}
    code = main(["train", *[a.format(**subst) for a in argv]])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and "Traceback" not in err, err
    assert not Path(tmp_path / "out" / "checkpoints").exists()
