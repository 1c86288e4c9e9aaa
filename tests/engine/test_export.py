"""Export: HF folder (loaded offline by transformers, same greedy tokens), zip, GGUF (checked by gguf's
reader and by a NumPy forward pass that follows llama.cpp's conventions), CLI, and every refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import desktop_app.cli as cli
from desktop_app.engine.data.tokenization import hf_tokenizer, save_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Finished
from desktop_app.engine.export.hf import export_model
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.specs import ModelSpec
from desktop_app.engine.train.checkpoints import CheckpointPayload, save_checkpoint

PROMPTS = ["the cat", "Привет, мир", "one two three", "🙂 and"]
WORDS = ["the", "cat", "sat", "on", "the", "mat", "and", "the", "dog", "ran", "to", "the", "park", "one", "two",
         "three", "four", "five", "Привет", "мир", "hello", "world", "🙂", "emoji", "text"]


def corpus(n: int = 300) -> list[str]:
    rng = np.random.default_rng(0)
    return [" ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 12)) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(corpus(), "byte-bpe", 300, 2)


def _train_a_little(model, tok, steps: int = 10) -> None:
    """A few AdamW steps so greedy decoding has clear winners (no near-ties between code paths)."""
    ids = [i for text in corpus(64) for i in [*tok.encode(text).ids, 2]]
    data = torch.tensor(ids[: (len(ids) // 33) * 33]).view(-1, 33)[:16]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(data[:, :-1], labels=data[:, :-1]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def make_run(root: Path, tok, spec: ModelSpec, name: str) -> Path:
    """A run folder as training leaves it: run.json, metrics.jsonl, a dataset manifest, a committed checkpoint."""
    torch.manual_seed(0)
    model = build_model(spec, seed=0)
    _train_a_little(model, tok)
    dataset = root / f"{name}-data"
    dataset.mkdir()
    (dataset / "manifest.json").write_text(json.dumps({
        "splits": {"train": {"documents": 290, "tokens": 5000}, "val": {"documents": 10, "tokens": 170}},
        "tokenizer": {"kind": "byte-bpe", "vocab_size": tok.get_vocab_size()}, "sources": [{"path": "a.txt"}]}))
    run_dir = root / name
    run_cfg = {"model": spec.to_dict(), "dataset": str(dataset), "train": {"batch_size": 16, "lr": 0.01}, "seed": 0}
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(run_cfg))
    with open(run_dir / "metrics.jsonl", "w") as fh:
        fh.write(json.dumps({"type": "step", "step": 25, "total_steps": 25, "loss": 2.5, "lr": 0.001}) + "\n")
        fh.write(json.dumps({"type": "eval", "step": 25, "val_loss": 2.75, "val_ppl": 15.6}) + "\n")
        fh.write('{"type": "step", "st')  # a torn last line (crash mid-write) must not break the card
    save_checkpoint(run_dir, CheckpointPayload(
        step=25, model=model, optimizer_tensors={}, optimizer_meta={}, trainer_state={"step": 25},
        run_config=run_cfg, model_spec=spec.to_dict(),
        write_tokenizer=lambda folder: hf_tokenizer(tok).save_pretrained(folder)))
    return run_dir


# init_std 0.1 + a few steps: prompt-dependent greedy continuations with clear top-1 margins
LLAMA = ModelSpec("llama", 320, 64, 2, 4, 2, 96, 64, tie_embeddings=False, init_std=0.1)  # GQA, untied
GPT2 = ModelSpec("gpt2", 300, 64, 2, 4, 4, 128, 64, init_std=0.1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer):
    root = tmp_path_factory.mktemp("runs")
    return {"llama": make_run(root, tokenizer, LLAMA, "llama-run"), "gpt2": make_run(root, tokenizer, GPT2, "gpt2-run")}


def finish(events) -> Finished:
    events = list(events)
    assert isinstance(events[-1], Finished), events[-1]
    return events[-1]


def our_greedy(run_dir: Path, prompts: list[str], n: int) -> list[list[int]]:
    """Greedy token ids from the source model: the app's generator (prompt excluded, EOS included)."""
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(run_dir, device="cpu")
    out = []
    for prompt in prompts:
        stats = [e for e in stream_text(loaded, prompt, GenerateSpec(max_new_tokens=n, temperature=0.0))
                 if e.type == "generation"]
        out.append(list(stats[0].token_ids))
    return out


