"""Tables -> pretraining text or fine-tuning records: Parquet (100k+ rows, streamed in bounded memory), CSV, TSV,
`datasets` save_to_disk folders; the column mapping (guessed, given, refused) and what a damaged table gets."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from document_cases import make_dataset_folder, make_parquet

from desktop_app.engine.column_roles import format_columns, parse_columns
from desktop_app.engine.data.columns import guess_mapping, mapping_for
from desktop_app.engine.data.ingest import Doc, Record, discover, inspect_file, read_items, scan
from desktop_app.engine.errors import UserError

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ModuleNotFoundError:  # the documents extra is not installed: the mapping's own tests still run
    pa = pq = None
needs_arrow = pytest.mark.skipif(pa is None, reason="the documents extra (pyarrow) is not installed")

ALPACA = [{"instruction": f"Add {i} and 1", "input": "", "output": str(i + 1)} for i in range(50)]


@needs_arrow
def test_parquet_100k_rows_stream_in_bounded_memory_and_equal_what_went_in(tmp_path: Path) -> None:
    path = tmp_path / "corpus.parquet"
    texts = make_parquet(path, 120_000)
    info = inspect_file(path)
    assert (info.verdict, info.format, info.documents) == ("ok", "parquet:text", 120_000)
    assert info.chars == sum(map(len, texts))  # the scan counts the batches of whole documents exactly
    assert "text ← body" in info.reason  # the guessed mapping is shown
    base = pa.total_allocated_bytes()
    arrow_peak = 0
    tracemalloc.start()
    got = []
    for i, item in enumerate(read_items(path)):
        assert isinstance(item, Doc) and item.first and item.last
        if i % 1000 == 0:
            arrow_peak = max(arrow_peak, pa.total_allocated_bytes() - base)
        if i % 997 == 0:  # keep a sample, not the whole corpus, so the memory figure is the reader's
            got.append((i, item.text))
    python_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert all(texts[i] == text for i, text in got) and got[-1][0] > 119_000
    data_bytes = sum(len(t) for t in texts)
    assert arrow_peak < data_bytes / 2 and python_peak < 4 << 20, (arrow_peak, python_peak, data_bytes)


@needs_arrow
def test_truncated_parquet_and_a_binary_named_parquet_get_verdicts(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    make_parquet(good, 100)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    png = tmp_path / "image.parquet"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    verdicts = {Path(i.path).name: i for i in scan([tmp_path])}
    assert verdicts["good.parquet"].verdict == "ok"
    assert verdicts["cut.parquet"].verdict == "damaged" and "download it again" in verdicts["cut.parquet"].reason
    assert verdicts["image.parquet"].verdict == "wrong-type" and "PNG" in verdicts["image.parquet"].reason
    assert all("\n" not in i.reason for i in verdicts.values())


@needs_arrow
def test_csv_instruction_columns_become_records_equal_to_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "qa.csv"
    rows = [("What is 2+2?", "4"), ('Say "hi",\nthen stop', "hi")]  # quotes, a comma and a newline in a cell
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([("question", "answer"), *rows])
    items = list(read_items(path))
    assert items == [Record("instruction", {"instruction": q, "input": "", "output": a}) for q, a in rows]
    info = inspect_file(path)
    assert (info.verdict, info.format, info.records) == ("ok", "csv:instruction", {"instruction": 2})


@needs_arrow
def test_tsv_with_a_given_mapping_and_skipped_rows(tmp_path: Path) -> None:
    path = tmp_path / "notes.tsv"
    path.write_text("id\tnote\n1\tFirst note.\n2\t\n3\tThird note.\n", encoding="utf-8")
    assert [d.text for d in read_items(path, columns={"text": "note"})] == ["First note.", "Third note."]
    info = inspect_file(path, columns={"text": "note"})
    assert info.verdict == "partly" and info.documents == 2
    assert "1 of 3 rows skipped (row 2: 'note' (text) is empty)" in info.reason


@needs_arrow
def test_datasets_folders_are_one_source_each(tmp_path: Path) -> None:
    root = tmp_path / "squad_like"
    make_dataset_folder(root / "train", ALPACA[:30], shards=3)
    make_dataset_folder(root / "test", ALPACA[30:], shards=1)
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}), encoding="utf-8")
    assert [p.name for p, problem in discover([root]) if problem is None] == ["test", "train"]
    infos = {Path(i.path).name: i for i in scan([root])}
    assert infos["train"].records == {"instruction": 30} and infos["test"].records == {"instruction": 20}
    assert infos["train"].format == "datasets:instruction" and infos["train"].size > 0
    records = [r.data for r in read_items(root / "train")]
    assert records == ALPACA[:30]


@needs_arrow
def test_chat_and_preference_tables_share_gpt_and_ultrafeedback(tmp_path: Path) -> None:
    share = tmp_path / "share.parquet"
    pq.write_table(pa.table({"conversations": [[{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]]}),
                   share)
    [chat] = read_items(share)
    assert chat == Record("chat", {"messages": [{"role": "user", "content": "Hi"},
                                                {"role": "assistant", "content": "Hello"}]})
    pref = tmp_path / "uf.parquet"
    chosen = [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue."}]
    rejected = [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Green."}]
    pq.write_table(pa.table({"prompt": ["Sky?"], "chosen": [chosen], "rejected": [rejected], "score": [8.5]}), pref)
    [rec] = read_items(pref)
    assert rec.kind == "preference" and rec.data["chosen"] == chosen and rec.data["prompt"] == "Sky?"


@pytest.mark.parametrize("columns, kind, fields", [
    (["instruction", "input", "output"], "instruction", {"instruction": "instruction", "input": "input",
                                                         "output": "output"}),
    (["messages", "id"], "chat", {"messages": "messages"}),
    (["conversations"], "chat", {"messages": "conversations"}),
    (["prompt", "chosen", "rejected", "score_chosen"], "preference", {"prompt": "prompt", "chosen": "chosen",
                                                                     "rejected": "rejected"}),
    (["Question", "Answer"], "instruction", {"instruction": "Question", "output": "Answer"}),
    (["url", "text"], "text", {"text": "text"}),
])
def test_mapping_is_guessed_from_common_names(columns: list[str], kind: str, fields: dict[str, str]) -> None:
    mapping = guess_mapping(columns)
    assert mapping is not None and (mapping.kind, mapping.to_dict()) == (kind, fields)


@pytest.mark.parametrize("text, words", [
    ("text", "is not role=column"),
    ("colour=body", "unknown role(s) 'colour'"),
    ("instruction=q", "incomplete"),
    ("text=a,output=b", "do not go with pretraining text"),
])
def test_bad_columns_option_says_what_to_do(text: str, words: str) -> None:
    with pytest.raises(UserError) as err:
        parse_columns(text)
    assert words in str(err.value)


def test_given_mapping_round_trips_and_is_checked_against_the_columns() -> None:
    given = parse_columns("instruction=q, output=a")
    assert format_columns(given) == "instruction=q,output=a"
    assert mapping_for(["q", "a"], given).kind == "instruction"
    with pytest.raises(UserError, match="column\\(s\\) 'q' not found: the file has x, a"):
        mapping_for(["x", "a"], given)
    with pytest.raises(UserError, match="no column to read: the file has x, y"):
        mapping_for(["x", "y"], None)


@needs_arrow
def test_table_without_a_known_column_is_refused_with_its_columns_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"x": ["a"], "y": ["b"]}), path)
    info = inspect_file(path)
    assert info.verdict == "unsupported" and "the file has x, y" in info.reason and "text=<column>" in info.reason
    ok = inspect_file(path, columns={"text": "y"})
    assert (ok.verdict, ok.documents) == ("ok", 1)


def test_jsonl_with_own_keys_reads_through_the_mapping(tmp_path: Path) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"q": "Capital of France?", "a": "Paris"}) + "\n" + json.dumps({"text": "plain"}) + "\n",
                    encoding="utf-8")
    assert inspect_file(path).verdict == "bad-jsonl"  # without a mapping the keys are unknown
    items = list(read_items(path, columns={"instruction": "q", "output": "a"}))
    assert items == [Record("instruction", {"instruction": "Capital of France?", "input": "", "output": "Paris"}),
                     Doc("plain")]


@needs_arrow
def test_table_preview_shows_columns_rows_and_the_mapping_in_effect(tmp_path: Path) -> None:
    from desktop_app.engine.data.preview import preview_source

    path = tmp_path / "qa.parquet"
    pq.write_table(pa.Table.from_pylist([{"q": f"Question {i}?", "a": f"Answer {i}."} for i in range(12)]), path)
    preview = preview_source(path)
    assert preview.kind == "table" and preview.table is not None
    assert preview.table.columns == ["q", "a"] and preview.table.total_rows == 12
    assert preview.table.rows[0] == ["Question 0?", "Answer 0."] and len(preview.table.rows) == 5
    assert preview.mapping == {} and "no column to read: the file has q, a" in preview.note
    mapped = preview_source(path, {"instruction": "q", "output": "a"})
    assert mapped.mapping == {"instruction": "q", "output": "a"} and "instruction ← q" in mapped.note
    other = preview_source(path, {"text": "body"})  # a mapping for other tables: this one keeps its own (none)
    assert other.mapping == {} and other.note
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"}]}) + "\n", encoding="utf-8")
    assert preview_source(jsonl).mapping == {"messages": "messages"}
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(path.read_bytes()[:40])
    assert "damaged Parquet file" in preview_source(cut).problem
