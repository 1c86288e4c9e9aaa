"""Chat templates and loss masks, chat tokens and embedding growth, SFT/DPO examples, preview and packing.

Tiny tokenizers are built here (no download): a word-level one for hand-worked masks, and the project's
own byte-level BPE for real templates (its own, ChatML, llama-3, qwen and mistral styles).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from desktop_app.engine.data.chat import CHATML_TEMPLATE, stop_token_ids
from desktop_app.engine.data.tokenization import CHAT_TEMPLATE, hf_tokenizer, save_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.finetune.chat_template import as_hf_tokenizer, ensure_chat_tokens, preview, render_chat
from desktop_app.engine.finetune.examples import (
    IGNORE_INDEX,
    SFTExample,
    build_preference_examples,
    build_sft_examples,
    pack_examples,
)

CORPUS = [
    "Hello there, how are you today? I am fine, thanks for asking.",
    "The quick brown fox jumps over the lazy dog. Be brief and kind.",
    "You are a helpful assistant. Say hello, then say goodbye.",
] * 20

LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
QWEN = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)
MISTRAL = (  # drops system messages; ends assistant turns with eos
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)
GENERATION = (  # ChatML with {% generation %} blocks (transformers' own assistant mask reads them)
    "{% for message in messages %}{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\n' }}{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TEMPLATES = {  # name -> (template or None for the ChatML default / the project's own, end-of-turn text)
    "own": ("own", "<|end|>"),
    "chatml": (None, "<|im_end|>"),
    "llama3": (LLAMA3, "<|eot_id|>"),
    "qwen": (QWEN, "<|im_end|>"),
    "mistral": (MISTRAL, "<|endoftext|>"),
    "generation": (GENERATION, "<|im_end|>"),
}

CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello there"},
    {"role": "assistant", "content": "I am fine, thanks."},
    {"role": "user", "content": "how are you today?"},
    {"role": "assistant", "content": "Say hello, then say goodbye."},
]


@pytest.fixture(scope="module")
def bpe_json() -> str:
    """The project's byte-level BPE (ids 0..7 = its special tokens), as JSON so each test gets a fresh copy."""
    return train_tokenizer(CORPUS, "byte-bpe", 400, 1).to_str()


def fresh(bpe_json: str, template: str | None = "own") -> Any:
    """An HF tokenizer over a fresh copy; template "own" keeps the project's, None removes it."""
    tok = hf_tokenizer(Tokenizer.from_str(bpe_json))
    if template != "own":
        tok.chat_template = template
    ensure_chat_tokens(tok)
    return tok


def decode(tok: Any, ids: list[int]) -> str:
    return tok.backend_tokenizer.decode(ids, skip_special_tokens=False)


def loss_runs(tok: Any, ids: list[int], mask: list[bool]) -> list[str]:
    """Decoded text of each maximal run of loss-bearing tokens."""
    runs: list[list[int]] = []
    for k, (tid, m) in enumerate(zip(ids, mask, strict=True)):
        if m:
            if k == 0 or not mask[k - 1]:
                runs.append([])
            runs[-1].append(tid)
    return [decode(tok, run) for run in runs]


