"""The roles of a column mapping (which column of a table, or which key of a JSON record, plays which part) and the
mapping's own rules, stdlib only: run configs check a mapping here (specs.py) before any data is read; reading rows
through one is data/columns.py's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError

KINDS = ("text", "instruction", "chat", "preference")
ROLES: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "instruction": ("instruction", "input", "output", "system"),
    "chat": ("messages", "system"),
    "preference": ("prompt", "chosen", "rejected", "system"),
}
REQUIRED: dict[str, tuple[str, ...]] = {
    "text": ("text",), "instruction": ("instruction", "output"), "chat": ("messages",),
    "preference": ("prompt", "chosen", "rejected"),
}
ALL_ROLES = ("text", "instruction", "input", "output", "messages", "prompt", "chosen", "rejected", "system")
# Common column names per role, most usual first (Alpaca, Dolly, OpenAI messages, ShareGPT, UltraFeedback, ...).
COMMON_NAMES: dict[str, tuple[str, ...]] = {
    "text": ("text", "content", "body", "document", "article", "passage", "story", "raw_content", "markdown"),
    "instruction": ("instruction", "question", "query", "problem", "prompt"),
    "input": ("input", "context"),
    "output": ("output", "response", "answer", "completion", "solution", "target"),
    "messages": ("messages", "conversations", "conversation", "chat", "dialog", "dialogue"),
    "prompt": ("prompt", "question", "instruction", "query"),
    "chosen": ("chosen", "chosen_response", "response_chosen"),
    "rejected": ("rejected", "rejected_response", "response_rejected"),
    "system": ("system", "system_prompt"),
}
# ShareGPT speaker names -> roles (finetune/formats.py reads ShareGPT files with the same table).
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
                  "model": "assistant"}
KIND_WORDS = {"text": "pretraining text", "instruction": "instructions (SFT)", "chat": "chats (SFT)",
              "preference": "preference pairs (DPO)"}


@dataclass(frozen=True)
class ColumnMapping:
    """Roles -> column names, and the kind of record they make."""

    kind: str
    fields: tuple[tuple[str, str], ...]  # (role, column), in ROLES order

    @property
    def columns(self) -> list[str]:
        """The columns the mapping reads (what a table reader needs to load)."""
        return list(dict.fromkeys(col for _, col in self.fields))

    def to_dict(self) -> dict[str, str]:
        return dict(self.fields)

    def describe(self) -> str:
        """One line a person reads: "instructions (SFT): instruction ← q, output ← a"."""
        return f"{KIND_WORDS[self.kind]}: " + ", ".join(f"{role} ← {col}" for role, col in self.fields)


def mapping_from_dict(given: dict[str, str]) -> ColumnMapping:
    """A mapping from role -> column; UserError (one sentence saying what to do) when the roles do not fit."""
    if not isinstance(given, dict) or not given:
        raise UserError("the column mapping is empty: give at least text=<column>")
    unknown = [r for r in given if r not in ALL_ROLES]
    if unknown:
        raise UserError(f"unknown role(s) {', '.join(map(repr, unknown))} in the column mapping: use "
                        f"{', '.join(ALL_ROLES)}")
    for role, col in given.items():
        if not isinstance(col, str) or not col:
            raise UserError(f"role '{role}' needs a column name, got {col!r}")
    roles = set(given)
    for kind in ("preference", "chat", "instruction", "text"):
        if set(REQUIRED[kind]) <= roles:
            extra = roles - set(ROLES[kind])
            if extra:
                raise UserError(f"role(s) {', '.join(sorted(extra))} do not go with {KIND_WORDS[kind]}: map only "
                                f"{', '.join(ROLES[kind])}")
            return ColumnMapping(kind, tuple((r, given[r]) for r in ROLES[kind] if r in given))
    wants = "; ".join(f"{KIND_WORDS[k]}: {', '.join(REQUIRED[k])}" for k in KINDS)
    raise UserError(f"the column mapping {format_columns(given)} is incomplete: map {wants}")


def parse_columns(text: str) -> dict[str, str]:
    """'instruction=q,output=a' -> {"instruction": "q", "output": "a"} (checked); UserError for a bad spelling."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        role, sep, col = part.partition("=")
        if not sep or not role.strip() or not col.strip():
            raise UserError(f"--columns: '{part}' is not role=column (e.g. text=body or instruction=q,output=a)")
        out[role.strip()] = col.strip()
    mapping_from_dict(out)
    return out


def format_columns(mapping: dict[str, str]) -> str:
    """The CLI spelling of a mapping: {"text": "body"} -> 'text=body'."""
    return ",".join(f"{role}={col}" for role, col in mapping.items())


def columns_problems(columns: Any) -> list[str]:
    """What is wrong with a run config's column mapping (none when it has none)."""
    if columns in ({}, None):
        return []
    if not isinstance(columns, dict):
        return [f"columns must be a JSON object of role -> column, got {columns!r}"]
    try:
        mapping_from_dict(columns)
    except UserError as exc:
        return [f"columns: {exc}"]
    return []
