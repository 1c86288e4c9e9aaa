"""data/chat.py: one reading of chat messages for every caller, and one stop-token rule (the chat template's
end-of-turn token, else EOS) for generation, fine-tuning's samples and the server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from tokenizers import AddedToken

from desktop_app.engine.data.chat import ChatError, check_messages, end_of_turn_id, stop_token_ids
from desktop_app.engine.data.ingest import inspect_file, read_items
from desktop_app.engine.data.tokenization import SPECIAL_TOKENS, hf_tokenizer, train_tokenizer
from desktop_app.engine.finetune.formats import normalise_record
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.prompts import encode_prompt
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.specs import GenerateSpec, ModelSpec

# A Gemma-style template: its turns end with <end_of_turn>, a token the old hard-coded chat stop list
# (<|end|>, <|im_end|>, <|eot_id|>) did not know.
GEMMA = ("{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
         "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def _tokenizer(extra: tuple[str, ...] = ()) -> object:
    tok = hf_tokenizer(train_tokenizer(["the cat sat on the mat. Where does the dog sit?"] * 30, "byte-bpe", 320))
    if extra:
        tok.add_tokens([AddedToken(t, special=True, normalized=False) for t in extra], special_tokens=True)
    return tok


def test_stop_tokens_are_the_templates_end_of_turn_else_eos():
    gemma = _tokenizer(("<start_of_turn>", "<end_of_turn>"))
    gemma.chat_template = GEMMA
    eot = gemma.convert_tokens_to_ids("<end_of_turn>")
    assert end_of_turn_id(gemma) == eot
    assert stop_token_ids(gemma) == [gemma.eos_token_id, eot]
    assert stop_token_ids(gemma, chat=False) == [gemma.eos_token_id]
    # A vocabulary that holds <|im_end|> while its template ends turns with <|end|>: only <|end|> ends a reply
    # (the old chat rule also stopped on <|im_end|>).
    own = _tokenizer(("<|im_end|>",))
    end = own.convert_tokens_to_ids(SPECIAL_TOKENS["end"])
    assert stop_token_ids(own) == [own.eos_token_id, end]
    # No template at all: EOS alone.
    plain = _tokenizer()
    plain.chat_template = None
    assert end_of_turn_id(plain) is None and stop_token_ids(plain) == [plain.eos_token_id]


def test_the_models_eos_ids_count_too():
    tok = _tokenizer()
    spec = ModelSpec("llama", len(tok), 32, 1, 2, 2, 64, 128, tie_embeddings=False)
    model = build_model(spec, seed=0)
    model.generation_config.eos_token_id = [tok.eos_token_id, 5]
    model.config.eos_token_id = 6
    assert stop_token_ids(tok, model, chat=False) == [tok.eos_token_id, 5, 6]


def test_chat_generation_ends_at_the_templates_end_of_turn():
    """The model is set up to answer the opened assistant turn with <end_of_turn> at once: in chat mode that
    ends the sample as "eos", with the end-of-turn id as its only token."""
    tok = _tokenizer(("<start_of_turn>", "<end_of_turn>"))
    tok.chat_template = GEMMA
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    spec = ModelSpec("llama", len(tok), 32, 1, 2, 2, 64, 128, tie_embeddings=False)
    model = build_model(spec, seed=0).eval()
    last = encode_prompt(tok, "Hi", chat=True)[-1]
    with torch.no_grad():  # no block writes to the residual stream; the head sees the last token's embedding
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[eot] = model.model.embed_tokens.weight[last]
    loaded = LoadedModel(model, tok, spec, "hf", Path("."), "tiny")
    settings = GenerateSpec(max_new_tokens=5, temperature=0.0, chat=True)
    for backend in ("lean", "hf"):
        [stats] = [e for e in stream_text(loaded, "Hi", settings, backend=backend) if e.type == "generation"]
        assert stats.token_ids == [eot] and stats.finish_reason == "eos", backend


BAD = [
    ([], "is an empty list"),
    ([{"role": "wizard", "content": "x"}], "unknown role 'wizard'"),
    ([{"role": "tool", "content": "x"}], "tool messages are not supported"),
    ([{"role": "user"}, {"role": "assistant", "content": "x"}], "message 1 (user) has no 'content'"),
    ([{"role": "user", "content": [{"type": "image_url"}]}, {"role": "assistant", "content": "x"}],
     "only text is supported"),
]


@pytest.mark.parametrize(("messages", "reason"), BAD)
def test_one_reading_of_messages_for_data_files_the_inspector_and_generation(tmp_path, messages, reason):
    with pytest.raises(ChatError, match=re.escape(reason)):
        check_messages(messages)
    with pytest.raises(ChatError, match=re.escape(reason)):
        normalise_record({"messages": messages})
    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps({"messages": messages}) + "\n")
    info = inspect_file(f)
    assert info.verdict == "bad-jsonl" and reason in info.reason


def test_the_inspector_reads_messages_as_fine_tuning_does(tmp_path):
    messages = [{"role": "Developer", "content": "Rules"},
                {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "you"}]},
                {"role": "assistant", "content": "Hello"}]
    f = tmp_path / "chat.jsonl"
    f.write_text(json.dumps({"messages": messages}) + "\n")
    [record] = list(read_items(f))
    assert record.data["messages"] == normalise_record({"messages": messages})["messages"] == [
        {"role": "system", "content": "Rules"}, {"role": "user", "content": "Hi you"},
        {"role": "assistant", "content": "Hello"}]


def test_folder_chat_template_reads_the_tokenizer_files(tmp_path):
    import json

    from desktop_app.engine.model.folders import folder_chat_template

    plain, chat, jinja, listed = (tmp_path / n for n in ("plain", "chat", "jinja", "listed"))
    for folder in (plain, chat, jinja, listed):
        folder.mkdir()
    (plain / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    (chat / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    (jinja / "chat_template.jinja").write_text("{{ jinja }}\n")
    (listed / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "tool_use", "template": "{{ tools }}"}, {"name": "default", "template": "{{ x }}"}]}))
    assert folder_chat_template(plain) == "" and folder_chat_template(tmp_path / "missing") == ""
    assert folder_chat_template(chat) == "{{ messages }}" and folder_chat_template(jinja) == "{{ jinja }}"
    assert folder_chat_template(listed) == "{{ x }}"