def word_tokenizer(*, template: str | None = None) -> Any:
    words = ["[UNK]", "<|endoftext|>", "system", "user", "assistant", "be", "brief", "hi", "there", "hello",
             "you", "bye"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.add_special_tokens(["<|endoftext|>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>", unk_token="[UNK]")
    tok.chat_template = template
    return tok


def tiny_llama(vocab: int, *, tied: bool) -> Any:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=tied)
    return LlamaForCausalLM(config).eval()


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------- masks


def test_hand_worked_chatml_mask_marks_assistant_content_and_end_of_turn_only() -> None:
    tok = word_tokenizer()
    log = ensure_chat_tokens(tok)
    assert "ChatML" in log[0] and "<|im_start|> (id 12), <|im_end|> (id 13)" in log[1]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"},
                {"role": "assistant", "content": "hello you"}, {"role": "user", "content": "bye"},
                {"role": "assistant", "content": "bye you"}]
    ids, mask = render_chat(tok, messages)
    S, E = "<|im_start|>", "<|im_end|>"
    expected = [
        (S, False), ("system", False), ("be", False), ("brief", False), (E, False),
        (S, False), ("user", False), ("hi", False), ("there", False), (E, False),
        (S, False), ("assistant", False), ("hello", True), ("you", True), (E, True),
        (S, False), ("user", False), ("bye", False), (E, False),
        (S, False), ("assistant", False), ("bye", True), ("you", True), (E, True),
    ]
    assert list(zip(tok.convert_ids_to_tokens(ids), mask, strict=True)) == expected
    _, last = render_chat(tok, messages, loss_on="last")
    assert [k for k, m in enumerate(last) if m] == [21, 22, 23]
    _, everything = render_chat(tok, messages, loss_on="all")
    assert all(everything)
    with pytest.raises(UserError, match="loss_on"):
        render_chat(tok, messages, loss_on="users")


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_loss_runs_are_exactly_each_assistant_reply_and_its_end_token(bpe_json: str, name: str) -> None:
    template, end = TEMPLATES[name]
    tok = fresh(bpe_json, template)
    ids, mask = render_chat(tok, CONVERSATION)
    # The ids are exactly what transformers' own apply_chat_template produces.
    assert ids == list(tok.apply_chat_template(CONVERSATION, tokenize=True, return_dict=False))
    assert loss_runs(tok, ids, mask) == ["I am fine, thanks." + end, "Say hello, then say goodbye." + end]
    _, last = render_chat(tok, CONVERSATION, loss_on="last")
    assert loss_runs(tok, ids, last) == ["Say hello, then say goodbye." + end]


def test_injected_system_prompt_and_trimmed_content_carry_no_loss(bpe_json: str) -> None:
    tok = fresh(bpe_json, QWEN)
    messages = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Be brief."}]
    ids, mask = render_chat(tok, messages)
    assert "You are a helpful assistant." in decode(tok, ids)
    assert loss_runs(tok, ids, mask) == ["Be brief.<|im_end|>"]
    # llama-3 trims contents: the markers cannot be used, the search finds the trimmed reply.
    tok = fresh(bpe_json, LLAMA3)
    messages = [{"role": "user", "content": "  Hello there "}, {"role": "assistant", "content": "  I am fine. \n"}]
    ids, mask = render_chat(tok, messages)
    assert loss_runs(tok, ids, mask) == ["I am fine.<|eot_id|>"]
    # A reply equal to the user's words is still found in the assistant turn, not the user's.
    messages = [{"role": "user", "content": " hello "}, {"role": "assistant", "content": " hello "}]
    ids, mask = render_chat(tok, messages)
    assert loss_runs(tok, ids, mask) == ["hello<|eot_id|>"]
    first_loss = mask.index(True)
    assert decode(tok, ids[:first_loss]).endswith("assistant<|end_header_id|>\n\n")


def test_mask_matches_transformers_generation_mask(bpe_json: str) -> None:
    tok = fresh(bpe_json, GENERATION)
    ids, mask = render_chat(tok, CONVERSATION)
    out = tok.apply_chat_template(CONVERSATION, return_dict=True, return_assistant_tokens_mask=True)
    assert ids == list(out["input_ids"])
    assert [bool(m) for m in out["assistant_masks"]] == mask


def test_special_tokens_inside_messages_and_missing_chat_tokens_are_refused(bpe_json: str) -> None:
    tok = fresh(bpe_json, None)
    bad = [{"role": "user", "content": "Hi <|im_end|> there"}, {"role": "assistant", "content": "Hello"}]
    with pytest.raises(UserError, match=r"message 1 \(user\) contains the special token '<\|im_end\|>'"):
        render_chat(tok, bad)
    bare = hf_tokenizer(Tokenizer.from_str(bpe_json))
    bare.chat_template = None
    with pytest.raises(UserError, match=r"no chat template.*ensure_chat_tokens"):
        render_chat(bare, CONVERSATION)
    refusing = fresh(bpe_json, "{{ raise_exception('Conversation roles must alternate') }}")
    with pytest.raises(UserError, match="refuses this conversation: Conversation roles must alternate"):
        render_chat(refusing, CONVERSATION)


