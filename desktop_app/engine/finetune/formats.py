"""Fine-tuning data files: find them, read chat / ShareGPT / Alpaca / preference records, normalise them and
give every record that is not plainly usable a verdict.

Files
    JSON Lines (one record per line) or a JSON array (.json); the format is detected per file from its
    first records. Tables (CSV, TSV, Parquet, Arrow, a `datasets` save_to_disk folder) are read through the column
    mapping (data/columns.py: the one given, or the one common column names suggest); "line" is then the row.
    A folder stands for every DATA_SUFFIXES file anywhere inside it (`expand_data_paths`,
    which the window's data list uses too, so it lists exactly what training reads). Every record that is
    not plainly usable gets a `RecordVerdict` naming its line (bad JSON, missing keys, wrong types, empty
    assistant turn, over-long → truncated or dropped); every file gets one summary verdict (line 0).
    Nothing is dropped without a verdict. Readers never raise for content; the `build_*` functions
    (examples.py) refuse (UserError) a file that is unusable as a whole (empty, unknown format, preference
    data given to SFT or the reverse) and a data set that leaves nothing to train on.

Normalised records
    SFT formats → {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]} (messages read
    by data/chat.py's `check_messages`); preference → {"prompt": [msgs], "chosen": [msgs], "rejected": [msgs]}.
    Both also carry "source": {"path": str, "line": int}.
"""

from __future__ import annotations

import codecs
import json
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.column_roles import SHAREGPT_ROLES, mapping_from_dict
from desktop_app.engine.data.chat import ChatError, check_messages, json_kind
from desktop_app.engine.data.columns import RowProblem, apply_mapping, mapping_for
from desktop_app.engine.data.items import FileProblem
from desktop_app.engine.data.tables import (
    TABLE_EXTENSIONS,
    column_names,
    is_dataset_folder,
    iter_rows,
    missing_library,
    table_kind,
)
from desktop_app.engine.errors import UserError

FORMATS = ("chat", "sharegpt", "alpaca", "preference")
SFT_FORMATS = ("chat", "sharegpt", "alpaca")
FORMAT_NAMES = {
    "chat": "chat JSONL",
    "sharegpt": "ShareGPT",
    "alpaca": "Alpaca instructions",
    "preference": "preference pairs",
}
FORMAT_HELP = ('chat ({"messages": [{"role", "content"}]}), ShareGPT ({"conversations": [{"from", "value"}]}), '
               'Alpaca ({"instruction", "input"?, "output"}) or preference ({"prompt", "chosen", "rejected"})')
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
DATA_SUFFIXES = JSON_SUFFIXES + TABLE_EXTENSIONS
STATUSES = ("ok", "truncated", "dropped", "error")
_DETECT_RECORDS = 100  # records looked at to tell a file's format


@dataclass(frozen=True)
class RecordVerdict:
    """One per record that is not plainly ok, and one summary per file (line 0)."""

    path: str
    line: int
    status: str  # "ok" | "truncated" | "dropped" | "error"
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.status}: {self.reason}"

    @classmethod
    def of(cls, path: str | Path, line: int, exc: RecordError | ChatError) -> RecordVerdict:
        """The verdict on a record that raised: "error", or the status a RecordError gives ("dropped")."""
        return cls(str(path), line, exc.status if isinstance(exc, RecordError) else "error", exc.reason)


class RecordError(UserError):
    """One record cannot be used ("error") or is left out on purpose ("dropped"); the reason says why."""

    def __init__(self, reason: str, status: str = "error") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


# ---------------------------------------------------------------------------------------------- reading


def expand_data_paths(paths: str | Path | Iterable[str | Path], *, check: bool = True) -> list[Path]:
    """Files as given (`~` expanded); a folder stands for the DATA_SUFFIXES files anywhere inside it, sorted.

    check: UserError when nothing is given, a path does not exist or a folder holds no data file (what training
    needs); the window passes False to list such paths and show their problem instead.
    """
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if check and not items:
        raise UserError("no data file given")
    out: list[Path] = []
    for item in items:
        p = Path(item).expanduser()
        if p.is_dir():
            found = _data_files_in(p)
            if check and not found:
                raise UserError(f"{p} holds no {', '.join(DATA_SUFFIXES)} file")
            out += found
        elif p.is_file() or not check:
            out.append(p)
        else:
            raise UserError(f"data file {p} does not exist")
    return out


