"""`python -m desktop_app generate`: streaming output, --json objects, one-line errors."""

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
    folder = tmp_path_factory.mktemp("cli") / "model"
    spec = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 64, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=2).save_pretrained(folder)
    hf_tokenizer(train_tokenizer(["hello world, the cat sat on the mat"] * 20, "byte-bpe", 320)).save_pretrained(folder)
    return folder


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    generate_cli.add_arguments(parser)
    return generate_cli.run(parser.parse_args(argv))


def test_json_output_one_object_per_sample(model_dir, capsys):
    rc = _run([str(model_dir), "--prompt", "hello", "--max-new-tokens", "6", "--temperature", "0.9",
               "--top-k", "20", "--top-p", "0.95", "--min-p", "0.01", "--repetition-penalty", "1.1",
               "--samples", "3", "--seed", "4", "--json"])
    assert rc == 0
    lines = capsys.readouterr().out.strip().splitlines()
    objects = [json.loads(line) for line in lines]
    assert [o["sample"] for o in objects] == [0, 1, 2]
    for o in objects:
        assert set(o) >= {"text", "token_ids", "ttft_ms", "tokens_per_s", "finish_reason"}
        assert len(o["token_ids"]) == 6 and o["finish_reason"] == "length"


def test_streams_text_and_is_reproducible(model_dir, capsys):
    assert _run([str(model_dir), "--prompt", "hello", "--max-new-tokens", "8", "--temperature", "0"]) == 0
    first = capsys.readouterr().out
    assert _run([str(model_dir), "--prompt", "hello", "--max-new-tokens", "8", "--temperature", "0", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert first == obj["text"] + "\n"


def test_several_samples_in_text_mode(model_dir, capsys):
    assert _run([str(model_dir), "--prompt", "hi", "--max-new-tokens", "4", "--samples", "2", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--- sample 0 ---\n") and "--- sample 1 ---\n" in out


def test_stop_string_option(model_dir, capsys):
    assert _run([str(model_dir), "--prompt", "hello", "--max-new-tokens", "20", "--temperature", "0", "--json"]) == 0
    text = json.loads(capsys.readouterr().out)["text"]
    start = next(i for i in range(1, len(text) - 1) if "\ufffd" not in text[i:i + 2])
    stop = text[start:start + 2]
    assert _run([str(model_dir), "--prompt", "hello", "--max-new-tokens", "20", "--temperature", "0",
                 "--stop", stop, "--stop", "zzzz", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["finish_reason"] == "stop" and obj["text"] == text[: text.index(stop)]


def test_user_errors(model_dir, tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        _run([str(tmp_path / "missing"), "--prompt", "x"])
    with pytest.raises(UserError, match="temperature"):
        _run([str(model_dir), "--prompt", "x", "--temperature", "-2"])
    with pytest.raises(UserError, match="chat template"):
        plain = tmp_path / "plain"
        for f in model_dir.iterdir():
            (plain / f.name).parent.mkdir(exist_ok=True)
            (plain / f.name).write_bytes(f.read_bytes())
        cfg = json.loads((plain / "tokenizer_config.json").read_text())
        cfg.pop("chat_template", None)
        (plain / "tokenizer_config.json").write_text(json.dumps(cfg))
        (plain / "chat_template.jinja").unlink(missing_ok=True)
        _run([str(plain), "--prompt", "x", "--chat", "--max-new-tokens", "2"])


def test_whole_cli_one_line_error_and_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "desktop_app", "generate", str(tmp_path / "nope"), "--prompt", "x"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")
    assert "does not exist" in proc.stderr


def test_chat_with_a_system_prompt(model_dir, capsys, monkeypatch):
    from desktop_app.engine.generate import prompts

    rendered: list[list[dict]] = []
    real = prompts.encode_messages
    monkeypatch.setattr(prompts, "encode_messages", lambda tok, msgs: rendered.append(list(msgs)) or real(tok, msgs))
    assert _run([str(model_dir), "--chat", "--system", "Be brief.", "--prompt", "hello", "--max-new-tokens", "4",
                 "--temperature", "0", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert 1 <= len(obj["token_ids"]) <= 4
    expected = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    assert rendered[-1] == expected  # what the model saw: the system message, then the user's
    # Without --system, --chat is unchanged: the prompt alone as the user's turn.
    assert _run([str(model_dir), "--chat", "--prompt", "hello", "--max-new-tokens", "4", "--temperature", "0"]) == 0
    assert rendered[-1] == expected[1:]


def test_system_prompt_errors(model_dir):
    with pytest.raises(UserError, match="--system needs --chat"):
        _run([str(model_dir), "--system", "Be brief.", "--prompt", "hello"])
    with pytest.raises(UserError, match="does not fit the model's context"):  # never cut: refused whole
        _run([str(model_dir), "--chat", "--system", "the cat sat on the mat " * 30, "--prompt", "hi"])
