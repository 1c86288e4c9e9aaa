"""Perplexity and bits per byte are the field's numbers: the same as a direct computation from the model's logits
(one prefix token, then every token of the text predicted), lm-evaluation-harness's rolling windows on a text
longer than the context, a text file as one stream, the same bytes for every tokenizer, clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.heldout import drain
from desktop_app.engine.evaluate.perplexity import cut_utf8, score_text, text_documents
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.specs import ModelSpec

TEXT = ("The cat sat on the mat. A dog ran in the park, naïve and café-bound.\n\n"
        "Then the cat — 日本語 — slept.\n\n\nThe end of a short story about the mat.\n")
TRAIN = [TEXT, "the cat sat on the mat. a dog ran in the park. " * 6]


@pytest.fixture(scope="module")
def llama():
    """A tiny random LlamaForCausalLM with the app's byte-level BPE behind a transformers tokenizer (it has BOS)."""
    tokenizer = hf_tokenizer(train_tokenizer(TRAIN * 4, "byte-bpe", 300, min_frequency=1))
    model = build_model(ModelSpec("llama", len(tokenizer), 32, 1, 2, 2, 64, 512), seed=0).eval()
    return model, tokenizer


@pytest.fixture(scope="module")
def gpt2():
    """A tiny random GPT2LMHeadModel with a different tokenizer (Metaspace BPE), a bare tokenizers.Tokenizer."""
    tokenizer = train_tokenizer(TRAIN * 4, "bpe", 200, min_frequency=1)
    model = build_model(ModelSpec("gpt2", tokenizer.get_vocab_size(), 32, 1, 2, 2, 64, 512), seed=1).eval()
    return model, tokenizer


def write(folder: Path, name: str, text: str) -> str:
    (folder / name).write_text(text, encoding="utf-8")
    return str(folder / name)


def direct_nats(model, ids: list[int]) -> float:
    """Summed -log p of ids[1:] given what comes before, in one forward pass."""
    with torch.no_grad():
        x = torch.tensor([ids[:-1]])
        logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0].float()
    return float(F.cross_entropy(logits, torch.tensor(ids[1:]), reduction="sum"))


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# lm-evaluation-harness (lm_eval/utils.py, models/huggingface.py), written out again independently of the engine.
def harness_rolling_windows(token_list, prefix_token, max_seq_len, context_len):
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first_seq_len = min(max_seq_len, len(token_list))
    yield [prefix_token, *token_list[: first_seq_len - 1]], token_list[:first_seq_len]
    predicted += first_seq_len
    while predicted < len(token_list):
        window_pred_len = min(len(token_list) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield (token_list[window_end - max_seq_len - 1: window_end - 1],
               token_list[window_end - window_pred_len: window_end])
        predicted += window_pred_len


def harness_nats(model, token_list, prefix_token, max_length) -> tuple[float, int]:
    """loglikelihood_rolling: disjoint windows, each scored alone (no batching, no padding)."""
    nats, count = 0.0, 0
    for context, continuation in harness_rolling_windows(token_list, prefix_token, max_length, 1):
        context = context[: len(context) - (len(continuation) - 1)]  # make_disjoint_window
        inp = (context + continuation)[-(max_length + 1):][:-1]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([inp])).logits[0].float()
        logp = F.log_softmax(logits[len(inp) - len(continuation):], dim=-1)
        nats -= float(logp.gather(1, torch.tensor(continuation)[:, None]).sum())
        count += len(continuation)
    return nats, count


def test_the_figures_equal_a_direct_computation_from_the_logits(llama, tmp_path: Path) -> None:
    model, tokenizer = llama
    result = drain(score_text(model, tokenizer, [write(tmp_path, "a.txt", TEXT)], context=512))
    ids = encode(tokenizer, TEXT)
    nats = direct_nats(model, [tokenizer.bos_token_id, *ids])  # the prefix, then every token predicted
    direct_bpb = nats / math.log(2) / len(TEXT.encode("utf-8"))
    direct_ppl = math.exp(nats / len(ids))
    print(f"engine bpb {result['bits_per_byte']:.9f} ppl {result['perplexity']:.7f} | direct bpb {direct_bpb:.9f} "
          f"ppl {direct_ppl:.7f} | {len(ids)} tokens, {len(TEXT.encode())} bytes")
    assert (result["text_tokens"], result["text_bytes"], result["text_documents"]) == (
        len(ids), len(TEXT.encode("utf-8")), 1)
    assert result["bits_per_byte"] == pytest.approx(direct_bpb, rel=1e-5)
    assert result["perplexity"] == pytest.approx(direct_ppl, rel=1e-5)


