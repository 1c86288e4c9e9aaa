"""Base models: common families (full and LoRA), runs of ours, refusals, checksums, never modified in place."""

from __future__ import annotations

import json

import pytest
import torch
from ft_helpers import (
    FAMILIES,
    events_of,
    file_hashes,
    ft_config,
    make_base,
    newest,
    repeat_chats,
    write_jsonl,
)
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.errors import UserError
from desktop_app.engine.model import families
from desktop_app.engine.model.folders import resolve_base, weights_sha256
from desktop_app.engine.train.loop import train


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    return write_jsonl(tmp_path_factory.mktemp("data") / "chats.jsonl", repeat_chats(12))


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_fine_tunes_full_and_with_lora_without_touching_the_base(family, chats, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = make_base(tmp_path / "base", family)
    before = file_hashes(base)
    full = list(train(ft_config(base, [chats], steps=2, batch_size=2), tmp_path / "full"))
    assert full[-1].reason == "completed", full[-1]
    lora = list(train(ft_config(base, [chats], steps=2, batch_size=2, adapter={"kind": "lora", "rank": 2}),
                      tmp_path / "lora"))
    assert lora[-1].reason == "completed", lora[-1]
    assert file_hashes(base) == before  # never modified in place

    folder = newest(tmp_path / "lora")
    adapter_config = json.loads((folder / "adapter_config.json").read_text())
    # all linear projections
    assert sorted(adapter_config["target_modules"]) == sorted(families.FAMILIES[family].lora_targets)
    assert (folder / "adapter_model.safetensors").is_file() and not (folder / "model.safetensors").exists()
    # real peft loads it onto the base
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), folder).eval()
    ids = torch.tensor([[3, 9, 27, 40]])
    assert torch.isfinite(model(input_ids=ids).logits).all()
    # the full run's checkpoint is itself a Hugging Face folder
    assert AutoModelForCausalLM.from_pretrained(newest(tmp_path / "full")).config.model_type == base_type(base)


def base_type(folder) -> str:
    return json.loads((folder / "config.json").read_text())["model_type"]


def test_remote_code_and_non_causal_models_are_refused(chats, tmp_path):
    from transformers import BertConfig, BertModel

    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "config.json").write_text(json.dumps({"model_type": "my_secret_arch",
                                                    "auto_map": {"AutoModelForCausalLM": "modeling.Model"}}))
    (custom / "modeling.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(UserError, match="trust_remote_code"):
        list(train(ft_config(custom, [chats]), tmp_path / "r1"))
    BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=16)).save_pretrained(tmp_path / "bert")
    with pytest.raises(UserError, match="not a causal language model"):
        list(train(ft_config(tmp_path / "bert", [chats]), tmp_path / "r2"))
    with pytest.raises(UserError, match="does not exist"):
        list(train(ft_config(tmp_path / "nowhere", [chats]), tmp_path / "r3"))
    assert not (tmp_path / "r1" / "checkpoints").exists()


def test_a_run_of_ours_is_a_base_and_resume_refuses_a_changed_base(chats, tmp_path):
    # pretrain a tiny model of ours (its tokenizer reserves the chat tokens), then fine-tune the run folder
    dataset = make_dataset(tmp_path / "ds", context=64)
    pre = list(train(tiny_config(dataset, steps=3, save_every=0), tmp_path / "pre"))
    assert pre[-1].reason == "completed"
    config = ft_config(tmp_path / "pre", [chats], steps=4, save_every=2, options={"max_len": 64})
    run = tmp_path / "sft"
    gen = train(config, run)
    events = []
    for event in gen:
        events.append(event)
        if event.type == "checkpoint":
            break
    gen.close()
    recorded = json.loads((run / "run.json").read_text())
    assert recorded["base_model"] == str(newest(tmp_path / "pre"))  # resolved to the run's newest checkpoint
    assert recorded["base_model_sha256"] == weights_sha256(resolve_base(tmp_path / "pre"))
    assert not any("added the chat token" in e.message for e in events_of(events, "log"))  # ours has them

    # the base changes (another checkpoint replaces the weights): resume is refused with a clear message
    from safetensors.torch import load_file, save_file

    weights_file = newest(tmp_path / "pre") / "model.safetensors"
    weights = load_file(str(weights_file))
    name = next(iter(weights))
    weights[name] = weights[name] + 1.0
    save_file(weights, str(weights_file), metadata={"format": "pt"})
    with pytest.raises(UserError, match="cannot resume: the base model"):
        list(train(config, run, resume=True))


def test_changed_hf_base_is_refused_on_resume_with_the_checksums(chats, tmp_path):
    base = make_base(tmp_path / "base", "qwen2")
    config = ft_config(base, [chats], steps=4, save_every=2)
    run = tmp_path / "run"
    gen = train(config, run)
    for event in gen:
        if event.type == "checkpoint":
            break
    gen.close()
    make_base(base, "qwen2", seed=5)  # same folder, other weights
    with pytest.raises(UserError, match=r"has changed since this run started .*checksum was"):
        list(train(config, run, resume=True))
    with pytest.raises(UserError, match="has changed"):  # the recorded config, on a new run, too
        from desktop_app.engine.specs import RunConfig

        list(train(RunConfig.load(run / "run.json"), tmp_path / "again"))