def reference_greedy(run_dir: Path, prompts: list[str], n: int) -> list[list[int]]:
    """Greedy by full recomputation (no cache) on the source model: independent of any generator."""
    from desktop_app.engine.model.loading import load_model

    loaded = load_model(run_dir, device="cpu")
    model, tok = loaded.model, loaded.tokenizer
    out = []
    for prompt in prompts:
        ids = tok(prompt)["input_ids"]
        new: list[int] = []
        with torch.no_grad():
            for _ in range(n):
                nxt = int(model(torch.tensor([ids + new])).logits[0, -1].argmax())
                new.append(nxt)
                if nxt == tok.eos_token_id:
                    break
        out.append(new)
    return out


OFFLINE_SCRIPT = textwrap.dedent("""
    import json, sys
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folders, n, prompts = json.loads(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    results = {}
    for folder in folders:
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder)
        out = {"class": type(model).__name__, "ids": []}
        for p in prompts:
            ids = tok(p, return_tensors="pt").input_ids
            gen = model.generate(ids, max_new_tokens=n, do_sample=False)
            out["ids"].append(gen[0, ids.shape[1]:].tolist())
        out["decoded"] = tok.decode(tok("Привет 🙂 мир").input_ids)
        results[folder] = out
    print(json.dumps(results))
""")


def test_hf_export_loads_offline_and_greedy_matches(runs, tmp_path):
    n = 12
    exports = {}
    for family, run_dir in runs.items():
        out = tmp_path / f"{family}-hf"
        result = finish(export_model(run_dir, "hf", out)).result
        assert result["path"] == str(out) and result["format"] == "hf"
        names = {p.name for p in out.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "generation_config.json", "README.md", "model_spec.json"} <= names
        assert not any(name.endswith(".py") for name in names)
        config = json.loads((out / "config.json").read_text())
        assert "auto_map" not in config and config["model_type"] == family
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary files left behind"
        exports[family] = str(out)
    # A fresh interpreter, offline, with an empty HF cache: only the folder itself can satisfy the load.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    proc = subprocess.run([sys.executable, "-c", OFFLINE_SCRIPT, json.dumps(list(exports.values())), str(n),
                           json.dumps(PROMPTS)], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for family, out in exports.items():
        got = results[out]
        assert got["class"] == ("LlamaForCausalLM" if family == "llama" else "GPT2LMHeadModel")
        assert got["decoded"] == "Привет 🙂 мир"
        reference = reference_greedy(runs[family], PROMPTS, n)
        ours = our_greedy(runs[family], PROMPTS, n)
        assert ours == reference, family
        assert got["ids"] == reference, family
        assert len({tuple(x) for x in reference}) > 1, "a degenerate model would make this test meaningless"


def test_model_card_has_spec_data_and_metrics(runs, tmp_path):
    out = tmp_path / "card"
    finish(export_model(runs["llama"], "hf", out))
    card = (out / "README.md").read_text()
    for needle in ("library_name: transformers", "| n_kv_heads | 2 |", "| parameters |", "290 documents",
                   "5,000 tokens", "steps trained: 25", "val_loss 2.75", "loss 2.5", "AutoModelForCausalLM"):
        assert needle in card, needle
    assert json.loads((out / "model_spec.json").read_text()) == LLAMA.to_dict()
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_sharded_export_loads_identically(runs, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sharded"
    finish(export_model(runs["llama"], "hf", out, max_shard_size="100KB"))
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) >= 2 and (out / "model.safetensors.index.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out)
    ckpt = sorted((runs["llama"] / "checkpoints").iterdir())[-1]
    source = load_file(str(ckpt / "model.safetensors"))
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in source.items())


def test_zip_export(runs, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "model.zip"
    result = finish(export_model(runs["gpt2"], "zip", out)).result
    assert result["bytes"] == out.stat().st_size
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert "model/config.json" in names and "model/model.safetensors" in names and "model/README.md" in names
        assert zf.testzip() is None
        zf.extractall(tmp_path / "unzipped")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "unzipped" / "model")
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip", "unzipped"]  # no temp folders left