def _data_files_in(folder: Path) -> list[Path]:
    """The data files of a folder, sorted: DATA_SUFFIXES files, and a `datasets` folder as one source."""
    if is_dataset_folder(folder):
        return [folder]
    datasets = sorted(d for d in folder.rglob("*") if d.is_dir() and is_dataset_folder(d))
    files = [f for f in sorted(folder.rglob("*")) if f.is_file() and f.suffix.lower() in DATA_SUFFIXES
             and not any(d in f.parents for d in datasets)]
    return sorted(files + datasets)


def _read_text(path: Path) -> tuple[str | None, tuple[int, RecordError] | None]:
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, (line, RecordError("not UTF-8 text; the file cannot be read (save it as UTF-8)"))


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in " \t\r\n":
        i += 1
    return i


def _array_items(path: Path) -> Iterator[tuple[int, Any]]:
    text, bad = _read_text(path)
    if text is None:
        assert bad is not None
        yield bad
        return
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(i: int) -> int:
        return bisect_left(newlines, i) + 1

    decoder = json.JSONDecoder()
    n = len(text)
    i = _skip_ws(text, text.index("[") + 1)
    if i < n and text[i] == "]":
        i = _skip_ws(text, i + 1)
        if i < n:
            yield line_of(i), RecordError("unexpected text after the closing ']' of the JSON array")
        return
    while True:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            yield exc.lineno, RecordError(f"not valid JSON ({exc.msg}, column {exc.colno}); the rest of the "
                                          "file from this line cannot be read")
            return
        yield line_of(i), obj
        i = _skip_ws(text, end)
        if i < n and text[i] == ",":
            i = _skip_ws(text, i + 1)
            continue
        if i < n and text[i] == "]":
            j = _skip_ws(text, i + 1)
            if j < n:
                yield line_of(j), RecordError("unexpected text after the closing ']' of the JSON array")
            return
        yield line_of(min(i, n - 1)), RecordError("expected ',' or ']' after this record: the JSON array is "
                                                  "not closed; the rest of the file cannot be read")
        return


def _jsonl_items(path: Path) -> Iterator[tuple[int, Any]]:
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if not raw.strip():
                continue  # blank lines are not records
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield lineno, RecordError("not UTF-8 text")
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                yield lineno, RecordError(f"not valid JSON ({exc.msg}, column {exc.colno})")


def _table_items(path: Path, columns: dict[str, str] | None) -> Iterator[tuple[int, Any]]:
    """(row, record in the normalisers' keys) per row of a table, or (row, RecordError) where a row cannot be read;
    UserError when the table cannot be read at all."""
    problem = missing_library(path)
    if problem is not None:
        raise UserError(f"{path.name}: {problem.reason}")
    try:
        mapping = mapping_for(column_names(path), columns)
        if mapping.kind == "text":
            raise UserError(f"{path.name} maps a text column ({mapping.describe()}): that is pretraining text; "
                            "fine-tuning needs instruction/output, messages or prompt/chosen/rejected columns")
        for row_number, row in enumerate(iter_rows(path, mapping.columns), 1):
            try:
                yield row_number, apply_mapping(row, mapping)[1]
            except RowProblem as exc:
                yield row_number, RecordError(str(exc))
    except FileProblem as exc:
        raise UserError(f"{path.name}: {exc.reason}") from None


def check_table_columns(paths: Iterable[str | Path], columns: dict[str, str]) -> None:
    """Refuse, before a run starts, a column mapping that a table among `paths` (folders expanded) cannot be read
    with: a role unknown, a column it does not have, or a text column where fine-tuning needs records. One
    UserError naming the file and its columns; JSON files (which have no columns) are not checked."""
    for path in expand_data_paths(list(paths), check=False):
        if not table_kind(path) or not path.exists():
            continue
        try:
            _check_mapping(path, columns)
        except FileProblem as exc:
            raise UserError(f"{path.name}: {exc.reason}") from None


def _check_mapping(path: Path, columns: dict[str, str]) -> None:
    problem = missing_library(path)
    if problem is not None:
        raise problem
    mapping = mapping_from_dict(columns)
    names = column_names(path)
    missing = [c for c in mapping.columns if c not in names]
    if missing:
        raise UserError(f"{path.name} has no column {' or '.join(map(repr, missing))} (its columns: "
                        f"{', '.join(names) or 'none'}): change the column mapping (--columns) to name its columns")
    if mapping.kind == "text":
        raise UserError(f"{path.name}: the column mapping reads a text column ({mapping.describe()}), which is "
                        "pretraining text; fine-tuning needs instruction=…,output=…, messages=… or "
                        "prompt=…,chosen=…,rejected=…")


