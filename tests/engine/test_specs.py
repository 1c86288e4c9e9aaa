"""Specs: JSON round trips, every problem reported at once, unknown keys refused, help text present."""

from __future__ import annotations

import dataclasses
import json

import pytest

from desktop_app.engine.presets import PRESETS, preset
from desktop_app.engine.spec_base import help_text
from desktop_app.engine.specs import (
    DataSpec,
    GenerateSpec,
    ModelSpec,
    RunConfig,
    SpecError,
    TrainSpec,
    load_json,
    save_json,
)

ALL_SPECS = (ModelSpec, DataSpec, TrainSpec, GenerateSpec, RunConfig)


@pytest.mark.parametrize("spec_cls", ALL_SPECS)
def test_defaults_are_valid_and_round_trip(spec_cls) -> None:
    spec = spec_cls()
    if spec_cls is RunConfig:
        spec = RunConfig(model=ModelSpec().to_dict(), dataset="d", train=TrainSpec().to_dict())
    assert spec.validate() == []
    assert spec_cls.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("spec_cls", ALL_SPECS)
def test_every_field_has_help_text(spec_cls) -> None:
    for f in dataclasses.fields(spec_cls):
        assert len(help_text(spec_cls, f.name)) > 10, f.name


def test_model_spec_reports_every_problem_at_once() -> None:
    problems = ModelSpec(d_model=100, n_heads=8, n_kv_heads=3, dropout=2.0).validate()
    text = " | ".join(problems)
    assert "d_model 100 is not divisible by 8 heads" in text
    assert "8 heads cannot be shared evenly among 3 key/value heads" in text
    assert "dropout must be between 0 and 0.9" in text
    assert len(problems) == 3


def test_model_spec_rejects_nonsense_types_with_words() -> None:
    problems = ModelSpec(n_layers=0, vocab_size="lots").validate()  # type: ignore[arg-type]
    assert any("n_layers must be a whole number of at least 1" in p for p in problems)
    assert any("vocab_size must be a whole number" in p for p in problems)


def test_gpt2_without_gqa_and_odd_rope_head() -> None:
    assert "gpt2 has no grouped-query attention" in " ".join(ModelSpec(family="gpt2", n_kv_heads=2).validate())
    assert "must be even" in " ".join(ModelSpec(d_model=60, n_heads=4, n_kv_heads=4).validate())


def test_unknown_keys_and_bad_types_are_refused_by_name() -> None:
    with pytest.raises(SpecError, match="unknown ModelSpec field"):
        ModelSpec.from_dict({"d_modle": 64})
    with pytest.raises(SpecError, match="n_layers must be a whole number"):
        ModelSpec.from_dict({"n_layers": "four"})
    assert ModelSpec.from_dict({"n_layers": 4.0}).n_layers == 4  # JSON numbers: 4.0 is fine for an int


def test_train_spec_batch_arithmetic() -> None:
    spec = TrainSpec(batch_size=16, micro_batch_size=4)
    assert (spec.micro_batch, spec.accumulation_steps) == (4, 4)
    assert TrainSpec(batch_size=8).accumulation_steps == 1
    assert "not a multiple" in " ".join(TrainSpec(batch_size=10, micro_batch_size=4).validate())
    assert "cannot exceed" in " ".join(TrainSpec(batch_size=2, micro_batch_size=4).validate())


def test_data_spec_overlap_must_leave_a_stride() -> None:
    assert DataSpec(context_length=64, overlap=16).stride == 48
    assert "overlap 64 must be smaller" in " ".join(DataSpec(context_length=64, overlap=64).validate())


def test_generate_spec_limits() -> None:
    problems = GenerateSpec(temperature=-1, top_p=2, samples=0, stop=[""]).validate()
    assert len(problems) == 4


def test_run_config_collects_nested_problems(tmp_path) -> None:
    cfg = RunConfig(model=ModelSpec(d_model=100, n_heads=8).to_dict(), train={"steps": 0})
    problems = cfg.validate()
    assert "model: d_model 100 is not divisible by 8 heads" in problems
    assert any(p.startswith("train: steps") for p in problems)
    assert any("dataset is not set" in p for p in problems)
    good = RunConfig(model=preset("tiny").to_dict(), dataset=str(tmp_path), train=TrainSpec().to_dict())
    good.save(tmp_path / "run.json")
    assert RunConfig.load(tmp_path / "run.json") == good
    assert not list(tmp_path.glob(".run.json*"))  # atomic write left no temp file


def test_load_json_errors_are_readable(tmp_path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(SpecError, match=r"not valid JSON.*line 1"):
        load_json(bad)
    save_json({"a": 1}, tmp_path / "ok.json")
    assert json.loads((tmp_path / "ok.json").read_text()) == {"a": 1}


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_valid_copies(name) -> None:
    spec = preset(name)
    assert spec.validate() == []
    spec.n_layers += 1
    assert preset(name).n_layers != spec.n_layers  # callers get a copy


def test_atomic_writes_get_normal_file_modes(tmp_path) -> None:
    import os

    from desktop_app.engine.fileio import atomic_write_text

    umask = os.umask(0o022)
    os.umask(umask)
    atomic_write_text(tmp_path / "a.json", "{}")
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == 0o666 & ~umask
