"""Fine-tuning data files: format detection, normalisation, and a verdict with a line for every bad record.

(Named test_data_formats.py, not test_data.py: tests/engine/test_data.py exists and pytest's default import
mode needs unique basenames across folders without __init__.py.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.finetune.formats import (
    FORMATS,
    RecordVerdict,
    detect_format,
    expand_data_paths,
    normalise_record,
    read_records,
)


def write_lines(folder: Path, name: str, lines: list[Any]) -> Path:
    """One line per item: dicts/lists as JSON, strings verbatim (for broken lines)."""
    path = folder / name
    text = "\n".join(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False) for line in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def by_line(verdicts: list[RecordVerdict]) -> dict[int, RecordVerdict]:
    out = {v.line: v for v in verdicts if v.line}
    assert len(out) == len([v for v in verdicts if v.line]), "one verdict per record"
    return out


def summaries(verdicts: list[RecordVerdict]) -> list[RecordVerdict]:
    return [v for v in verdicts if v.line == 0]


CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
SHAREGPT = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]}
ALPACA = {"instruction": "Say hello", "input": "", "output": "Hello!"}
PREFERENCE = {"prompt": "Hi", "chosen": "Hello!", "rejected": "Go away."}
SAMPLES = {"chat": CHAT, "sharegpt": SHAREGPT, "alpaca": ALPACA, "preference": PREFERENCE}


# ------------------------------------------------------------------------------------------- detection


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_is_detected_in_jsonl_and_json_arrays(tmp_path: Path, fmt: str) -> None:
    jsonl = write_lines(tmp_path, f"{fmt}.jsonl", [SAMPLES[fmt]] * 3)
    array = tmp_path / f"{fmt}.json"
    array.write_text(json.dumps([SAMPLES[fmt]] * 3, indent=2), encoding="utf-8")
    assert detect_format(jsonl) == fmt
    assert detect_format(array) == fmt
    records, verdicts = read_records([jsonl, array])
    assert len(records) == 6
    assert [v.status for v in verdicts] == ["ok", "ok"]  # only the two file summaries
    assert all("3 of 3 records used" in v.reason for v in verdicts)


def test_detection_looks_past_broken_lines_and_takes_the_majority(tmp_path: Path) -> None:
    path = write_lines(tmp_path, "mixed.jsonl", ["{not json", ALPACA, CHAT, CHAT, CHAT])
    assert detect_format(path) == "chat"


def test_a_pretty_printed_single_object_json_file_is_one_record(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text("\n\n" + json.dumps(CHAT, indent=2), encoding="utf-8")
    assert detect_format(path) == "chat"
    records, _ = read_records(path)
    assert records[0]["source"]["line"] == 3


def test_unknown_format_and_empty_file_raise_clear_errors(tmp_path: Path) -> None:
    unknown = write_lines(tmp_path, "unknown.jsonl", [{"text": "a", "label": 1}])
    with pytest.raises(UserError, match=r"unknown data format.*line 1.*keys label, text.*messages"):
        detect_format(unknown)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(UserError, match="empty"):
        detect_format(empty)
    garbage = write_lines(tmp_path, "garbage.jsonl", ["not json at all", "[1, 2]"])
    with pytest.raises(UserError, match=r"no readable record.*line 1.*not valid JSON"):
        detect_format(garbage)
    with pytest.raises(UserError, match="does not exist"):
        detect_format(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------------------------------ normalising


def test_each_format_normalises_to_messages(tmp_path: Path) -> None:
    sharegpt = {"system": "Be kind.", "conversations": [
        {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"},
        {"from": "user", "value": "Bye"}, {"from": "assistant", "value": "Bye!"}]}
    assert normalise_record(sharegpt)["messages"] == [
        {"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Bye!"}]
    alpaca = {"instruction": "Translate", "input": "chat", "output": "cat", "system": "You translate.",
              "history": [["Translate", "Hund"]]}
    assert normalise_record(alpaca)["messages"] == [
        {"role": "system", "content": "You translate."}, {"role": "user", "content": "Translate"},
        {"role": "assistant", "content": "Hund"}, {"role": "user", "content": "Translate\n\nchat"},
        {"role": "assistant", "content": "cat"}]
    assert normalise_record({"instruction": "Hi", "output": "Hello"})["messages"][0] == {"role": "user",
                                                                                          "content": "Hi"}
    parts = {"messages": [{"role": "developer", "content": "Rules"},
                          {"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                       {"type": "text", "text": "you"}]},
                          {"role": "assistant", "content": "Hello"}]}
    assert normalise_record(parts)["messages"][:2] == [{"role": "system", "content": "Rules"},
                                                       {"role": "user", "content": "Hi you"}]


def test_preference_records_accept_strings_lists_and_whole_conversations() -> None:
    expected = {"prompt": [{"role": "user", "content": "Hi"}],
                "chosen": [{"role": "assistant", "content": "Hello"}],
                "rejected": [{"role": "assistant", "content": "Go"}]}
    assert normalise_record({"prompt": "Hi", "chosen": "Hello", "rejected": "Go"}) == expected
    as_lists = {"prompt": [{"role": "user", "content": "Hi"}],
                "chosen": [{"role": "assistant", "content": "Hello"}],
                "rejected": {"role": "assistant", "content": "Go"}}
    assert normalise_record(as_lists) == expected
    repeated = {"prompt": [{"role": "user", "content": "Hi"}],
                "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go"}]}
    assert normalise_record(repeated) == expected
    implicit = {"chosen": repeated["chosen"], "rejected": repeated["rejected"]}
    assert normalise_record(implicit) == expected
    with_system = normalise_record({"system": "S", "prompt": "Hi", "chosen": "Hello", "rejected": "Go"})
    assert with_system["prompt"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]


# ------------------------------------------------------------------------------------ bad records → verdicts


def _msgs(*pairs: tuple[str, Any]) -> dict[str, Any]:
    return {"messages": [{"role": r, "content": c} for r, c in pairs]}


def test_every_bad_chat_record_gets_a_verdict_with_its_line(tmp_path: Path) -> None:
    lines: list[Any] = [
        CHAT,                                                          # 1 ok
        '{"messages": [{"role": "user", "content": "Hi"}',            # 2 bad JSON
        "",                                                            # 3 blank: not a record
        [1, 2],                                                        # 4 not an object
        {"msgs": CHAT["messages"]},                                    # 5 missing key
        _msgs(("user", "Hi"), ("assistant", "   ")),                   # 6 empty assistant turn
        _msgs(("user", "Hi"), ("assistant", 5)),                       # 7 wrong type
        {"messages": "Hi"},                                            # 8 messages not a list
        _msgs(("user", "Hi"), ("robot", "Beep")),                      # 9 unknown role
        _msgs(("system", "S"), ("user", "Hi")),                        # 10 no assistant message
        _msgs(("user", "Hi"), ("tool", "{}"), ("assistant", "Ok")),    # 11 tool message
        {"messages": []},                                              # 12 empty list
        {"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]},  # 13 no content
        {"messages": [{"content": "Hi"}]},                             # 14 no role
        _msgs(("user", "Hi"), ("assistant", "Hello"), ("user", "More?"), ("assistant", "")),  # 15 empty 2nd turn
        CHAT,                                                          # 16 ok
    ]
    path = write_lines(tmp_path, "chat.jsonl", lines)
    records, verdicts = read_records(path)
    assert [r["source"]["line"] for r in records] == [1, 16]
    assert records[0]["messages"] == CHAT["messages"]
    expected = {
        2: "not valid JSON",
        4: "expected a JSON object, not a list",
        5: "missing key 'messages' (the record has keys msgs",
        6: "messages message 2 (assistant) is empty",
        7: "messages message 2 (assistant) 'content' must be a string, not a number",
        8: "'messages' must be a list of messages, not a string",
        9: "unknown role 'robot'",
        10: "has no assistant message",
        11: "tool messages are not supported",
        12: "'messages' is an empty list",
        13: "message 1 (user) has no 'content'",
        14: "message 1 has no 'role'",
        15: "message 4 (assistant) is empty",
    }
    got = by_line(verdicts)
    assert sorted(got) == sorted(expected)
    for line, text in expected.items():
        assert got[line].status == "error" and text in got[line].reason, (line, got[line].reason)
        assert got[line].path == str(path)
    [summary] = summaries(verdicts)
    assert summary.status == "ok" and "2 of 15 records used" in summary.reason and "13 error" in summary.reason
    assert str(got[2]).startswith(f"{path}:2: error: not valid JSON")


def test_bad_sharegpt_alpaca_and_preference_records(tmp_path: Path) -> None:
    share = write_lines(tmp_path, "share.jsonl", [
        SHAREGPT,
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "alien", "value": "x"}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt"}]},
        {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": ""}]},
    ])
    alpaca = write_lines(tmp_path, "alpaca.jsonl", [
        ALPACA,
        {"instruction": "Hi"},
        {"instruction": "Hi", "output": ["a", "b"]},
        {"instruction": "Hi", "output": " "},
        {"instruction": "", "input": "", "output": "x"},
        {"instruction": 3, "output": "x"},
        {"instruction": "Hi", "output": "x", "history": [["only one"]]},
    ])
    pref = write_lines(tmp_path, "pref.jsonl", [
        PREFERENCE,
        {"prompt": "Hi", "chosen": "Hello"},
        {"prompt": "Hi", "chosen": "Same", "rejected": "Same"},
        {"prompt": "Hi", "chosen": "", "rejected": "No"},
        {"prompt": "Hi", "chosen": [{"role": "user", "content": "x"}], "rejected": "No"},
        {"chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]},
        {"prompt": 7, "chosen": "a", "rejected": "b"},
    ])
    records, verdicts = read_records([share, alpaca, pref])
    assert len(records) == 3
    got = {(Path(v.path).name, v.line): (v.status, v.reason) for v in verdicts if v.line}
    expected = {
        ("share.jsonl", 2): ("error", "unknown from 'alien'"),
        ("share.jsonl", 3): ("error", "message 2 (assistant) has no 'value'"),
        ("share.jsonl", 4): ("error", "conversations message 2 (assistant) is empty"),
        ("alpaca.jsonl", 2): ("error", "missing key 'output'"),
        ("alpaca.jsonl", 3): ("error", "'output' must be a string, not a list"),
        ("alpaca.jsonl", 4): ("error", "'output' (the assistant turn) is empty"),
        ("alpaca.jsonl", 5): ("error", "'instruction' and 'input' are both empty"),
        ("alpaca.jsonl", 6): ("error", "'instruction' must be a string, not a number"),
        ("alpaca.jsonl", 7): ("error", "'history' item 1 must be a pair"),
        ("pref.jsonl", 2): ("error", "missing key 'rejected'"),
        ("pref.jsonl", 3): ("dropped", "identical"),
        ("pref.jsonl", 4): ("error", "'chosen' is empty"),
        ("pref.jsonl", 5): ("error", "'chosen' has no assistant message"),
        ("pref.jsonl", 6): ("error", "missing key 'prompt'"),
        ("pref.jsonl", 7): ("error", "'prompt' must be a string or a list of messages, not a number"),
    }
    assert sorted(got) == sorted(expected)
    for key, (status, text) in expected.items():
        assert got[key][0] == status and text in got[key][1], (key, got[key])
    assert [v.status for v in summaries(verdicts)] == ["ok", "ok", "ok"]


def test_json_arrays_report_the_line_each_record_starts_on(tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    body = json.dumps([CHAT, {"msgs": 1}, CHAT], indent=2)
    path.write_text(body, encoding="utf-8")
    starts = [i + 1 for i, line in enumerate(body.splitlines()) if line == "  {"]
    records, verdicts = read_records(path)
    assert [r["source"]["line"] for r in records] == [starts[0], starts[2]]
    [bad] = [v for v in verdicts if v.line]
    assert bad.line == starts[1] and "missing key 'messages'" in bad.reason

    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"instruction": "a", "output": "b"},\n  {"instruction": "c", "output": }\n]\n',
                      encoding="utf-8")
    records, verdicts = read_records(broken)
    assert len(records) == 1
    [bad] = [v for v in verdicts if v.line]
    assert bad.line == 3 and "not valid JSON" in bad.reason and "rest of the file" in bad.reason

    unclosed = tmp_path / "unclosed.json"
    unclosed.write_text('[\n  {"instruction": "a", "output": "b"}\n  {"instruction": "c", "output": "d"}\n]',
                        encoding="utf-8")
    records, verdicts = read_records(unclosed)
    assert len(records) == 1
    [bad] = [v for v in verdicts if v.line]
    assert bad.line == 3 and "expected ',' or ']'" in bad.reason


def test_unusable_files_get_file_verdicts_not_exceptions(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    unknown = write_lines(tmp_path, "unknown.jsonl", ["", {"text": "hello"}, {"text": "again"}])
    all_bad = write_lines(tmp_path, "all_bad.jsonl", [_msgs(("user", "Hi"), ("assistant", ""))])
    good = write_lines(tmp_path, "good.jsonl", [CHAT])
    records, verdicts = read_records([empty, unknown, all_bad, good])
    assert len(records) == 1
    per_file = {Path(v.path).name: v for v in summaries(verdicts)}
    assert per_file["empty.jsonl"].status == "error" and "empty" in per_file["empty.jsonl"].reason
    assert per_file["unknown.jsonl"].status == "error" and "unknown data format" in per_file["unknown.jsonl"].reason
    assert per_file["all_bad.jsonl"].status == "error" and "no usable record" in per_file["all_bad.jsonl"].reason
    assert per_file["good.jsonl"].status == "ok"
    # The unknown file's first record is named by line too (the records are not silently ignored).
    [first] = [v for v in verdicts if Path(v.path).name == "unknown.jsonl" and v.line]
    assert first.line == 2 and first.status == "error"


def test_non_utf8_lines_and_folders_and_missing_paths(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    path = folder / "a.jsonl"
    path.write_bytes(json.dumps(CHAT).encode() + b"\n\xff\xfe broken\n" + json.dumps(CHAT).encode() + b"\n")
    (folder / "notes.txt").write_text("ignored: not a data file", encoding="utf-8")
    records, verdicts = read_records(folder)
    assert len(records) == 2
    assert [(v.line, v.reason) for v in verdicts if v.line] == [(2, "not UTF-8 text")]
    with pytest.raises(UserError, match="does not exist"):
        read_records([tmp_path / "missing.jsonl"])
    with pytest.raises(UserError, match="no data file"):
        read_records([])


def test_a_folder_stands_for_its_data_files_at_any_depth(tmp_path: Path) -> None:
    root = tmp_path / "set"
    (root / "b" / "deep").mkdir(parents=True)
    (root / "empty").mkdir()
    for path in (root / "a.jsonl", root / "b" / "c.json", root / "b" / "deep" / "d.NDJSON"):
        path.write_text(json.dumps(CHAT) + "\n", encoding="utf-8")
    (root / "notes.txt").write_text("not data", encoding="utf-8")
    (root / "b" / "readme.md").write_text("not data", encoding="utf-8")
    expected = [root / "a.jsonl", root / "b" / "c.json", root / "b" / "deep" / "d.NDJSON"]
    assert expand_data_paths(root) == expected
    records, verdicts = read_records(root)
    assert [v.path for v in verdicts if v.line == 0] == [str(p) for p in expected] and len(records) == 3
    with pytest.raises(UserError, match=r"holds no \.jsonl"):
        expand_data_paths([root / "empty"])
    # The window's reading (check=False) keeps what it cannot use, to show the problem next to it.
    assert expand_data_paths([root / "empty", tmp_path / "missing.jsonl"], check=False) == [tmp_path / "missing.jsonl"]