def test_a_tokenizer_that_adds_bos_on_encode_gets_one_prefix_not_two(llama, tmp_path: Path) -> None:
    model, tokenizer = llama
    raw = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    raw.post_processor = TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", 1)])
    adding = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|bos|>", eos_token="<|endoftext|>")
    assert adding(TEXT)["input_ids"][:2].count(1) == 1 and adding(TEXT)["input_ids"][0] == 1
    path = write(tmp_path, "a.txt", TEXT)
    assert drain(score_text(model, adding, [path])) == drain(score_text(model, tokenizer, [path]))
    assert drain(score_text(model, raw, [path])) == drain(score_text(model, tokenizer, [path]))  # a bare Tokenizer


def test_a_text_longer_than_the_context_is_scored_in_the_harness_rolling_windows(llama, tmp_path: Path) -> None:
    model, tokenizer = llama
    text = TEXT * 3
    ids = encode(tokenizer, text)
    assert len(ids) > 6 * 16
    nats, count = harness_nats(model, ids, tokenizer.bos_token_id, 16)
    assert count == len(ids)
    path = write(tmp_path, "long.txt", text)
    result = drain(score_text(model, tokenizer, [path], context=16, batch=3))
    assert result["text_tokens"] == len(ids) and result["text_bytes"] == len(text.encode("utf-8"))
    assert result["bits_per_byte"] == pytest.approx(nats / math.log(2) / len(text.encode("utf-8")), rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(nats / len(ids)), rel=1e-5)
    # short windows lose context: the figure differs from one long window's
    whole = drain(score_text(model, tokenizer, [path], context=512))
    assert whole["bits_per_byte"] != pytest.approx(result["bits_per_byte"], rel=1e-4)


def test_padding_and_batching_do_not_change_the_figures(llama, tmp_path: Path) -> None:
    model, tokenizer = llama
    records = [TEXT[:n] for n in (40, 75, 130, 200, len(TEXT))]
    path = write(tmp_path, "docs.jsonl", "".join(json.dumps({"text": r}) + "\n" for r in records))
    one = drain(score_text(model, tokenizer, [path], context=16, batch=1))
    many = drain(score_text(model, tokenizer, [path], context=16, batch=7))
    assert one["text_tokens"] == many["text_tokens"] and one["text_bytes"] == many["text_bytes"]
    assert many["bits_per_byte"] == pytest.approx(one["bits_per_byte"], rel=1e-5)
    assert many["perplexity"] == pytest.approx(one["perplexity"], rel=1e-5)
    events = list(score_text(model, tokenizer, [path], context=16, batch=7))
    assert events and events[-1].done == events[-1].total and events[-1].unit == "windows"


