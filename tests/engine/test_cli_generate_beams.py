"""`python -m desktop_app generate --beams N --length-penalty A`: the engine's beam search, clear errors."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from desktop_app.cli import generate as generate_cli
from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.specs import ModelSpec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-beams") / "model"
    spec = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 64, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=2).save_pretrained(folder)
    hf_tokenizer(train_tokenizer(["hello world, the cat sat on the mat"] * 20, "byte-bpe", 320)).save_pretrained(folder)
    return folder


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    generate_cli.add_arguments(parser)
    return generate_cli.run(parser.parse_args(argv))


def _engine_beams(model_dir: Path, prompt: str, **settings) -> list:
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    events = stream_text(load_model(model_dir), prompt, GenerateSpec(temperature=0.0, **settings), threads=1)
    return sorted((e for e in events if e.type == "generation"), key=lambda e: e.sample)


def test_beams_json_are_the_engines_best_beams(model_dir, capsys):
    assert _run([str(model_dir), "--prompt", "hello", "--max-new-tokens", "10", "--beams", "4", "--length-penalty",
                 "0.5", "--early-stopping", "true", "--samples", "3", "--json"]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    ref = _engine_beams(model_dir, "hello", max_new_tokens=10, num_beams=4, length_penalty=0.5,
                        early_stopping="true", samples=3)
    assert [o["sample"] for o in objects] == [0, 1, 2]
    assert [o["token_ids"] for o in objects] == [r.token_ids for r in ref]
    assert [o["text"] for o in objects] == [r.text for r in ref]
    assert len({tuple(o["token_ids"]) for o in objects}) == 3  # three different beams


def test_beams_text_mode_prints_the_best_beam(model_dir, capsys):
    assert _run([str(model_dir), "--prompt", "the cat", "--max-new-tokens", "8", "--beams", "3"]) == 0
    out = capsys.readouterr().out
    best = _engine_beams(model_dir, "the cat", max_new_tokens=8, num_beams=3)[0]
    assert out == best.text + "\n"
    # One beam is the greedy path (temperature 0 given explicitly, as without --beams).
    assert _run([str(model_dir), "--prompt", "the cat", "--max-new-tokens", "8", "--beams", "1", "--temperature",
                 "0", "--json"]) == 0
    greedy = json.loads(capsys.readouterr().out)
    assert greedy["token_ids"] == _engine_beams(model_dir, "the cat", max_new_tokens=8)[0].token_ids


@pytest.mark.parametrize(("argv", "message"), [
    (["--beams", "0"], "num_beams must be a whole number of at least 1"),
    (["--beams", "65"], "at most 64"),
    (["--beams", "3", "--temperature", "0.7"], "set temperature to 0"),
    (["--beams", "3", "--length-penalty", "nan"], "length_penalty must be between"),
    (["--beams", "3", "--length-penalty", "inf"], "length_penalty must be between"),
    (["--beams", "2", "--samples", "3"], "samples 3 cannot exceed num_beams 2"),
])
def test_bad_beam_options_are_one_clear_error(model_dir, argv, message):
    with pytest.raises(UserError, match=message):
        _run([str(model_dir), "--prompt", "x", *argv])


def test_whole_cli_refuses_sampling_beams_with_exit_code_2(model_dir):
    proc = subprocess.run([sys.executable, "-m", "desktop_app", "generate", str(model_dir), "--prompt", "x", "--beams",
                           "2", "--temperature", "0.9"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")
    assert "temperature" in proc.stderr
