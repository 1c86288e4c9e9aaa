"""Run config fields of the fine-tuning methods: defaults, old run.json files, every problem at once, --option."""

from __future__ import annotations

import dataclasses

import pytest

from desktop_app.engine.method_options import DPOOptions, GRPOOptions, SelfPlayOptions, SFTOptions, parse_option
from desktop_app.engine.spec_base import help_text
from desktop_app.engine.specs import OBJECTIVES, AdapterSpec, ModelSpec, RunConfig, SpecError, TrainSpec
from desktop_app.engine.train.setup import canonical_config, config_diff


@pytest.mark.parametrize("spec_cls", (AdapterSpec, SFTOptions, DPOOptions, GRPOOptions, SelfPlayOptions))
def test_defaults_valid_round_trip_and_help(spec_cls) -> None:
    spec = spec_cls()
    assert spec.validate() == []
    assert spec_cls.from_json(spec.to_json()) == spec
    for f in dataclasses.fields(spec_cls):
        assert len(help_text(spec_cls, f.name)) > 10, f.name


def test_objectives_and_choices_agree_with_the_data_module() -> None:
    from desktop_app.engine.finetune import chat_template, examples
    from desktop_app.engine.method_options import LOSS_ON, OVERLONG

    assert {"causal_lm", "sft", "dpo"} <= set(OBJECTIVES)
    assert set(LOSS_ON) == set(chat_template.LOSS_ON) and set(OVERLONG) == set(examples.OVERLONG)


def test_a_run_json_written_before_these_fields_still_loads_and_resumes_without_a_diff() -> None:
    old = {"model": ModelSpec().to_dict(), "base_model": "", "dataset": "/d", "objective": "causal_lm",
           "train": {"steps": 5}, "seed": 1, "format_version": 1}
    config = RunConfig.from_dict(old)
    assert config.data == [] and config.adapter == {} and config.method_options == {}
    assert config.validate() == []
    assert config_diff(canonical_config(old), canonical_config(config.to_dict())) == []
    # an explicit default and an omitted field compare equal
    explicit = config.replace(adapter=AdapterSpec().to_dict(), train=TrainSpec(steps=5).to_dict())
    assert config_diff(canonical_config(old), canonical_config(explicit.to_dict())) == []


def test_finetune_configs_report_every_problem_at_once() -> None:
    bad = RunConfig(objective="dpo", adapter={"kind": "dora", "rank": 0},
                    method_options={"beta": -1.0, "loss": "hinge", "bogus": 1})
    problems = " | ".join(bad.validate())
    assert "fine-tunes a base model: set base_model" in problems
    assert "data is not set: give the preference files" in problems
    assert "adapter: kind must be one of none, lora, qlora" in problems
    assert "adapter: rank must be a whole number of at least 1" in problems
    assert "unknown DPOOptions field(s): bogus" in problems
    bad = RunConfig(base_model="b", objective="dpo", data=["p.jsonl"], method_options={"beta": -1.0, "loss": "x"})
    problems = " | ".join(bad.validate())
    assert "beta must be between" in problems and "loss must be one of sigmoid, ipo" in problems
    assert RunConfig(base_model="b", objective="sft", data=["c.jsonl"], adapter={"kind": "lora"}).validate() == []
    assert "base_model_sha256 must be 64" in " ".join(
        RunConfig(base_model="b", objective="sft", data=["c"], base_model_sha256="xyz").validate())
    assert "set base_model" in " ".join(RunConfig(model=ModelSpec().to_dict(), dataset="d",
                                                  adapter={"kind": "lora"}).validate())


def test_parse_option_types_values_by_the_option() -> None:
    assert parse_option("dpo", "beta=0.25") == ("beta", 0.25)
    assert parse_option("sft", "packing=yes") == ("packing", True)
    assert parse_option("sft", "max_len=512") == ("max_len", 512)
    assert parse_option("sft", "loss_on=all") == ("loss_on", "all")
    assert parse_option("sft", "val_data=a.jsonl,b.jsonl") == ("val_data", ["a.jsonl", "b.jsonl"])
    with pytest.raises(SpecError, match="unknown option 'beta' for the sft method"):
        parse_option("sft", "beta=1")
    with pytest.raises(SpecError, match="key=value"):
        parse_option("sft", "packing")


def test_family_targets_reads_the_family_without_loading_the_model(tmp_path) -> None:
    import json

    from desktop_app.engine.finetune.adapters import family_targets
    from desktop_app.engine.model.families import FAMILIES

    llama, gpt2, odd = tmp_path / "llama", tmp_path / "gpt2", tmp_path / "odd"
    for folder, model_type in ((llama, "llama"), (gpt2, "gpt2"), (odd, "bert")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert family_targets(llama) == list(FAMILIES["llama"].lora_targets)
    assert family_targets(gpt2) == ["c_attn", "c_proj", "c_fc"]
    assert family_targets(odd) == [] and family_targets(tmp_path / "missing") == []
    adapter = tmp_path / "adapter"  # an adapter folder: its base's family
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(gpt2)}))
    assert family_targets(adapter) == list(FAMILIES["gpt2"].lora_targets)
