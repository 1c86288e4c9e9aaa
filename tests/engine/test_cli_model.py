"""`python -m desktop_app model`: table, --json, --list-presets, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import desktop_app.cli as cli
from desktop_app.engine.model.sizing import count_parameters
from desktop_app.engine.presets import PRESETS
from desktop_app.engine.specs import ModelSpec


@pytest.fixture
def run_cli(monkeypatch, capsys):
    # Only this verb's module is needed (other verbs may be absent while the tree is being built).
    monkeypatch.setattr(cli, "VERBS", {"model": cli.VERBS["model"]})

    def run(*argv):
        code = cli.main(["model", *map(str, argv)])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_preset_table(run_cli):
    code, out, err = run_cli("--preset", "small")
    assert code == 0 and err == ""
    assert f"{count_parameters(PRESETS['small'][1]):,}" in out
    for needle in ("AdamW states", "activations", "FLOPs per token", "compute-optimal tokens"):
        assert needle in out


def test_json_output(run_cli):
    code, out, _ = run_cli("--preset", "tiny", "--json", "--batch-size", "4", "--precision", "bf16")
    assert code == 0
    data = json.loads(out)
    assert data["params"] == count_parameters(PRESETS["tiny"][1])
    assert set(data["memory"]) >= {"weights", "gradients", "optimizer", "activations", "total"}
    assert data["flops_per_token"] > 6 * data["params"] * 0.5
    assert data["batch_size"] == 4 and data["precision"] == "bf16"
    assert data["compute_optimal_tokens"] == 20 * data["params"]


def test_spec_file_and_hf_config(run_cli, tmp_path):
    spec = ModelSpec("gpt2", 1000, 64, 2, 4, 4, 256, 64)
    path = tmp_path / "spec.json"
    path.write_text(spec.to_json())
    code, out, _ = run_cli("--spec", path, "--json")
    assert code == 0 and json.loads(out)["params"] == count_parameters(spec)
    # a HF config.json (e.g. of an export) works as well
    from desktop_app.engine.model.architecture import hf_config

    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(hf_config(spec).to_json_string())
    code, out, _ = run_cli("--spec", folder, "--json")
    assert code == 0 and json.loads(out)["params"] == count_parameters(spec)


def test_list_presets(run_cli):
    code, out, _ = run_cli("--list-presets")
    assert code == 0
    for name in PRESETS:
        assert name in out
    code, out, _ = run_cli("--list-presets", "--json")
    rows = json.loads(out)["presets"]
    assert [r["name"] for r in rows] == list(PRESETS)
    assert all(r["params"] == count_parameters(PRESETS[r["name"]][1]) for r in rows)


@pytest.mark.parametrize("content, needle", [
    ('{"family": "llama", "d_model": 100, "n_heads": 8}', "d_model 100 is not divisible by 8 heads"),
    ('{"family": "llama", "d_modle": 100}', "unknown ModelSpec field(s): d_modle"),
    ('{"family": "llama", ', "is not valid JSON"),
    ('[1, 2]', "must hold a JSON object"),
    ('{"family": "rnn", "n_layers": "two"}', "n_layers must be a whole number"),
])
def test_bad_spec_files(run_cli, tmp_path, content, needle):
    path = tmp_path / "spec.json"
    path.write_text(content)
    code, out, err = run_cli("--spec", path)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1
    assert path.read_text() == content  # nothing touched


def test_every_problem_reported_at_once(run_cli, tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"family": "llama", "d_model": 100, "n_heads": 8, "n_kv_heads": 3, "dropout": 2.0}))
    code, _, err = run_cli("--spec", path)
    assert code == 2
    for needle in ("not divisible by 8 heads", "n_kv_heads", "dropout"):
        assert needle in err


@pytest.mark.parametrize("argv, needle", [
    ((), "give --preset NAME or --spec"),
    (("--preset", "huge"), "unknown preset 'huge'"),
    (("--spec", "/nonexistent/spec.json"), "does not exist"),
    (("--preset", "tiny", "--batch-size", "0"), "--batch-size must be at least 1"),
])
def test_usage_errors(run_cli, argv, needle):
    code, _, err = run_cli(*argv)
    assert code == 2 and needle in err and "Traceback" not in err


def test_as_a_process_without_torch(tmp_path):
    # The real entry point; also proves `model` never imports torch (instant in the designer).
    code = ("import sys, desktop_app.cli as c; c.VERBS = {'model': c.VERBS['model']}; "
            "rc = c.main(['model', '--preset', 'gpt2-small', '--json']); "
            "assert 'torch' not in sys.modules; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["params"] == 124_439_808 + 47 * 768  # its 50257 tokens padded to 50304