def test_a_text_file_is_one_stream_and_jsonl_records_are_documents(llama, tmp_path: Path) -> None:
    model, tokenizer = llama
    txt = write(tmp_path, "story.txt", TEXT)
    assert text_documents([txt]) == [TEXT]  # blank lines stay, nothing is cut into paragraphs
    stream = drain(score_text(model, tokenizer, [txt]))
    nats = direct_nats(model, [tokenizer.bos_token_id, *encode(tokenizer, TEXT)])
    assert stream["text_documents"] == 1
    assert stream["bits_per_byte"] == pytest.approx(nats / math.log(2) / len(TEXT.encode()), rel=1e-5)
    paragraphs = [p for p in TEXT.split("\n\n") if p.strip()]
    jsonl = write(tmp_path, "story.jsonl", "".join(json.dumps({"text": p}) + "\n" for p in paragraphs)
                  + json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    assert text_documents([jsonl]) == paragraphs  # a chat record is not text to score
    records = drain(score_text(model, tokenizer, [jsonl]))
    ids = [encode(tokenizer, p) for p in paragraphs]
    nats = sum(direct_nats(model, [tokenizer.bos_token_id, *i]) for i in ids)
    size = sum(len(p.encode()) for p in paragraphs)
    assert (records["text_documents"], records["text_tokens"], records["text_bytes"]) == (
        len(paragraphs), sum(map(len, ids)), size)
    assert records["bits_per_byte"] == pytest.approx(nats / math.log(2) / size, rel=1e-5)
    # a folder: its files in name order, each one document
    assert text_documents([str(tmp_path)]) == [*paragraphs, TEXT]


def test_every_tokenizer_meets_the_same_bytes(llama, gpt2, tmp_path: Path) -> None:
    path = write(tmp_path, "a.txt", TEXT * 4)
    a = drain(score_text(*llama, [path], max_bytes=301))
    b = drain(score_text(*gpt2, [path], max_bytes=301))
    cut = cut_utf8(TEXT * 4, 301)
    assert a["text_bytes"] == b["text_bytes"] == len(cut.encode("utf-8")) and 298 <= a["text_bytes"] <= 301
    assert a["text_tokens"] != b["text_tokens"]  # different tokenizers, the same text
    assert text_documents([path], 301) == [cut]


def test_the_byte_limit_cuts_on_a_character_boundary(llama, tmp_path: Path) -> None:
    text = "日本語のテキスト。" * 40  # 3 bytes a character
    assert cut_utf8(text, 100) == text[:33] and cut_utf8("aé", 2) == "a" and cut_utf8("aé", 3) == "aé"
    path = write(tmp_path, "ja.txt", text)
    result = drain(score_text(*llama, [path], max_bytes=100))
    assert result["text_bytes"] == 99 and text_documents([path], 100) == [text[:33]]
    # the limit spans documents: the second file is cut, the third never read
    files = [write(tmp_path, f"{n}.txt", "héllo wörld\n" * 5) for n in "abc"]
    docs = text_documents(files, 86)  # 70 bytes a file; 16 left fall inside the é of the second
    assert docs == ["héllo wörld\n" * 5, "héllo wörld\nh"]


def test_without_bos_or_eos_the_first_token_is_context_and_its_bytes_are_not_counted(tmp_path: Path) -> None:
    words = ["über", "cat", "sat", "on", "the", "mat", "[UNK]"]
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    model = build_model(ModelSpec("gpt2", len(words), 32, 1, 2, 2, 64, 64), seed=2).eval()
    text = "über cat sat on the mat über the cat sat"
    ids = raw.encode(text, add_special_tokens=False).ids
    nats = direct_nats(model, ids)  # the first token predicts the second; nothing predicts the first
    path = write(tmp_path, "a.txt", text)
    for tokenizer in (raw, PreTrainedTokenizerFast(tokenizer_object=raw)):
        result = drain(score_text(model, tokenizer, [path]))
        unscored = len("über".encode())  # 5 bytes
        assert (result["text_tokens"], result["text_bytes"]) == (len(ids) - 1, len(text.encode()) - unscored)
        assert result["bits_per_byte"] == pytest.approx(nats / math.log(2) / result["text_bytes"], rel=1e-5)
    with pytest.raises(UserError, match="too short"):
        drain(score_text(model, raw, [write(tmp_path, "b.txt", "über")]))


def test_a_prepared_dataset_is_scored_document_by_document(tmp_path: Path) -> None:
    from train_helpers import make_dataset

    from desktop_app.engine.data.tokenization import load_tokenizer

    dataset = make_dataset(tmp_path / "ds", n_docs=20)
    tokenizer = load_tokenizer(dataset / "tokenizer.json")
    model = build_model(ModelSpec("gpt2", tokenizer.get_vocab_size(), 32, 1, 2, 2, 64, 64), seed=3).eval()
    docs = text_documents([str(dataset)])
    result = drain(score_text(model, tokenizer, [str(dataset)], context=64))
    assert result["text_documents"] == len(docs) == 4  # the validation split, 20% of 20
    assert result["text_bytes"] == sum(len(d.encode()) for d in docs)


@pytest.mark.parametrize("content, needle", [
    ("", "no text"),
    (" \n\n\t\n", "no text"),
    ("\x00\x01binary", "binary"),
])
def test_bad_text_is_a_clear_error(llama, tmp_path: Path, content: str, needle: str) -> None:
    path = write(tmp_path, "bad.txt", content)
    with pytest.raises(UserError, match=needle):
        drain(score_text(*llama, [path]))


def test_missing_files_and_files_without_text_records_are_clear_errors(llama, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        drain(score_text(*llama, [str(tmp_path / "nope.txt")]))
    chats = write(tmp_path, "chat.jsonl", json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                                  {"role": "assistant", "content": "yo"}]}) + "\n")
    with pytest.raises(UserError, match="no text"):
        drain(score_text(*llama, [chats]))
    # a table without a text column: said so, never read as raw bytes
    with pytest.raises(UserError, match="no column to read"):
        drain(score_text(*llama, [write(tmp_path, "a.csv", "x,y\n1,2\n")]))
    with pytest.raises(UserError, match="unsupported"):
        drain(score_text(*llama, [write(tmp_path, "a.xyz", "x,y\n")]))


def test_a_table_is_scored_on_its_text_column_not_its_raw_bytes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from desktop_app.engine.evaluate.perplexity import text_documents

    table = write(tmp_path, "notes.csv", "text,id\nhello world,1\nsecond note,2\n")
    assert text_documents([table]) == ["hello world", "second note"]