def _raw_items(path: Path, columns: dict[str, str] | None = None) -> Iterator[tuple[int, Any]]:
    """(line, parsed value) per record of a file, or (line, RecordError) where a record cannot be read."""
    if table_kind(path):
        yield from _table_items(path, columns)
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc.strerror or exc})") from None
    first = head.removeprefix(codecs.BOM_UTF8).lstrip()[:1]
    if first == b"[":
        yield from _array_items(path)
        return
    if first == b"{" and path.suffix.lower() == ".json":  # one (pretty-printed) object, or JSONL named .json
        text, bad = _read_text(path)
        if text is None:
            assert bad is not None
            yield bad
            return
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            pass
        else:
            yield text[: text.index("{")].count("\n") + 1, obj
            return
    yield from _jsonl_items(path)


def _guess_format(record: dict[str, Any]) -> str | None:
    if "chosen" in record and "rejected" in record:
        return "preference"
    if "messages" in record:
        return "chat"
    if "conversations" in record:
        return "sharegpt"
    if "instruction" in record or ("output" in record and "input" in record):
        return "alpaca"
    return None


def _format_of(items: Sequence[tuple[int, Any]]) -> str | None:
    guesses = Counter(g for _, obj in items[:_DETECT_RECORDS] if isinstance(obj, dict)
                      for g in [_guess_format(obj)] if g)
    return guesses.most_common(1)[0][0] if guesses else None


def _unknown_format(path: Path, items: Sequence[tuple[int, Any]]) -> tuple[int, str]:
    """(line, reason) for a file whose format cannot be told."""
    if not items:
        return 0, "the file is empty: no records"
    dicts = [(line, obj) for line, obj in items if isinstance(obj, dict)]
    if dicts:
        line, obj = dicts[0]
        keys = ", ".join(sorted(map(str, obj))[:10]) or "none"
        return line, (f"unknown data format: the first record (line {line}) has keys {keys}; expected "
                      f"{FORMAT_HELP}")
    line, obj = items[0]
    what = obj.reason if isinstance(obj, RecordError) else f"it is {json_kind(obj)}, not a JSON object"
    return line, f"no readable record: the first one (line {line}) cannot be used ({what}); expected {FORMAT_HELP}"


def detect_format(path: str | Path, columns: dict[str, str] | None = None) -> str:
    """"chat" | "sharegpt" | "alpaca" | "preference" for one file (a table through its column mapping); UserError
    if it cannot be told."""
    p = Path(path).expanduser()
    if not (p.is_file() or is_dataset_folder(p)):
        raise UserError(f"data file {p} does not exist")
    items: list[tuple[int, Any]] = []
    for item in _raw_items(p, columns):
        items.append(item)
        if len(items) >= _DETECT_RECORDS:
            break
    fmt = _format_of(items)
    if fmt is None:
        raise UserError(f"{p}: {_unknown_format(p, items)[1]}")
    return fmt


# ---------------------------------------------------------------------------------------- normalising


def _missing(record: dict[str, Any], key: str, fmt: str) -> RecordError:
    keys = ", ".join(sorted(map(str, record))[:10]) or "none"
    return RecordError(f"missing key '{key}' (the record has keys {keys}; this file is read as {FORMAT_NAMES[fmt]})")


def _check_assistant(messages: list[dict[str, str]], what: str) -> None:
    if not any(m["role"] == "assistant" for m in messages):
        raise RecordError(f"'{what}' has no assistant message: nothing to train on")
    for k, m in enumerate(messages, 1):
        if m["role"] == "assistant" and not m["content"].strip():
            raise RecordError(f"{what} message {k} (assistant) is empty")