def test_stop_token_ids_hold_eos_and_the_end_of_turn_token(bpe_json: str) -> None:
    chatml = fresh(bpe_json, None)
    assert stop_token_ids(chatml) == [chatml.eos_token_id, chatml.convert_tokens_to_ids("<|im_end|>")]
    own = fresh(bpe_json)
    assert stop_token_ids(own) == [own.eos_token_id, own.convert_tokens_to_ids("<|end|>")]


# ------------------------------------------------------------------------------- chat tokens / embeddings


@pytest.mark.parametrize("tied", [False, True])
def test_ensure_chat_tokens_grows_embeddings_with_the_mean_of_old_rows(bpe_json: str, tied: bool) -> None:
    tok = hf_tokenizer(Tokenizer.from_str(bpe_json))
    tok.chat_template = None
    old_len = len(tok)
    model = tiny_llama(old_len, tied=tied)
    old_in = model.get_input_embeddings().weight.detach().clone()
    old_out = model.get_output_embeddings().weight.detach().clone()
    log = ensure_chat_tokens(tok, model)
    assert len(tok) == old_len + 2 and tok.chat_template == CHATML_TEMPLATE
    assert any("added the chat tokens <|im_start|>" in line for line in log)
    assert any(f"from {old_len} to {old_len + 2} rows" in line and "mean of the old rows" in line for line in log)
    new_in = model.get_input_embeddings().weight.detach()
    new_out = model.get_output_embeddings().weight.detach()
    assert new_in.shape[0] == old_len + 2 and model.config.vocab_size == old_len + 2
    assert torch.equal(new_in[:old_len], old_in)
    for row in (old_len, old_len + 1):
        torch.testing.assert_close(new_in[row], old_in.mean(0))
        torch.testing.assert_close(new_out[row], (old_in if tied else old_out).mean(0))
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    # The grown model runs on the new ids, and a second call changes nothing.
    ids, _ = render_chat(tok, CONVERSATION)
    assert torch.isfinite(model(torch.tensor([ids])).logits).all()
    assert ensure_chat_tokens(tok, model) == []
    assert model.get_input_embeddings().weight.shape[0] == old_len + 2


def test_ensure_chat_tokens_reuses_spare_rows_and_adds_template_tokens(bpe_json: str) -> None:
    tok = hf_tokenizer(Tokenizer.from_str(bpe_json))
    tok.chat_template = LLAMA3
    old_len = len(tok)
    model = tiny_llama(old_len + 8, tied=False)  # a padded vocabulary: spare rows past the tokenizer's end
    old_in = model.get_input_embeddings().weight.detach().clone()
    log = ensure_chat_tokens(tok, model)
    added = ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    assert tok.convert_tokens_to_ids(added) == [old_len, old_len + 1, old_len + 2]
    assert "resized" not in log[-1] and "3 new tokens start as the mean of the old rows" in log[-1]
    weight = model.get_input_embeddings().weight.detach()
    assert weight.shape[0] == old_len + 8
    mean = torch.cat([old_in[:old_len], old_in[old_len + 3:]]).mean(0)
    for row in range(old_len, old_len + 3):
        torch.testing.assert_close(weight[row], mean)
    assert torch.equal(weight[old_len + 3:], old_in[old_len + 3:])


