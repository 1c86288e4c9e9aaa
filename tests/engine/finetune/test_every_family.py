"""Every family of the app's table goes all the way, as a person who pulls Qwen, Llama 3 or Gemma and runs it in Ollama
would take it: the base loads (with the attention its family supports) and chats with its own template; LoRA and
QLoRA train on it; the LoRA run merges and exports as a Hugging Face folder that transformers reloads with the
same logits; and the merged model exports to GGUF in every type written here, with the architecture and tensor
names llama.cpp reads, the logits transformers' own GGUF loader reads back (for the families it knows) and a
Modelfile with the family's template and stop tokens. llama.cpp itself is the check in test_every_family_llamacpp.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from family_helpers import ALL_FAMILIES, CHAT, make_family_base
from ft_helpers import ft_config, newest, write_jsonl

from desktop_app.engine.export.hf import export_model, gguf_problem
from desktop_app.engine.model.families import FAMILIES, attention_of
from desktop_app.engine.train.loop import train

GGUF_TYPES = ("f32", "f16", "bf16", "q8_0")
# families whose GGUF files transformers' own loader reads back (transformers.integrations.ggml)
TRANSFORMERS_READS_GGUF = {"llama", "mistral", "qwen2", "qwen3", "phi3", "gpt2"}
PROMPT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "repeat cat dog"}]


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    rows = [{"messages": [{"role": "user", "content": f"repeat {a} {b}"}, {"role": "assistant", "content": f"{a} {b}"}]}
            for a, b in (("cat", "dog"), ("sun", "sea"), ("red", "blue"), ("one", "two"))]
    return write_jsonl(tmp_path_factory.mktemp("chats") / "chats.jsonl", rows * 3)


def logits_of(model, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_each_family_loads_chats_trains_merges_and_exports(family, chats, tmp_path):
    from desktop_app.engine.data.chat import end_of_turn_id
    from desktop_app.engine.generate.prompts import encode_messages
    from desktop_app.engine.model.loading import load_model

    base = make_family_base(tmp_path / "base", family)
    loaded = load_model(base, device="cpu")
    assert loaded.model.config._attn_implementation == attention_of(family)
    # chat: its own template renders the conversation (a system message folded into the first user turn where the
    # template has no system role), and the reply stops at its end-of-turn token
    tok = loaded.tokenizer
    ids = encode_messages(tok, PROMPT)
    try:
        rendered = tok.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    except Exception:  # Gemma's template has no system role: it opens the first user turn
        assert "gemma" in family
        folded = [{"role": "user", "content": "Answer briefly.\n\nrepeat cat dog"}]
        rendered = tok.apply_chat_template(folded, tokenize=False, add_generation_prompt=True)
    assert ids == tok(rendered, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(end_of_turn_id(tok)) in (CHAT[family][3], "<end_of_turn>", "<|end|>")

    lora = list(train(ft_config(base, [chats], steps=2, batch_size=2, adapter={"kind": "lora", "rank": 2}),
                      tmp_path / "lora"))
    assert lora[-1].reason == "completed", lora[-1]
    adapter = newest(tmp_path / "lora")
    targets = json.loads((adapter / "adapter_config.json").read_text())["target_modules"]
    assert sorted(targets) == sorted(FAMILIES[family].lora_targets)
    qlora = list(train(ft_config(base, [chats], steps=1, batch_size=2, adapter={"kind": "qlora", "rank": 2}),
                       tmp_path / "qlora"))
    assert qlora[-1].reason == "completed", qlora[-1]

    merged = _check_hf_merge(base, adapter, tmp_path)
    _check_gguf(tmp_path, merged, family)


def _check_hf_merge(base, adapter, tmp_path):
    """The merged HF export reloads in transformers with the logits of base + adapter merged by peft itself."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "merged"
    done = list(export_model(tmp_path / "lora", "hf", out, merge=True))
    assert done[-1].reason == "completed", done[-1]
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), adapter).merge_and_unload()
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    ids = [5, 17, 42, 9, 77, 3, 11, 60, 21, 8]
    np.testing.assert_allclose(logits_of(reloaded.eval(), ids), logits_of(reference.eval(), ids), atol=1e-4)
    return out


def _check_gguf(tmp_path, merged, family):
    import gguf

    assert gguf_problem(merged) is None
    arch = FAMILIES[family].gguf_arch
    for gguf_type in GGUF_TYPES:
        out = tmp_path / f"{family}-{gguf_type}.gguf"
        done = list(export_model(merged, "gguf", out, gguf_type=gguf_type))
        assert done[-1].reason == "completed", done[-1]
        reader = gguf.GGUFReader(out)
        assert bytes(reader.fields["general.architecture"].parts[-1]).decode() == arch
        enum = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
        known = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[enum]}
        for tensor in reader.tensors:
            generic = ".".join("{bid}" if p.isdigit() else p for p in tensor.name.rsplit(".", 1)[0].split("."))
            assert generic in known, (tensor.name, arch)
        modelfile = out.with_suffix(".Modelfile").read_text()
        eos = CHAT[family][3]
        assert f'PARAMETER stop "{eos}"' in modelfile
        if family != "mistral":  # Mistral's template puts the system text into the last user turn: not wrapped turns
            assert "TEMPLATE" in modelfile, modelfile
    if family in TRANSFORMERS_READS_GGUF:
        _check_transformers_reads(tmp_path / f"{family}-f32.gguf", merged)