def _optional_str(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RecordError(f"'{key}' must be a string, not {json_kind(value)}")
    return value


def _with_system(record: dict[str, Any], messages: list[dict[str, str]]) -> list[dict[str, str]]:
    system = _optional_str(record, "system")
    if system.strip() and not (messages and messages[0]["role"] == "system"):
        return [{"role": "system", "content": system}, *messages]
    return messages


def _norm_chat(record: dict[str, Any]) -> dict[str, Any]:
    if "messages" not in record:
        raise _missing(record, "messages", "chat")
    messages = _with_system(record, check_messages(record["messages"], "messages"))
    _check_assistant(messages, "messages")
    return {"messages": messages}


def _norm_sharegpt(record: dict[str, Any]) -> dict[str, Any]:
    if "conversations" not in record:
        raise _missing(record, "conversations", "sharegpt")
    messages = check_messages(record["conversations"], "conversations", role_key="from", content_key="value",
                              roles=SHAREGPT_ROLES)
    messages = _with_system(record, messages)
    _check_assistant(messages, "conversations")
    return {"messages": messages}


def _norm_alpaca(record: dict[str, Any]) -> dict[str, Any]:
    for key in ("instruction", "output"):
        if key not in record:
            raise _missing(record, key, "alpaca")
    instruction = _optional_str(record, "instruction")
    extra = _optional_str(record, "input")
    output = record["output"]
    if not isinstance(output, str):
        raise RecordError(f"'output' must be a string, not {json_kind(output)}")
    if not (instruction.strip() or extra.strip()):
        raise RecordError("'instruction' and 'input' are both empty")
    if not output.strip():
        raise RecordError("'output' (the assistant turn) is empty")
    messages: list[dict[str, str]] = []
    history = record.get("history")
    if history is not None:
        if not isinstance(history, list):
            raise RecordError(f"'history' must be a list of [instruction, answer] pairs, not {json_kind(history)}")
        for k, pair in enumerate(history, 1):
            if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                    or not all(isinstance(x, str) for x in pair)):
                raise RecordError(f"'history' item {k} must be a pair of strings [instruction, answer]")
            if not pair[1].strip():
                raise RecordError(f"'history' item {k} has an empty answer (assistant turn)")
            messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    prompt = "\n\n".join(x for x in (instruction, extra) if x.strip())
    messages += [{"role": "user", "content": prompt}, {"role": "assistant", "content": output}]
    return {"messages": _with_system(record, messages)}


