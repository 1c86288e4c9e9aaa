"""A validation share that holds out no document (issue 51): said before a dataset is prepared, in words that give
the number of documents and the share (or the documents) that holds one out; prepare warns and goes on."""

from __future__ import annotations

import pytest

from desktop_app.engine.data.prepare import prepare_dataset
from desktop_app.engine.data.split_check import (
    documents_for_one,
    empty_validation,
    held_out_words,
    share_for_one,
    validation_shortfall,
)
from desktop_app.engine.events import Finished, Log
from desktop_app.engine.specs import DataSpec

WORDS = ["the", "cat", "sat", "on", "the", "mat", "and", "a", "dog", "ran", "to", "the", "park"]


def test_three_documents_at_five_percent_hold_out_none_and_the_sentence_says_what_would():
    said = validation_shortfall(3, 0.05)
    assert said.startswith("No validation loss: 0.05 of 3 documents is 0.15, less than one")
    assert "hold out at least 0.34" in said and "20 or more at 0.05" in said and "\n" not in said
    assert 0.34 * 3 >= 1 > 0.33 * 3  # the smallest share in hundredths that holds out one


@pytest.mark.parametrize(("documents", "share"), [(20, 0.05), (240, 0.05), (2, 0.5), (3, 0.0), (0, 0.05)])
def test_a_share_that_holds_out_one_or_nothing_asked_says_nothing(documents, share):
    assert validation_shortfall(documents, share) == ""


def test_a_single_document_cannot_be_split_whatever_the_share():
    said = validation_shortfall(1, 0.05)
    assert "1 document is" in said and "at least" not in said and "add documents (20 or more" in said
    assert share_for_one(1) is None and share_for_one(2) == 0.5 and share_for_one(7) == 0.15
    assert documents_for_one(0.05) == 20 and documents_for_one(0.3) == 4


def test_held_out_words():
    assert held_out_words(240, 0.05) == "0.05 of 240 documents holds out about 12 for validation."
    assert "Nothing is held out" in held_out_words(10, 0.0) and held_out_words(0, 0.05) == ""


def test_an_empty_split_after_preparing_is_told_only_when_the_share_should_have_held_one_out():
    def manifest(val: int, train: int, share: float) -> dict:
        return {"split": {"val_fraction": share}, "splits": {"val": {"documents": val}, "train": {"documents": train}}}

    assert empty_validation(manifest(0, 3, 0.05)) == []  # warned of before tokenizing
    assert "came out empty" in empty_validation(manifest(0, 30, 0.05))[0]  # by chance
    assert empty_validation(manifest(2, 28, 0.05)) == [] and empty_validation(manifest(0, 30, 0.0)) == []


def test_prepare_warns_before_tokenizing_and_still_prepares(tmp_path):
    text = tmp_path / "three.txt"
    text.write_text("\n\n".join(" ".join(WORDS[(i + k) % len(WORDS)] for k in range(120)) for i in range(3)),
                    encoding="utf-8")
    events = list(prepare_dataset([text], tmp_path / "ds", DataSpec(vocab_size=320, context_length=32,
                                                                    val_fraction=0.05)))
    warnings = [e.message for e in events if isinstance(e, Log) and e.level == "warning"]
    assert validation_shortfall(3, 0.05) in warnings
    first = next(i for i, e in enumerate(events) if isinstance(e, Log) and e.message in warnings)
    assert first < next(i for i, e in enumerate(events) if isinstance(e, Log) and "tokenizing" in e.message)
    assert isinstance(events[-1], Finished) and events[-1].reason == "completed"
    assert not any("came out empty" in w for w in warnings)  # said once