def _check_transformers_reads(path, merged):
    """transformers' own GGUF loader (which undoes llama.cpp's layout) gives the merged model's logits."""
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.model.loading import load_gguf_weights

    ids = [5, 17, 42, 9, 77, 3, 11, 60]
    expected = logits_of(AutoModelForCausalLM.from_pretrained(merged).eval(), ids)
    np.testing.assert_allclose(logits_of(load_gguf_weights(path).eval(), ids), expected, atol=1e-4)


def test_an_unknown_family_does_everything_but_gguf_and_says_why_in_one_line(tmp_path):
    from ft_helpers import make_tokenizer
    from transformers import CONFIG_MAPPING, AutoModelForCausalLM

    from desktop_app.engine.model.families import family_of

    tok = make_tokenizer()
    cfg = CONFIG_MAPPING["stablelm"](vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert family_of("stablelm") is None
    reason = gguf_problem(tmp_path / "m")
    assert reason is not None and "\n" not in reason and "'stablelm'" in reason and "--format hf" in reason
    assert list(export_model(tmp_path / "m", "hf", tmp_path / "out"))[-1].reason == "completed"


def test_the_memory_estimate_counts_what_eager_attention_keeps_for_gemma2(tmp_path):
    """Gemma 2 trains with eager attention (soft-capped scores), which keeps every layer's T x T scores: the estimate
    preflight and Get a model share counts them; an SDPA family of the same shapes does not."""
    import dataclasses

    from desktop_app.engine.model.sizing import attention_score_bytes, estimate_training_memory
    from desktop_app.engine.train.memory_plan import memory_plan

    gemma2 = make_family_base(tmp_path / "g2", "gemma2")
    gemma3 = make_family_base(tmp_path / "g3", "gemma3_text")
    train = ft_config(gemma2, [], steps=1, batch_size=2, adapter={"kind": "lora", "rank": 2}).train_spec()
    plans = {name: memory_plan(ft_config(base, [], adapter={"kind": "lora", "rank": 2}), train, False)
             for name, base in (("gemma2", gemma2), ("gemma3", gemma3))}
    assert plans["gemma2"].shape.attention == "eager" and plans["gemma3"].shape.attention == "sdpa"
    eager = plans["gemma2"]
    sdpa_shape = dataclasses.replace(eager.shape, attention="sdpa")
    extra = estimate_training_memory(eager.spec, eager.shape)["total"] - \
        estimate_training_memory(eager.spec, sdpa_shape)["total"]
    t = eager.shape.seq_len
    assert extra == attention_score_bytes(eager.spec, eager.shape) == 2 * 2 * 2 * 4 * t * t * 4  # b, layers, heads


GO_PROGRAM = """package main

import (
	"encoding/json"
	"os"
	"text/template"
)

type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func main() {
	text, _ := os.ReadFile(os.Args[1])
	var messages []Message
	if err := json.NewDecoder(os.Stdin).Decode(&messages); err != nil {
		panic(err)
	}
	t := template.Must(template.New("t").Parse(string(text)))
	if err := t.Execute(os.Stdout, map[string]any{"Messages": messages}); err != nil {
		panic(err)
	}
}
"""


@pytest.fixture(scope="module")
def go_binary(tmp_path_factory):
    """Go's own text/template (what Ollama renders TEMPLATE with), built once; skipped where Go is not installed."""
    import shutil
    import subprocess

    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (apt-get install golang-go): the Modelfile templates are checked by Go here")
    folder = tmp_path_factory.mktemp("gotemplate")
    (folder / "main.go").write_text(GO_PROGRAM)
    subprocess.run([go, "build", "-o", str(folder / "render"), str(folder / "main.go")], check=True, cwd=folder,
                   env={**os.environ, "GOCACHE": str(folder / "cache"), "GO111MODULE": "off"})
    return folder / "render"


@pytest.mark.parametrize("family", [f for f in ALL_FAMILIES if CHAT[f][0] is not None])
def test_each_familys_modelfile_template_renders_in_go_as_its_jinja_template(family, go_binary, tmp_path):
    """Ollama renders the Modelfile's TEMPLATE with Go's text/template: for conversations with and without a system
    message, Go's rendering equals the family's own Jinja template (a system message where that template puts it)."""
    import subprocess

    from family_helpers import family_tokenizer

    from desktop_app.engine.data.chat import render_text
    from desktop_app.engine.export.modelfile import modelfile_text

    tok = family_tokenizer(family)
    result = modelfile_text("m.gguf", tok, 4096)
    assert result.translated, result.note
    template = tmp_path / "template.txt"
    template.write_text(result.text.split('TEMPLATE """', 1)[1].split('"""', 1)[0])
    for messages in ([{"role": "user", "content": "Hi there"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]):
        go = subprocess.run([str(go_binary), str(template)], input=json.dumps(messages), capture_output=True,
                            text=True, check=True).stdout
        assert go == render_text(tok, messages, add_generation_prompt=True), (family, messages)
