"""The column mapping: which column of a table (or which key of a JSON record) plays which part.

A mapping is a dict of role -> column name, e.g. {"text": "body"} or {"instruction": "q", "output": "a"}; the
kind of record it makes follows from its roles:
    text         {"text"}                                    pretraining documents
    instruction  {"instruction", "output", "input"?, "system"?}   Alpaca-style instructions (SFT)
    chat         {"messages", "system"?}                     OpenAI messages or ShareGPT conversations (SFT)
    preference   {"prompt", "chosen", "rejected", "system"?} preference pairs (DPO; UltraFeedback-style)
The same dict is DataSpec.columns (saved in the dataset's manifest, and so behind every run.json that trains on it),
the CLI's `--columns instruction=q,output=a` and the window's column panel. `guess_mapping` reads common names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from desktop_app.engine.column_roles import (  # the roles and the mapping's rules, which run configs check too
    COMMON_NAMES,
    REQUIRED,
    ROLES,
    SHAREGPT_ROLES,
    ColumnMapping,
    mapping_from_dict,
)
from desktop_app.engine.data.chat import ChatError, check_messages, json_kind
from desktop_app.engine.errors import UserError


class RowProblem(ValueError):
    """One row that the mapping cannot turn into a document or record; the message says why."""


def guess_mapping(columns: Sequence[str]) -> ColumnMapping | None:
    """The mapping common column names suggest (case-insensitive), or None when nothing fits."""
    lower = {c.lower(): c for c in columns}

    def find(role: str, taken: Iterable[str] = ()) -> str | None:
        return next((lower[n] for n in COMMON_NAMES[role] if n in lower and lower[n] not in taken), None)

    for kind in ("preference", "chat", "instruction", "text"):
        picked: dict[str, str] = {}
        for role in ROLES[kind]:
            col = find(role, picked.values())
            if col is not None:
                picked[role] = col
        if all(r in picked for r in REQUIRED[kind]):
            return ColumnMapping(kind, tuple(picked.items()))
    return None


def mapping_for(columns: Sequence[str], given: dict[str, str] | None) -> ColumnMapping:
    """The mapping to read a table with these columns: `given` (checked against them) or the guess; UserError
    naming the columns when neither works."""
    if given:
        mapping = mapping_from_dict(given)
        missing = [c for c in mapping.columns if c not in columns]
        if missing:
            raise UserError(f"column(s) {', '.join(map(repr, missing))} not found: the file has "
                            f"{', '.join(columns) or 'no columns'}")
        return mapping
    mapping = guess_mapping(columns)
    if mapping is None:
        raise UserError(f"no column to read: the file has {', '.join(columns[:12]) or 'no columns'}; map one "
                        "with text=<column> (or instruction=…,output=… for SFT)")
    return mapping


def _text(row: dict[str, Any], col: str, role: str, *, optional: bool = False) -> str:
    value = row.get(col)
    if value is None or (isinstance(value, float) and value != value):  # null / NaN cell
        if optional:
            return ""
        raise RowProblem(f"'{col}' ({role}) is empty")
    if not isinstance(value, str):
        raise RowProblem(f"'{col}' ({role}) must be text, not {json_kind(value)}")
    return value


def _messages(value: Any, col: str) -> list[dict[str, str]]:
    """OpenAI messages ({"role", "content"}) or ShareGPT turns ({"from", "value"}), as plain messages."""
    try:
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], dict) and "from" in value[0]:
            return check_messages(value, col, role_key="from", content_key="value", roles=SHAREGPT_ROLES)
        return check_messages(value, col)
    except ChatError as exc:
        raise RowProblem(str(exc)) from None


def _side(value: Any, col: str, role: str) -> str | list[dict[str, str]]:
    """A preference side: text, or a conversation (UltraFeedback keeps the prompt in `chosen`/`rejected`)."""
    if isinstance(value, str):
        if not value.strip():
            raise RowProblem(f"'{col}' ({role}) is empty")
        return value
    if value is None:
        raise RowProblem(f"'{col}' ({role}) is empty")
    return _messages(value, col)


def apply_mapping(row: dict[str, Any], mapping: ColumnMapping) -> tuple[str, Any]:
    """(kind, payload) of one row in ingest's shapes: text -> str; instruction -> {"instruction", "input",
    "output"}; chat -> {"messages"}; preference -> {"prompt", "chosen", "rejected"}. RowProblem says why not."""
    f = dict(mapping.fields)
    if mapping.kind == "text":
        return "text", _text(row, f["text"], "text")
    system = _text(row, f["system"], "system", optional=True) if "system" in f else ""
    if mapping.kind == "instruction":
        data = {"instruction": _text(row, f["instruction"], "instruction"),
                "input": _text(row, f["input"], "input", optional=True) if "input" in f else "",
                "output": _text(row, f["output"], "output")}
        if not data["output"].strip():
            raise RowProblem(f"'{f['output']}' (output) is empty")
    elif mapping.kind == "chat":
        data = {"messages": _messages(row.get(f["messages"]), f["messages"])}
        if not any(m["role"] == "assistant" for m in data["messages"]):
            raise RowProblem(f"'{f['messages']}' has no assistant message")
    else:
        data = {role: _side(row.get(f[role]), f[role], role) for role in ("prompt", "chosen", "rejected")}
    if system.strip():
        data["system"] = system
    return mapping.kind, data