def _pref_side(value: Any, key: str, default_role: str) -> list[dict[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise RecordError(f"'{key}' is empty")
        return [{"role": default_role, "content": value}]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise RecordError(f"'{key}' must be a string or a list of messages, not {json_kind(value)}")
    return check_messages(value, key)


def _norm_preference(record: dict[str, Any]) -> dict[str, Any]:
    for key in ("chosen", "rejected"):
        if key not in record:
            raise _missing(record, key, "preference")
    chosen = _pref_side(record["chosen"], "chosen", "assistant")
    rejected = _pref_side(record["rejected"], "rejected", "assistant")
    if record.get("prompt") is None:
        # Implicit prompt: both answers are whole conversations sharing their first messages.
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        if shared == 0:
            raise _missing(record, "prompt", "preference")
        prompt, chosen, rejected = chosen[:shared], chosen[shared:], rejected[shared:]
    else:
        prompt = _pref_side(record["prompt"], "prompt", "user")
        # Answers written as whole conversations that repeat the prompt: keep only what follows it.
        if len(chosen) > len(prompt) and chosen[: len(prompt)] == prompt:
            chosen = chosen[len(prompt):]
        if len(rejected) > len(prompt) and rejected[: len(prompt)] == prompt:
            rejected = rejected[len(prompt):]
    prompt = _with_system(record, prompt)
    for key, side in (("chosen", chosen), ("rejected", rejected)):
        _check_assistant(side, key)
    if chosen == rejected:
        raise RecordError("'chosen' and 'rejected' are identical: nothing to prefer", "dropped")
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected}


_NORMALISERS = {"chat": _norm_chat, "sharegpt": _norm_sharegpt, "alpaca": _norm_alpaca,
                "preference": _norm_preference}


def normalise_record(record: Any, fmt: str | None = None) -> dict[str, Any]:
    """One raw record (any format, or already normalised) → the normalised form; a RecordError (or, for its
    messages, a ChatError) says why not."""
    if isinstance(record, list):
        messages = check_messages(record, "messages")
        _check_assistant(messages, "messages")
        return {"messages": messages}
    if not isinstance(record, dict):
        raise RecordError(f"expected a JSON object, not {json_kind(record)}")
    fmt = fmt or _guess_format(record)
    if fmt is None:
        keys = ", ".join(sorted(map(str, record))[:10]) or "none"
        raise RecordError(f"unknown record format (keys {keys}); expected {FORMAT_HELP}")
    return _NORMALISERS[fmt](record)


@dataclass
class FileRead:
    """One data file read: its format, usable records and per-record verdicts."""

    path: Path
    fmt: str | None
    records: list[dict[str, Any]]
    verdicts: list[RecordVerdict]  # per record, no summary
    total: int  # records seen (readable or not)
    problem: tuple[int, str] | None = None  # the file as a whole is unusable: (line, reason)


def _read_file(path: Path, columns: dict[str, str] | None = None) -> FileRead:
    try:
        items = list(_raw_items(path, columns))
    except UserError as exc:
        if not table_kind(path):
            raise
        return FileRead(path, None, [], [], 0, (0, str(exc)))
    fmt = _format_of(items)
    result = FileRead(path, fmt, [], [], len(items))
    if fmt is None:
        result.problem = _unknown_format(path, items)
    for line, obj in items:
        if isinstance(obj, RecordError):
            result.verdicts.append(RecordVerdict.of(path, line, obj))
        elif not isinstance(obj, dict):
            result.verdicts.append(RecordVerdict(str(path), line, "error",
                                                 f"expected a JSON object, not {json_kind(obj)}"))
        elif fmt is not None:
            try:
                record = _NORMALISERS[fmt](obj)
            except (RecordError, ChatError) as exc:
                result.verdicts.append(RecordVerdict.of(path, line, exc))
            else:
                record["source"] = {"path": str(path), "line": line}
                result.records.append(record)
    if fmt is not None and not result.records:
        result.problem = (0, f"no usable record among {len(items)} ({FORMAT_NAMES[fmt]}; see the lines above)")
    return result


def read_files(paths: str | Path | Iterable[str | Path], columns: dict[str, str] | None = None) -> list[FileRead]:
    """Every data file of `paths` (folders expanded) read and normalised (tables through the column mapping
    `columns`, else the guessed one); UserError for a missing path."""
    return [_read_file(p, columns) for p in expand_data_paths(paths)]


def summary_verdict(f: FileRead, examples: int | None = None) -> RecordVerdict:
    """A file's summary (line 0): how many records were used (`examples` when building them), or its problem."""
    if f.problem is not None:
        return RecordVerdict(str(f.path), 0, "error", f.problem[1])
    counts = Counter(v.status for v in f.verdicts)
    used = examples if examples is not None else len(f.records)
    parts = [f"{FORMAT_NAMES[f.fmt or 'chat']}: {used} of {f.total} records used"]
    parts += [f"{counts[s]} {s}" for s in ("truncated", "dropped", "error") if counts[s]]
    return RecordVerdict(str(f.path), 0, "ok", ", ".join(parts))


def file_verdicts(f: FileRead) -> list[RecordVerdict]:
    """A file's per-record verdicts in line order, its problem's line included."""
    verdicts = sorted(f.verdicts, key=lambda v: v.line)
    if f.problem is not None and f.problem[0] and not any(v.line == f.problem[0] for v in verdicts):
        verdicts.append(RecordVerdict(str(f.path), f.problem[0], "error", f.problem[1]))
        verdicts.sort(key=lambda v: v.line)
    return verdicts


def read_records(paths: str | Path | Iterable[str | Path],
                 columns: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], list[RecordVerdict]]:
    """Normalised records of every file (format detected per file) and the verdicts: one per record that
    cannot be used (with its line) and one summary per file (line 0, status "error" when the file as a
    whole is unusable). Raises UserError only for a path that does not exist or cannot be read."""
    records: list[dict[str, Any]] = []
    verdicts: list[RecordVerdict] = []
    for f in read_files(paths, columns):
        records += f.records
        verdicts += file_verdicts(f)
        verdicts.append(summary_verdict(f))
    return records, verdicts


def refuse_unusable(files: list[FileRead], allowed: tuple[str, ...], method: str) -> None:
    """UserError listing every file unusable as a whole or of a format `method` cannot train on."""
    problems = []
    for f in files:
        if f.problem is not None:
            line = f":{f.problem[0]}" if f.problem[0] else ""
            problems.append(f"{f.path}{line}: {f.problem[1]}")
        elif f.fmt not in allowed:
            if f.fmt == "preference":
                problems.append(f"{f.path} holds preference pairs (prompt/chosen/rejected): use it with DPO; "
                                f"{method} needs chat, ShareGPT or Alpaca records")
            else:
                problems.append(f"{f.path} holds {FORMAT_NAMES[f.fmt or 'chat']} records: {method} needs "
                                "preference pairs (prompt, chosen, rejected)")
    if problems:
        raise UserError("; ".join(problems))
