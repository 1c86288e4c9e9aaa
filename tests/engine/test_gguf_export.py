"""GGUF export for every family we write (llama, mistral, qwen2, gpt2) and every type we write ourselves, read
back by transformers' own GGUF loader (which undoes our permutations and transpositions independently); the
Ollama Modelfile beside the file (the chat template translated, checked on conversations, or said to be not
translatable); the tokenizer of a GGUF source carried over; the llama.cpp types refused cleanly without it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf_helpers import HELD_OUT, byte_bpe, trained_folder

from desktop_app.engine.errors import UserError
from desktop_app.engine.export.hf import export_model


@pytest.fixture(scope="module")
def tok():
    return byte_bpe()


@pytest.fixture(scope="module")
def sources(tmp_path_factory, tok):
    root = tmp_path_factory.mktemp("families")
    return {family: trained_folder(root, family, tok, steps=5) for family in ("llama", "gpt2", "mistral", "qwen2")}


def logits(folder_or_file: Path, ids: list[int]) -> torch.Tensor:
    from desktop_app.engine.model.loading import load_model

    with torch.no_grad():
        return load_model(folder_or_file, device="cpu").model(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("family", ["llama", "gpt2", "mistral", "qwen2"])
@pytest.mark.parametrize("gguf_type, atol", [("f32", 1e-5), ("f16", 3e-2), ("bf16", 0.2), ("q8_0", 0.15)])
def test_each_family_and_type_reads_back_through_transformers(sources, tok, tmp_path, family, gguf_type, atol):
    import gguf

    out = tmp_path / f"{family}.gguf"
    result = list(export_model(sources[family], "gguf", out, gguf_type=gguf_type))[-1].result
    assert result["gguf_type"] == gguf_type and result["bytes"] == out.stat().st_size
    reader = gguf.GGUFReader(out)
    arch = reader.fields["general.architecture"].contents()
    assert arch == {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "gpt2": "gpt2"}[family]
    matrix = next(t for t in reader.tensors if t.name in ("blk.0.attn_q.weight", "blk.0.attn_qkv.weight"))
    assert matrix.tensor_type.name == gguf_type.upper()
    ids = tok.encode(HELD_OUT).ids
    expected, got = logits(sources[family], ids), logits(out, ids)
    assert (got - expected).abs().max() < atol, (got - expected).abs().max()
    assert (got.argmax(-1) == expected.argmax(-1)).float().mean() >= (1.0 if gguf_type == "f32" else 0.9)


def test_the_modelfile_beside_the_gguf(sources, tmp_path):
    out = tmp_path / "tiny.gguf"
    result = list(export_model(sources["llama"], "gguf", out))[-1].result
    modelfile = tmp_path / "tiny.Modelfile"
    assert result["modelfile"] == str(modelfile) and result["modelfile_template"] is True
    text = modelfile.read_text()
    assert "FROM ./tiny.gguf" in text and 'TEMPLATE """' in text and "PARAMETER num_ctx 128" in text
    assert 'PARAMETER stop "<|end|>"' in text or "PARAMETER stop" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.Modelfile", "tiny.gguf"]  # no temporaries left
    with pytest.raises(UserError, match=r"tiny\.Modelfile already exists"):
        out.unlink()
        list(export_model(sources["llama"], "gguf", out))


def test_llama_cpp_types_are_refused_cleanly_without_llama_cpp(sources, tmp_path, monkeypatch):
    import desktop_app.engine.export.hf as hf

    monkeypatch.setattr(hf, "llama_cpp_available", lambda: False)  # where the export asks
    with pytest.raises(UserError, match=r"llama.cpp's quantizer, which is not installed: pip install --no-binary"):
        list(export_model(sources["llama"], "gguf", tmp_path / "q.gguf", gguf_type="Q4_K_M"))
    assert list(tmp_path.iterdir()) == []


def test_a_model_from_a_gguf_keeps_that_files_tokenizer(sources, tok, tmp_path):
    """Re-exporting a GGUF (or a fine-tune of one) copies its tokenizer metadata: pre-tokenizer name included."""
    import gguf

    first = tmp_path / "first.gguf"
    list(export_model(sources["gpt2"], "gguf", first, gguf_type="f32"))
    # pretend the file came from elsewhere with its own pre-tokenizer name: rewrite that one key
    reader = gguf.GGUFReader(first)
    writer = gguf.GGUFWriter(str(tmp_path / "src.gguf"), "gpt2")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = "smollm" if key == "tokenizer.ggml.pre" else field.contents()
        vtype = field.types[0]
        writer.add_key_value(key, value, vtype, sub_type=field.types[-1] if vtype == gguf.GGUFValueType.ARRAY
                             else None)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=list(reversed([int(s) for s in t.shape])), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    again = tmp_path / "again.gguf"
    events = list(export_model(tmp_path / "src.gguf", "gguf", again, gguf_type="q8_0"))
    assert any("kept the tokenizer of src.gguf" in getattr(e, "message", "") for e in events)
    fields = gguf.GGUFReader(again).fields
    assert fields["tokenizer.ggml.pre"].contents() == "smollm"
    assert fields["tokenizer.ggml.tokens"].contents() == reader.fields["tokenizer.ggml.tokens"].contents()
    ids = tok.encode(HELD_OUT).ids
    assert (logits(again, ids) - logits(sources["gpt2"], ids)).abs().max() < 0.15