def test_the_projects_own_tokenizers_already_have_chat_tokens(bpe_json: str, tmp_path: Path) -> None:
    raw = Tokenizer.from_str(bpe_json)
    tok = as_hf_tokenizer(raw)
    assert tok.chat_template == CHAT_TEMPLATE
    before = len(tok)
    assert ensure_chat_tokens(tok) == [] and len(tok) == before
    path = save_tokenizer(raw, tmp_path / "tok")
    assert as_hf_tokenizer(path).chat_template == CHAT_TEMPLATE
    folder = tmp_path / "hf"
    chatml = fresh(bpe_json, None)
    chatml.save_pretrained(folder)
    loaded = as_hf_tokenizer(folder)
    assert loaded.chat_template == CHATML_TEMPLATE and "<|im_end|>" in loaded.get_vocab()
    assert as_hf_tokenizer(loaded) is loaded


# ---------------------------------------------------------------------------------------------- SFT


def test_sft_examples_labels_truncation_and_drop_verdicts(bpe_json: str, tmp_path: Path) -> None:
    tok = fresh(bpe_json, None)
    long_reply = "The quick brown fox jumps over the lazy dog. " * 6
    path = write_jsonl(tmp_path / "sft.jsonl", [
        {"messages": CONVERSATION},                                                   # 1 ok
        {"messages": [{"role": "user", "content": "Say hello"},                       # 2 over-long reply
                      {"role": "assistant", "content": long_reply}]},
        {"messages": [{"role": "system", "content": long_reply * 2},                 # 3 all loss cut away
                      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
        "{broken",                                                                     # 4 bad JSON
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]},  # 5 wrong format
    ])
    max_len = 64
    examples, verdicts = build_sft_examples([path], tok, max_len)
    assert len(examples) == 2
    ids, mask = render_chat(tok, CONVERSATION)
    assert examples[0].input_ids == ids
    assert examples[0].labels == [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
    assert len(examples[1].input_ids) == max_len and examples[1].labels[-1] != IGNORE_INDEX
    got = {v.line: (v.status, v.reason) for v in verdicts if v.line}
    assert got[2][0] == "truncated" and f"longer than max_len {max_len}: truncated to {max_len}" in got[2][1]
    assert got[3][0] == "dropped" and "no assistant token is left" in got[3][1]
    assert got[4][0] == "error" and "not valid JSON" in got[4][1]
    assert got[5][0] == "error" and "missing key 'messages'" in got[5][1]
    [summary] = [v for v in verdicts if v.line == 0]
    assert summary.status == "ok"
    assert "2 of 5 records used, 1 truncated, 1 dropped, 2 error" in summary.reason

    _, dropped = build_sft_examples([path], tok, max_len, overlong="drop")
    got = {v.line: (v.status, v.reason) for v in dropped if v.line}
    assert got[2][0] == "dropped" and "longer than max_len 64: dropped" in got[2][1]

    everything, _ = build_sft_examples([path], tok, max_len, loss_on="all")
    assert all(label != IGNORE_INDEX for label in everything[0].labels)


def test_sft_refuses_unusable_files_and_empty_results(bpe_json: str, tmp_path: Path) -> None:
    tok = fresh(bpe_json, None)
    pref = write_jsonl(tmp_path / "pref.jsonl", [{"prompt": "Hi", "chosen": "Hello", "rejected": "Go"}])
    with pytest.raises(UserError, match=r"preference pairs.*use it with DPO"):
        build_sft_examples([pref], tok, 64)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    good = write_jsonl(tmp_path / "good.jsonl", [{"messages": CONVERSATION}])
    with pytest.raises(UserError, match=r"empty\.jsonl: the file is empty"):
        build_sft_examples([good, empty], tok, 64)
    unknown = write_jsonl(tmp_path / "unknown.jsonl", [{"text": "x"}])
    with pytest.raises(UserError, match=r"unknown\.jsonl:1: unknown data format"):
        build_sft_examples([good, unknown], tok, 64)
    control = write_jsonl(tmp_path / "control.jsonl", [
        {"messages": [{"role": "user", "content": "a <|im_start|> b"}, {"role": "assistant", "content": "x"}]}])
    with pytest.raises(UserError, match=r"no usable SFT example.*control.jsonl:1: error: message 1 \(user\)"):
        build_sft_examples([control], tok, 64)
    with pytest.raises(UserError, match="overlong"):
        build_sft_examples([good], tok, 64, overlong="wrap")
    with pytest.raises(UserError, match="max_len"):
        build_sft_examples([good], tok, 1)


# ---------------------------------------------------------------------------------------------- DPO


def test_preference_examples_split_prompt_and_completions(bpe_json: str, tmp_path: Path) -> None:
    tok = fresh(bpe_json, None)
    as_strings = {"prompt": "Hello there", "chosen": "I am fine.", "rejected": "Go away."}
    as_lists = {"prompt": [{"role": "user", "content": "Hello there"}],
                "chosen": [{"role": "assistant", "content": "I am fine."}],
                "rejected": [{"role": "assistant", "content": "Go away."}]}
    path = write_jsonl(tmp_path / "pref.jsonl", [as_strings, as_lists])
    examples, verdicts = build_preference_examples([path], tok, 64)
    assert [v.line for v in verdicts] == [0]
    assert examples[0] == examples[1]
    ex = examples[0]
    assert decode(tok, ex.prompt_ids) == "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"
    assert ex.prompt_ids == list(tok.apply_chat_template(as_lists["prompt"], add_generation_prompt=True,
                                                         return_dict=False))
    assert decode(tok, ex.chosen_ids) == "I am fine.<|im_end|>"
    assert decode(tok, ex.rejected_ids) == "Go away.<|im_end|>"


def test_preference_truncation_and_drop_verdicts(bpe_json: str, tmp_path: Path) -> None:
    tok = fresh(bpe_json, None)
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 8
    path = write_jsonl(tmp_path / "pref.jsonl", [
        {"prompt": "Hi", "chosen": "Hello", "rejected": "Go"},
        {"prompt": long_prompt, "chosen": "I am fine.", "rejected": "Go away."},
        {"prompt": "Hi", "chosen": "Hello there, how are you today? I am fine.",
         "rejected": "Hello there, how are you today? Go away."},
    ])
    max_len = 24
    examples, verdicts = build_preference_examples([path], tok, max_len)
    got = {v.line: (v.status, v.reason) for v in verdicts if v.line}
    assert got[2][0] == "truncated" and "prompt cut from the left" in got[2][1]
    long_ex = examples[1]
    assert decode(tok, long_ex.chosen_ids) == "I am fine.<|im_end|>"
    assert len(long_ex.prompt_ids) + max(len(long_ex.chosen_ids), len(long_ex.rejected_ids)) <= max_len
    assert decode(tok, long_ex.prompt_ids).endswith("<|im_start|>assistant\n")
    _, dropped = build_preference_examples([path], tok, max_len, overlong="drop")
    got = {v.line: (v.status, v.reason) for v in dropped if v.line}
    assert got[2] == ("dropped", got[2][1]) and "dropped" in got[2][1]
    # Cut to the same tokens, the answers can no longer be told apart: dropped with the reason.
    _, tight = build_preference_examples([path], tok, 14)
    got = {v.line: (v.status, v.reason) for v in tight if v.line}
    assert got[3][0] == "dropped" and "same tokens" in got[3][1]
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    with pytest.raises(UserError, match="DPO needs preference pairs"):
        build_preference_examples([chat], tok, 64)


# -------------------------------------------------------------------------------------------- preview


def test_preview_shows_every_token_and_which_carry_loss(bpe_json: str) -> None:
    tok = fresh(bpe_json, None)
    pieces = preview(tok, {"instruction": "Say hello", "output": "Hello there"})
    text = "".join(p for p, _ in pieces)
    assert text == "<|im_start|>user\nSay hello<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n"
    assert "".join(p for p, loss in pieces if loss) == "Hello there<|im_end|>"
    ids, _ = render_chat(tok, [{"role": "user", "content": "Say hello"},
                               {"role": "assistant", "content": "Hello there"}])
    assert len(pieces) == len(ids)
    assert all(not loss for _, loss in preview(tok, {"messages": CONVERSATION})[:5])
    assert all(loss for _, loss in preview(tok, {"messages": CONVERSATION}, loss_on="all"))
    pref = preview(tok, {"prompt": "Hi", "chosen": "Hello", "rejected": "Go"})
    assert "".join(p for p, loss in pref if loss) == "Hello<|im_end|>"
    assert "Go" not in "".join(p for p, _ in pref)
    # Multi-byte characters split over byte-level tokens still join back to the exact text.
    emoji = preview(tok, {"messages": [{"role": "user", "content": "Привет 🎉"},
                                       {"role": "assistant", "content": "你好 👍🏽"}]})
    assert "".join(p for p, _ in emoji).endswith("assistant\n你好 👍🏽<|im_end|>\n")
    assert "".join(p for p, loss in emoji if loss) == "你好 👍🏽<|im_end|>"
    with pytest.raises(UserError, match=r"message 2 \(assistant\) is empty"):
        preview(tok, {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}]})


