"""A table's text column goes to the tokenizer as lists of whole documents, one list per Arrow record batch (no object
per row): the rows that need a look of their own (nulls, blanks, non-text, texts longer than one piece) keep the
old rules, and a prepared dataset holds exactly the tokens the same texts give as separate documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from desktop_app.engine.data.items import PIECE_CHARS, Doc
from desktop_app.engine.data.prepare import prepare_dataset
from desktop_app.engine.data.rich_sources import Notes
from desktop_app.engine.data.tables import BATCH_ROWS, no_blank_rows, text_batches
from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.specs import DataSpec

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write(path: Path, values: list, kind: object = None) -> Path:
    pq.write_table(pa.table({"body": pa.array(values, type=kind)}), path, row_group_size=BATCH_ROWS)
    return path


def test_plain_rows_arrive_as_one_list_per_record_batch(tmp_path: Path) -> None:
    texts = [f"row {i} of the corpus" for i in range(2 * BATCH_ROWS + 5)]
    notes = Notes()
    got = list(text_batches(write(tmp_path / "t.parquet", texts), "body", notes))
    assert [len(b) for b in got] == [BATCH_ROWS, BATCH_ROWS, 5] and all(isinstance(b, list) for b in got)
    assert [t for b in got for t in b] == texts
    assert (notes.rows, notes.skipped) == (len(texts), 0)


def test_rows_that_need_a_look_keep_the_rules_and_the_order(tmp_path: Path) -> None:
    long = ("word " * (PIECE_CHARS // 5 + 100)).strip()
    values = ["first", None, "", "   \n", long, "last"]
    notes = Notes()
    got = list(text_batches(write(tmp_path / "t.parquet", values), "body", notes))
    assert got[0] == ["first"] and got[-1] == ["last"]
    pieces = got[1:-1]
    assert all(isinstance(p, Doc) for p in pieces) and len(pieces) >= 2
    assert pieces[0].first and not pieces[0].last and pieces[-1].last
    assert "".join(p.text for p in pieces) == long
    assert (notes.rows, notes.skipped) == (6, 1) and notes.first_skip == "row 2: 'body' (text) is empty"


@pytest.mark.parametrize("values, wanted", [
    ([" leading space", "\u00e9t\u00e9", "x"], [[" leading space", "\u00e9t\u00e9", "x"]]),  # may look blank: are not
    ([" a", "\u3000\u00a0", "b", "\x1c"], [[" a", "b"]]),  # blank in Unicode's sense: left out
])
def test_blank_texts_are_told_from_texts_that_start_with_a_space(tmp_path: Path, values: list, wanted: list) -> None:
    notes = Notes()
    assert list(text_batches(write(tmp_path / "s.parquet", values), "body", notes)) == wanted
    assert notes.skipped == 0


@pytest.mark.parametrize("values, clean", [
    (["alpha", "beta", "~tilde"], True),
    (["alpha", " space first"], False),  # could be blank: the batches are looked at
    (["alpha", ""], False),
    (["alpha", "\u00e9t\u00e9"], False),  # non-ASCII first character
    (["alpha", None], True),  # nulls are seen per batch (null_count), not here
])
def test_parquet_statistics_tell_when_no_row_can_be_blank(tmp_path: Path, values: list, clean: bool) -> None:
    path = write(tmp_path / "s.parquet", values)
    assert no_blank_rows(path, "body") is clean
    notes = Notes()
    got = [t for b in text_batches(path, "body", notes) for t in (b if isinstance(b, list) else [b.text])]
    assert got == [v for v in values if v and not v.isspace()]


def test_a_column_that_is_not_text_is_counted_not_read(tmp_path: Path) -> None:
    notes = Notes()
    assert list(text_batches(write(tmp_path / "n.parquet", [1, 2, 3], pa.int64()), "body", notes)) == []
    assert notes.skipped == 3 and notes.first_skip == "row 1: 'body' (text) must be text, not int"


def test_a_prepared_table_holds_the_tokens_of_each_row_as_its_own_document(tmp_path: Path) -> None:
    texts = [f"the tide came in over bar {i % 37} near pier {i % 11}" for i in range(3000)] + ["", None, "end"]
    table = write(tmp_path / "corpus.parquet", texts)
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(f'{{"text": "{t}"}}\n' for t in texts if t), encoding="utf-8")
    spec = DataSpec(vocab_size=300, context_length=16, val_fraction=0.1)
    done = [e for e in prepare_dataset([table], tmp_path / "a", spec) if e.type == "finished"]
    assert done[-1].reason == "completed", done[-1].message
    same = DataSpec(vocab_size=300, context_length=16, val_fraction=0.1,
                    tokenizer_file=str(TokenStore(tmp_path / "a").tokenizer_path))
    done = [e for e in prepare_dataset([jsonl], tmp_path / "b", same) if e.type == "finished"]
    assert done[-1].reason == "completed", done[-1].message
    a, b = TokenStore(tmp_path / "a"), TokenStore(tmp_path / "b")
    for split in ("train", "val"):
        assert len(a.tokens(split)) > 0
        assert np.array_equal(a.tokens(split), b.tokens(split)), split
    assert a.manifest["splits"] == b.manifest["splits"]
