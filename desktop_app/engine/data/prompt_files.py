"""GRPO's prompt files (stdlib only: the window checks a dropped file without loading torch): JSONL records
{"prompt": ..., "answer": ...}, one per line, "answer" optional. One reader for the method and the window."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError


def json_lines(path: Path, *, encoding: str = "utf-8", errors: str = "strict",
               invalid: str = "not valid JSON") -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSONL file; UserError naming the file and line at the first
    line that is not JSON (`invalid` words it). Shared with the questions of evaluate/qa.py."""
    with open(path, encoding=encoding, errors=errors) as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{path.name} line {number}: {invalid} ({exc.msg})") from None
            yield number, data


def _records(path: Path, limit: int | None = None) -> Iterator[dict[str, str]]:
    """The file's records in order; UserError naming the file and line at the first bad one."""
    if not path.is_file():
        raise UserError(f"prompt file {path} does not exist")
    seen = 0
    with closing(json_lines(path, errors="replace")) as lines:  # closed at once, however the reading ends
        for number, data in lines:
            if not isinstance(data, dict) or not isinstance(data.get("prompt"), str) or not data["prompt"].strip():
                keys = ", ".join(sorted(map(str, data))[:8]) if isinstance(data, dict) else type(data).__name__
                raise UserError(f"{path.name} line {number}: needs a non-empty string field \"prompt\" (found: "
                                f"{keys}); GRPO reads JSONL records {{\"prompt\": ..., \"answer\": ...}}")
            answer = data.get("answer", "")
            yield {"prompt": data["prompt"], "answer": "" if answer is None else str(answer)}
            seen += 1
            if limit is not None and seen >= limit:
                return


def load_prompts(paths: list[str] | str) -> list[dict[str, str]]:
    """Records {prompt, answer} from JSONL files; every bad line is an error naming file and line."""
    records: list[dict[str, str]] = []
    for name in [paths] if isinstance(paths, str) else list(paths):
        records += _records(Path(name))
    if not records:
        raise UserError("no prompts found: give a JSONL file with one {\"prompt\": ...} object per line")
    return records


def describe_prompt_file(path: str | Path, *, look_at: int = 50) -> str:
    """'prompts' or 'prompts with answers' from a file's first records; UserError when it cannot be used."""
    records = list(_records(Path(path), limit=look_at))
    if not records:
        raise UserError(f"{Path(path).name} is empty: no prompts")
    return "prompts with answers" if any(r["answer"] for r in records) else "prompts"