# --- the Modelfile's template translation -----------------------------------------------------------------------

TEMPLATES = {
    "ChatML": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
              "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
              "{% endif %}",
    "ChatML with a default system prompt (SmolLM2)":
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>"
    "\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "llama-3": "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
               "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if "
               "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "Zephyr": "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + "
              "'\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}",
    "Gemma": "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
             "else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] + '<end_of_turn>\n' }}"
             "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
}
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
          "'<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = '' %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 %}"
          "{% set content = system_message + message['content'] %}{% else %}{% set content = message['content'] %}"
          "{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content + ' [/INST]' }}"
          "{% elif message['role'] == 'assistant' %}{{ ' ' + content + ' ' + eos_token }}{% endif %}{% endfor %}")


def go_render(template: str, messages: list[dict[str, str]]) -> str:
    """A small interpreter of exactly the Go-template subset the translator writes (string literals, .Content,
    if/else-if on .Role, $last, the leading system check) to check a translation end to end."""
    import json
    import re

    out = []
    first_system = bool(messages) and messages[0]["role"] == "system"
    head, body = template.split("{{- range $i, $_ := .Messages }}", 1)
    with_sys, without_sys = re.match(r'.*?}}(.*?){{- else }}(.*?){{- end }}', head, re.S).groups()
    literal = lambda s: "".join(json.loads(x) for x in re.findall(r'{{ ("(?:[^"\\]|\\.)*") }}', s))  # noqa: E731
    out.append(literal(with_sys if first_system else without_sys))
    branches = dict(re.findall(r'eq \.Role "(\w+)" }}(.*?)\n', body))
    generation = re.search(r'if and \$last \(ne \.Role "assistant"\) }}(.*?){{ end }}', body).group(1)
    for i, m in enumerate(messages):
        last = i == len(messages) - 1
        before, after = branches[m["role"]].split("{{ .Content }}")
        if m["role"] == "assistant":
            after = "" if last else re.search(r"{{ if not \$last }}(.*){{ end }}", after).group(1)
        out.append(literal(before) + m["content"] + literal(after))
        if last and m["role"] != "assistant":
            out.append(literal(generation))
    return "".join(out)


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_common_chat_templates_translate_to_go_templates_that_render_the_same(name):
    from transformers import PreTrainedTokenizerFast

    from desktop_app.engine.data.tokenization import hf_tokenizer
    from desktop_app.engine.export.modelfile import modelfile_text, template_name, wrappers_of

    tok: PreTrainedTokenizerFast = hf_tokenizer(byte_bpe())
    tok.chat_template = TEMPLATES[name]
    result = modelfile_text("m.gguf", tok, 4096)
    assert result.translated, result.note
    assert name.startswith(template_name(wrappers_of(tok)).split("/")[0])
    go = result.text.split('TEMPLATE """', 1)[1].split('"""', 1)[0]
    conversations = [
        [{"role": "user", "content": "Hi there"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
        [{"role": "user", "content": "Tell me"}, {"role": "assistant", "content": "Once upon"}],  # a prefill
    ]
    for messages in conversations:
        expected = tok.apply_chat_template(messages, tokenize=False,
                                           add_generation_prompt=messages[-1]["role"] != "assistant")
        if messages[-1]["role"] == "assistant":  # a prefill continues: Jinja closes the turn, Ollama leaves it open
            expected = expected[: expected.rindex("Once upon") + len("Once upon")]
        assert go_render(go, messages) == expected, name


def test_an_untranslatable_template_is_said_clearly_and_no_template_is_written():
    from desktop_app.engine.data.tokenization import hf_tokenizer
    from desktop_app.engine.export.modelfile import modelfile_text

    tok = hf_tokenizer(byte_bpe())
    tok.chat_template = LLAMA2
    result = modelfile_text("m.gguf", tok, 64)
    assert not result.translated and "could not be translated" in result.note and "TEMPLATE" not in \
        result.text.replace("no TEMPLATE", "")
    tok.chat_template = None
    plain = modelfile_text("m.gguf", tok, 64)
    assert "no chat template" in plain.note and "TEMPLATE" not in plain.text and "FROM ./m.gguf" in plain.text