# --- GGUF -------------------------------------------------------------------------------------------------

def _field(reader, key):
    return reader.fields[key].contents()


def gguf_forward(path: Path, ids: list[int]) -> np.ndarray:
    """Logits of a llama GGUF computed the way llama.cpp does: RoPE on adjacent pairs (LLAMA_ROPE_TYPE_NORM)
    with the converted (permuted) Q/K weights, GQA by head groups, RMSNorm, SwiGLU."""
    import gguf

    r = gguf.GGUFReader(path)
    W = {}
    for t in r.tensors:
        data = np.asarray(t.data)
        if t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            data = gguf.quants.dequantize(data, t.tensor_type)
        W[t.name] = data.astype(np.float64).reshape([int(s) for s in reversed(t.shape)])
    L, nh = _field(r, "llama.block_count"), _field(r, "llama.attention.head_count")
    nkv, base = _field(r, "llama.attention.head_count_kv"), _field(r, "llama.rope.freq_base")
    eps = _field(r, "llama.attention.layer_norm_rms_epsilon")

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):  # x: (T, heads, hd); rotate pairs (2i, 2i+1)
        t, _, hd = x.shape
        inv = base ** (-np.arange(0, hd, 2) / hd)
        ang = np.arange(t)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    x = W["token_embd.weight"][ids]
    T, d = x.shape
    hd = d // nh
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        b = f"blk.{i}."
        h = rms(x, W[b + "attn_norm.weight"])
        q = rope((h @ W[b + "attn_q.weight"].T).reshape(T, nh, hd))
        k = rope((h @ W[b + "attn_k.weight"].T).reshape(T, nkv, hd))
        v = (h @ W[b + "attn_v.weight"].T).reshape(T, nkv, hd)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + np.einsum("hts,shd->thd", p, v).reshape(T, d) @ W[b + "attn_output.weight"].T
        h = rms(x, W[b + "ffn_norm.weight"])
        g = h @ W[b + "ffn_gate.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ W[b + "ffn_up.weight"].T)) @ W[b + "ffn_down.weight"].T
    x = rms(x, W["output_norm.weight"])
    return x @ W.get("output.weight", W["token_embd.weight"]).T


@pytest.mark.parametrize("gguf_type, atol", [("f32", 1e-4), ("f16", 2e-2), ("q8_0", 8e-2)])
def test_gguf_export_reader_and_llamacpp_semantics(runs, tokenizer, tmp_path, gguf_type, atol):
    import gguf

    from desktop_app.engine.model.loading import load_model

    out = tmp_path / "model.gguf"
    result = finish(export_model(runs["llama"], "gguf", out, gguf_type=gguf_type)).result
    assert result["path"] == str(out) and out.stat().st_size == result["bytes"]
    r = gguf.GGUFReader(out)
    spec = LLAMA
    expect = {"general.architecture": "llama", "llama.context_length": 64, "llama.embedding_length": 64,
              "llama.block_count": 2, "llama.feed_forward_length": 96, "llama.attention.head_count": 4,
              "llama.attention.head_count_kv": 2, "llama.rope.freq_base": 10000.0,
              "llama.rope.dimension_count": 16, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
              "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
              "tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.add_bos_token": False}
    for key, value in expect.items():
        assert _field(r, key) == value, key
    assert abs(_field(r, "llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-9
    # tokenizer: one token per embedding row, ours in id order, the rest marked unused; every merge
    tokens = _field(r, "tokenizer.ggml.tokens")
    types = _field(r, "tokenizer.ggml.token_type")
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    assert len(tokens) == len(types) == spec.vocab_size
    assert all(tokens[i] == t for t, i in vocab.items())
    assert types[0] == types[2] == int(gguf.TokenType.CONTROL) and types[100] == int(gguf.TokenType.NORMAL)
    assert all(types[i] == int(gguf.TokenType.UNUSED) for i in range(len(vocab), spec.vocab_size))
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    assert len(_field(r, "tokenizer.ggml.merges")) == len(merges) > 0
    assert "<|assistant|>" in _field(r, "tokenizer.chat_template")
    # tensors: names, GGML shapes (reversed), types
    tensors = {t.name: t for t in r.tensors}
    assert len(tensors) == 1 + 9 * spec.n_layers + 1 + 1  # embeddings, blocks, final norm, untied output
    assert list(tensors["token_embd.weight"].shape) == [64, 320]
    assert list(tensors["blk.0.attn_k.weight"].shape) == [64, 32]  # GQA: 2 kv heads x 16
    assert list(tensors["blk.1.ffn_down.weight"].shape) == [96, 64]
    matrix_type = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
                   "q8_0": gguf.GGMLQuantizationType.Q8_0}[gguf_type]
    assert tensors["blk.0.attn_q.weight"].tensor_type == matrix_type
    assert tensors["output.weight"].tensor_type == matrix_type
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    # the numbers: llama.cpp's conventions applied to the file reproduce the source model's logits
    model = load_model(runs["llama"], device="cpu").model
    ids = tokenizer.encode("the cat sat on the mat").ids
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].double().numpy()
    got = gguf_forward(out, ids)
    assert np.abs(got - expected).max() < atol, np.abs(got - expected).max()
    assert (got.argmax(-1) == expected.argmax(-1)).mean() >= (1.0 if gguf_type == "f32" else 0.8)


def test_gguf_tied_embeddings_have_no_output_tensor(tokenizer, tmp_path):
    import gguf

    spec = ModelSpec("llama", 300, 32, 1, 2, 2, 64, 32)  # tied
    src = tmp_path / "src"
    build_model(spec, seed=1).save_pretrained(src)
    save_tokenizer(tokenizer, src)
    finish(export_model(src, "gguf", tmp_path / "m.gguf", gguf_type="f32"))
    names = {t.name for t in gguf.GGUFReader(tmp_path / "m.gguf").tensors}
    assert "output.weight" not in names and "token_embd.weight" in names


def _unknown_family_folder(folder: Path, tok) -> Path:
    """A tiny model of a family the app's table does not have (stablelm): everything but GGUF."""
    from transformers import AutoModelForCausalLM, StableLmConfig

    config = StableLmConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    save_tokenizer(tok, folder)
    return folder


def test_gguf_problem_for_the_ui(runs, tokenizer, tmp_path):
    from desktop_app.engine.export.hf import gguf_problem

    assert gguf_problem(runs["llama"]) is None
    assert gguf_problem(runs["gpt2"]) is None
    reason = gguf_problem(_unknown_family_folder(tmp_path / "s", tokenizer))
    assert "'stablelm'" in reason and "qwen3" in reason and "gemma2" in reason and "--format hf" in reason
    assert "does not exist" in gguf_problem(tmp_path / "missing")


def test_gguf_refusals_leave_nothing(runs, tokenizer, tmp_path):
    _unknown_family_folder(tmp_path / "s", tokenizer)
    with pytest.raises(UserError, match="GGUF export supports llama, mistral, qwen2, qwen3, gemma"):
        list(export_model(tmp_path / "s", "gguf", tmp_path / "g.gguf"))
    # a llama model whose tokenizer is no BPE (WordPiece)
    wp = train_tokenizer(corpus(50), "wordpiece", 300, 1)
    src = tmp_path / "wp"
    build_model(ModelSpec("llama", 300, 32, 1, 2, 2, 64, 32), seed=0).save_pretrained(src)
    save_tokenizer(wp, src)
    with pytest.raises(UserError, match="GGUF export writes BPE tokenizers; this model's is WordPiece"):
        list(export_model(src, "gguf", tmp_path / "w.gguf"))
    with pytest.raises(UserError, match="GGUF type"):
        list(export_model(runs["llama"], "gguf", tmp_path / "x.gguf", gguf_type="q4_k"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "wp"]


# --- refusals and safety ---------------------------------------------------------------------------------

def test_bad_sources_and_formats(runs, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty-run" / "checkpoints").mkdir(parents=True)
    cases = [
        (tmp_path / "missing", "hf", "does not exist"),
        (tmp_path / "file.txt", "hf", "is a file"),
        (tmp_path / "empty", "hf", "no config.json"),
        (tmp_path / "empty-run", "hf", "no committed checkpoint"),
        (runs["llama"], "onnx", "unknown export format 'onnx'"),
    ]
    for source, fmt, needle in cases:
        with pytest.raises(UserError, match=needle):
            list(export_model(source, fmt, tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    checkpoint = sorted((runs["llama"] / "checkpoints").iterdir())[-1]
    with pytest.raises(UserError, match="inside it"):
        list(export_model(checkpoint, "hf", checkpoint / "export"))
    assert not (checkpoint / "export").exists()


def test_existing_output_refused_then_replaced_with_force(runs, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(UserError, match="already exists"):
        list(export_model(runs["llama"], "hf", out))
    assert (out / "precious.txt").read_text() == "keep me"
    finish(export_model(runs["llama"], "hf", out, overwrite=True))
    assert (out / "config.json").is_file() and not (out / "precious.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failure_midway_keeps_old_output(runs, tmp_path, monkeypatch):
    import desktop_app.engine.export.hf as export

    out = tmp_path / "model.zip"
    out.write_bytes(b"old export")

    def broken(*args, **kwargs):
        raise OSError("disk full")
        yield  # pragma: no cover

    monkeypatch.setattr(export, "_write_zip", broken)
    with pytest.raises(OSError, match="disk full"):
        list(export_model(runs["llama"], "zip", out, overwrite=True))
    assert out.read_bytes() == b"old export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip"]


@pytest.mark.parametrize("fmt", ["hf", "gguf"])
def test_cancel_leaves_nothing(runs, tmp_path, fmt):
    controls = Controls()
    events = []
    for event in export_model(runs["llama"], fmt, tmp_path / "out", controls):
        events.append(event)
        if event.type == "progress" and event.stage == "load" and event.done == 1:
            controls.stop.set()
    assert events[-1].type == "finished" and events[-1].reason == "cancelled"
    assert list(tmp_path.iterdir()) == []


# --- CLI ---------------------------------------------------------------------------------------------------

@pytest.fixture
def run_cli(monkeypatch, capsys):
    monkeypatch.setattr(cli, "VERBS", {"export": cli.VERBS["export"]})

    def run(*argv):
        code = cli.main(["export", *map(str, argv)])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_cli_export(runs, tmp_path, run_cli):
    out = tmp_path / "m.gguf"
    code, stdout, err = run_cli(runs["llama"], "--format", "gguf", "--out", out, "--gguf-type", "f32", "--json")
    assert code == 0, err
    assert json.loads(stdout)["path"] == str(out) and out.is_file()
    assert "convert" in err  # progress on stderr
    code, _, err = run_cli(runs["llama"], "--format", "gguf", "--out", out)
    assert code == 2 and "already exists" in err and "--force" in err
    code, stdout, _ = run_cli(runs["llama"], "--format", "gguf", "--out", out, "--force")
    assert code == 0 and stdout.strip() == str(out)


@pytest.mark.parametrize("argv, needle", [
    (("{missing}", "--format", "hf", "--out", "{tmp}/o"), "does not exist"),
    (("{tmp}", "--format", "gguf", "--out", "{tmp}/../no-model.gguf"), "no config.json"),
    (("{tmp}", "--format", "gguf", "--out", "{tmp}/o.gguf"), "must not be the model folder itself or inside it"),
    (("{llama}", "--format", "hf", "--out", "{tmp}/o", "--gguf-type", "f16"), "only applies to --format gguf"),
])
def test_cli_errors(runs, tmp_path, run_cli, argv, needle):
    values = {"missing": tmp_path / "missing", "tmp": tmp_path, "gpt2": runs["gpt2"], "llama": runs["llama"]}
    code, stdout, err = run_cli(*(a.format(**values) for a in argv))
    assert code == 2 and stdout == "" and needle in err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_cli_bad_format_is_a_usage_error(runs, tmp_path, run_cli):
    with pytest.raises(SystemExit) as exc:
        run_cli(runs["llama"], "--format", "onnx", "--out", tmp_path / "o")
    assert exc.value.code == 2