# -------------------------------------------------------------------------------------------- packing


def _example(n: int, start: int) -> SFTExample:
    ids = list(range(start, start + n))
    return SFTExample(input_ids=ids, labels=[IGNORE_INDEX] * (n // 2) + ids[n // 2:])


def test_packing_fills_windows_and_restarts_position_ids() -> None:
    examples = [_example(5, 10), _example(3, 20), _example(6, 30), _example(2, 40), _example(4, 50)]
    rows = pack_examples(examples, 8, pad_id=0)
    assert len(rows) == 3  # 20 tokens in windows of 8: best fit needs 3 rows
    seen = []
    for row in rows:
        assert {len(row["input_ids"]), len(row["labels"]), len(row["position_ids"])} == {8}
        starts = [k for k, p in enumerate(row["position_ids"]) if p == 0]
        for a, b in zip(starts, [*starts[1:], 8], strict=True):
            assert row["position_ids"][a:b] == list(range(b - a))
            assert row["labels"][a] == IGNORE_INDEX  # nothing in its own record predicts its first token
            segment = row["input_ids"][a:b]
            if segment[0] != 0:
                seen.append(segment[0])
    assert sorted(seen) == [10, 20, 30, 40, 50]
    six = next(r for r in rows if r["input_ids"][:6] == list(range(30, 36)))
    assert six["input_ids"] == [30, 31, 32, 33, 34, 35, 40, 41]
    assert six["labels"] == [IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX, 33, 34, 35, IGNORE_INDEX, 41]
    assert six["position_ids"] == [0, 1, 2, 3, 4, 5, 0, 1]
    padded = pack_examples(examples, 8, pad_id=0, pack=False)
    assert len(padded) == 5
    assert padded[1] == {"input_ids": [20, 21, 22, 0, 0, 0, 0, 0],
                         "labels": [IGNORE_INDEX, 21, 22] + [IGNORE_INDEX] * 5,
                         "position_ids": [0, 1, 2, 0, 1, 2, 3, 4]}
    with pytest.raises(UserError, match="does not fit the window"):
        pack_examples([_example(9, 0)], 8, pad_id=0)


def test_packed_records_do_not_attend_to_each_other() -> None:
    model = tiny_llama(64, tied=False)
    first, second = _example(5, 3), _example(4, 20)
    [row] = pack_examples([first, second], 12, pad_id=0)
    with torch.no_grad():
        # use_cache=False: transformers reads packing from position ids only when no cache is built.
        packed = model(input_ids=torch.tensor([row["input_ids"]]), position_ids=torch.tensor([row["position_ids"]]),
                       use_cache=False).logits[0]
        alone = [model(input_ids=torch.tensor([ex.input_ids])).logits[0] for ex in (first, second)]
    torch.testing.assert_close(packed[:5], alone[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(packed[5:9], alone[1], atol=1e-5, rtol=1e-4)
