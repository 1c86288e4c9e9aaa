"""Fine-tuning data: read chat / ShareGPT / Alpaca / preference files, render them through a chat template
and mark exactly which tokens carry loss.

Files
    JSON Lines (one record per line) or a JSON array (.json); the format is detected per file from its
    first records. Every record that is not plainly usable gets a `RecordVerdict` naming its line (bad
    JSON, missing keys, wrong types, empty assistant turn, over-long → truncated or dropped); every file
    gets one summary verdict (line 0). Nothing is dropped without a verdict. Readers never raise for
    content; the `build_*` functions refuse (UserError) a file that is unusable as a whole (empty, unknown
    format, preference data given to SFT or the reverse) and a data set that leaves nothing to train on.

Normalised records
    SFT formats → {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]};
    preference → {"prompt": [msgs], "chosen": [msgs], "rejected": [msgs]}. Both also carry
    "source": {"path": str, "line": int}.

Chat template and loss mask
    The tokenizer's own `chat_template` when it has one, else a ChatML default (`ensure_chat_tokens` adds
    <|im_start|>/<|im_end|> and sets it). The conversation is rendered once as text and tokenized once
    with offsets (exactly what `apply_chat_template` produces). Where each message's content lies in that
    text is found by rendering once more with invisible markers around every content (checked: the text
    without the markers must equal the plain rendering), or, for templates that change the content (trim
    and the like), by searching for it after the rendered prefix. A token carries loss when it overlaps an
    assistant content span, plus the end-of-turn token right after it (any whitespace tokens between
    included) so the model learns to stop. Role headers, system and user turns and text the template
    injects (a default system prompt) never carry loss. A special token spelled inside a message (e.g. a
    literal "<|im_end|>") is refused: it would end the turn early.
"""

from __future__ import annotations

import codecs
import json
import re
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
DATA_SUFFIXES = (".jsonl", ".json", ".ndjson")
LOSS_ON = ("assistant", "last", "all")  # every assistant turn / only the final one / every token
OVERLONG = ("truncate", "drop")
IGNORE_INDEX = -100
STATUSES = ("ok", "truncated", "dropped", "error")

CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_DETECT_RECORDS = 100  # records looked at to tell a file's format
_CHAT_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                   "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
                   "model": "assistant"}
_TOOL_ROLES = ("tool", "function", "function_call", "observation", "ipython")
# Invisible markers put around each message's content to find where the template renders it.
_OPEN, _MID, _CLOSE = "\ue000", "\ue001", "\ue002"
_MARK_RE = re.compile(f"{_OPEN}(\\d+){_MID}(.*?){_CLOSE}", re.S)
_TEMPLATE_TOKEN_RE = re.compile(r"<\|[A-Za-z0-9_.\-]{1,64}\|>")


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


@dataclass
class SFTExample:
    input_ids: list[int]
    labels: list[int]  # IGNORE_INDEX (-100) where no loss


@dataclass
class PreferenceExample:
    prompt_ids: list[int]
    chosen_ids: list[int]  # completion only
    rejected_ids: list[int]  # completion only


class RecordError(UserError):
    """One record cannot be used ("error") or is left out on purpose ("dropped"); the reason says why."""

    def __init__(self, reason: str, status: str = "error") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


# ---------------------------------------------------------------------------------------------- reading


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _expand_paths(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not items:
        raise UserError("no data file given")
    out: list[Path] = []
    for item in items:
        p = Path(item).expanduser()
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in DATA_SUFFIXES)
            if not found:
                raise UserError(f"{p} holds no {', '.join(DATA_SUFFIXES)} file")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"data file {p} does not exist")
    return out


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


def _raw_items(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, parsed value) per record of a file, or (line, RecordError) where a record cannot be read."""
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
    what = obj.reason if isinstance(obj, RecordError) else f"it is {_kind(obj)}, not a JSON object"
    return line, f"no readable record: the first one (line {line}) cannot be used ({what}); expected {FORMAT_HELP}"


def detect_format(path: str | Path) -> str:
    """"chat" | "sharegpt" | "alpaca" | "preference" for one file; UserError if it cannot be told."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"data file {p} does not exist")
    items: list[tuple[int, Any]] = []
    for item in _raw_items(p):
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


def _content_text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(p, dict) for p in value):  # OpenAI content parts
        texts = []
        for part in value:
            if part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise RecordError(f"{what} has a {part.get('type', 'non-text')!r} part; only text is supported")
        return "".join(texts)
    raise RecordError(f"{what} must be a string, not {_kind(value)}")


def _messages(value: Any, what: str, *, role_key: str = "role", content_key: str = "content",
              roles: dict[str, str] = _CHAT_ROLES) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise RecordError(f"'{what}' must be a list of messages, not {_kind(value)}")
    if not value:
        raise RecordError(f"'{what}' is an empty list")
    out = []
    for k, msg in enumerate(value, 1):
        label = f"{what} message {k}"
        if not isinstance(msg, dict):
            raise RecordError(f"{label} must be an object with '{role_key}' and '{content_key}', not {_kind(msg)}")
        if role_key not in msg:
            raise RecordError(f"{label} has no '{role_key}'")
        role = msg[role_key]
        if not isinstance(role, str) or role.lower() not in roles:
            if isinstance(role, str) and role.lower() in _TOOL_ROLES:
                raise RecordError(f"{label} has role {role!r}: tool messages are not supported")
            raise RecordError(f"{label} has unknown {role_key} {role!r} (use {', '.join(sorted(set(roles)))})")
        role = roles[role.lower()]
        if msg.get(content_key) is None:
            if msg.get("tool_calls"):
                raise RecordError(f"{label} ({role}) is a tool call: tool calls are not supported")
            raise RecordError(f"{label} ({role}) has no '{content_key}'")
        out.append({"role": role, "content": _content_text(msg[content_key], f"{label} ({role}) '{content_key}'")})
    return out


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
        raise RecordError(f"'{key}' must be a string, not {_kind(value)}")
    return value


def _with_system(record: dict[str, Any], messages: list[dict[str, str]]) -> list[dict[str, str]]:
    system = _optional_str(record, "system")
    if system.strip() and not (messages and messages[0]["role"] == "system"):
        return [{"role": "system", "content": system}, *messages]
    return messages


def _norm_chat(record: dict[str, Any]) -> dict[str, Any]:
    if "messages" not in record:
        raise _missing(record, "messages", "chat")
    messages = _with_system(record, _messages(record["messages"], "messages"))
    _check_assistant(messages, "messages")
    return {"messages": messages}


def _norm_sharegpt(record: dict[str, Any]) -> dict[str, Any]:
    if "conversations" not in record:
        raise _missing(record, "conversations", "sharegpt")
    messages = _messages(record["conversations"], "conversations", role_key="from", content_key="value",
                         roles=_SHAREGPT_ROLES)
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
        raise RecordError(f"'output' must be a string, not {_kind(output)}")
    if not (instruction.strip() or extra.strip()):
        raise RecordError("'instruction' and 'input' are both empty")
    if not output.strip():
        raise RecordError("'output' (the assistant turn) is empty")
    messages: list[dict[str, str]] = []
    history = record.get("history")
    if history is not None:
        if not isinstance(history, list):
            raise RecordError(f"'history' must be a list of [instruction, answer] pairs, not {_kind(history)}")
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
        raise RecordError(f"'{key}' must be a string or a list of messages, not {_kind(value)}")
    return _messages(value, key)


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
    """One raw record (any format, or already normalised) → the normalised form; RecordError says why not."""
    if isinstance(record, list):
        messages = _messages(record, "messages")
        _check_assistant(messages, "messages")
        return {"messages": messages}
    if not isinstance(record, dict):
        raise RecordError(f"expected a JSON object, not {_kind(record)}")
    fmt = fmt or _guess_format(record)
    if fmt is None:
        keys = ", ".join(sorted(map(str, record))[:10]) or "none"
        raise RecordError(f"unknown record format (keys {keys}); expected {FORMAT_HELP}")
    return _NORMALISERS[fmt](record)


@dataclass
class _FileRead:
    path: Path
    fmt: str | None
    records: list[dict[str, Any]]
    verdicts: list[RecordVerdict]  # per record, no summary
    total: int  # records seen (readable or not)
    problem: tuple[int, str] | None = None  # the file as a whole is unusable: (line, reason)


def _read_file(path: Path) -> _FileRead:
    items = list(_raw_items(path))
    fmt = _format_of(items)
    result = _FileRead(path, fmt, [], [], len(items))
    if fmt is None:
        result.problem = _unknown_format(path, items)
    for line, obj in items:
        if isinstance(obj, RecordError):
            result.verdicts.append(RecordVerdict(str(path), line, obj.status, obj.reason))
        elif not isinstance(obj, dict):
            result.verdicts.append(RecordVerdict(str(path), line, "error",
                                                 f"expected a JSON object, not {_kind(obj)}"))
        elif fmt is not None:
            try:
                record = _NORMALISERS[fmt](obj)
            except RecordError as exc:
                result.verdicts.append(RecordVerdict(str(path), line, exc.status, exc.reason))
            else:
                record["source"] = {"path": str(path), "line": line}
                result.records.append(record)
    if fmt is not None and not result.records:
        result.problem = (0, f"no usable record among {len(items)} ({FORMAT_NAMES[fmt]}; see the lines above)")
    return result


def _read_files(paths: str | Path | Iterable[str | Path]) -> list[_FileRead]:
    return [_read_file(p) for p in _expand_paths(paths)]


def _summary(f: _FileRead, examples: int | None = None) -> RecordVerdict:
    if f.problem is not None:
        return RecordVerdict(str(f.path), 0, "error", f.problem[1])
    counts = Counter(v.status for v in f.verdicts)
    used = examples if examples is not None else len(f.records)
    parts = [f"{FORMAT_NAMES[f.fmt or 'chat']}: {used} of {f.total} records used"]
    parts += [f"{counts[s]} {s}" for s in ("truncated", "dropped", "error") if counts[s]]
    return RecordVerdict(str(f.path), 0, "ok", ", ".join(parts))


def _file_verdicts(f: _FileRead) -> list[RecordVerdict]:
    verdicts = sorted(f.verdicts, key=lambda v: v.line)
    if f.problem is not None and f.problem[0] and not any(v.line == f.problem[0] for v in verdicts):
        verdicts.append(RecordVerdict(str(f.path), f.problem[0], "error", f.problem[1]))
        verdicts.sort(key=lambda v: v.line)
    return verdicts


def read_records(paths: str | Path | Iterable[str | Path]) -> tuple[list[dict[str, Any]], list[RecordVerdict]]:
    """Normalised records of every file (format detected per file) and the verdicts: one per record that
    cannot be used (with its line) and one summary per file (line 0, status "error" when the file as a
    whole is unusable). Raises UserError only for a path that does not exist or cannot be read."""
    records: list[dict[str, Any]] = []
    verdicts: list[RecordVerdict] = []
    for f in _read_files(paths):
        records += f.records
        verdicts += _file_verdicts(f)
        verdicts.append(_summary(f))
    return records, verdicts


def _refuse_unusable(files: list[_FileRead], allowed: tuple[str, ...], method: str) -> None:
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


# ------------------------------------------------------------------------------------------ tokenizers


def as_hf_tokenizer(obj_or_path: Any) -> Any:
    """A transformers fast tokenizer from one, a `tokenizers.Tokenizer`, a tokenizer.json, or a model /
    run / checkpoint / export folder (the same rules as loading a model)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

    from desktop_app.engine.data.tokenization import hf_tokenizer

    if isinstance(obj_or_path, PreTrainedTokenizerBase):
        tok = obj_or_path
    elif isinstance(obj_or_path, Tokenizer):
        tok = hf_tokenizer(obj_or_path)
    else:
        p = Path(obj_or_path).expanduser()
        if p.is_file():
            tok = hf_tokenizer(p)
        else:
            from desktop_app.engine.model.folders import resolve_model_folder
            from desktop_app.engine.model.loading import load_tokenizer

            tok = load_tokenizer(resolve_model_folder(p)[0])
    if not getattr(tok, "is_fast", False):
        raise UserError("fine-tuning needs a fast (tokenizer.json) tokenizer; this one is a slow Python "
                        "tokenizer: convert it once with transformers' AutoTokenizer and save_pretrained")
    return tok


def _token_id(tokenizer: Any, token: str) -> int | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.token_to_id(token)
    return tokenizer.get_vocab().get(token)


def _own_template(tokenizer: Any) -> str | None:
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        tpl = tpl.get("default") or next(iter(tpl.values()), None)
    return tpl if isinstance(tpl, str) and tpl.strip() else None


def chat_template_of(tokenizer: Any) -> str:
    """The template conversations are rendered with: the tokenizer's own, else the ChatML default (which
    needs <|im_start|>/<|im_end|> in the vocabulary: `ensure_chat_tokens` adds them)."""
    own = _own_template(tokenizer)
    if own is not None:
        return own
    missing = [t for t in CHATML_TOKENS if _token_id(tokenizer, t) is None]
    if missing:
        raise UserError(f"the tokenizer has no chat template and lacks the ChatML tokens {', '.join(missing)}: "
                        "add them first (ensure_chat_tokens), which also resizes the model's embeddings")
    return CHATML_TEMPLATE


def ensure_chat_tokens(tokenizer: Any, model: Any = None) -> list[str]:
    """Make `tokenizer` able to render chats, and `model` able to embed every token. Returns log lines.

    No chat template → the ChatML default is set and <|im_start|>/<|im_end|> are added as special tokens
    where missing. Own template → any <|...|> token it spells out that the vocabulary lacks is added. With
    a model, the embedding matrix (and an untied output layer) grows to the tokenizer's length and every
    new token's row is the mean of the old rows. Call it before wrapping the model (LoRA/QLoRA): with
    frozen embeddings the new rows stay equal to the mean, so train them (modules_to_save or peft's
    trainable_token_indices) when tokens were added.
    """
    from tokenizers import AddedToken

    log: list[str] = []
    own = _own_template(tokenizer)
    if own is None:
        tokenizer.chat_template = CHATML_TEMPLATE
        wanted = list(CHATML_TOKENS)
        log.append("the tokenizer has no chat template: using the ChatML default "
                   "(<|im_start|>role\\n...<|im_end|>)")
    else:
        wanted = list(dict.fromkeys(_TEMPLATE_TOKEN_RE.findall(own)))
    missing = [t for t in wanted if _token_id(tokenizer, t) is None]
    added_ids: list[int] = []
    if missing:
        tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in missing], special_tokens=True)
        added_ids = [int(_token_id(tokenizer, t)) for t in missing]  # type: ignore[arg-type]
        log.append(f"added the chat token{'s' if len(missing) > 1 else ''} "
                   f"{', '.join(f'{t} (id {i})' for t, i in zip(missing, added_ids, strict=True))} to the tokenizer")
    if model is not None:
        log += _grow_embeddings(model, len(tokenizer), added_ids)
    return log


def _grow_embeddings(model: Any, vocab: int, added_ids: list[int]) -> list[str]:
    import torch

    emb = model.get_input_embeddings()
    old_rows = int(emb.weight.shape[0])
    new_ids = sorted(set(added_ids) | set(range(old_rows, vocab)))
    if not new_ids:
        return []
    old_in = emb.weight.detach()[:old_rows]
    out = model.get_output_embeddings()
    old_out = out.weight.detach()[:old_rows].clone() if out is not None else None
    old_bias = (out.bias.detach()[:old_rows].clone()
                if out is not None and getattr(out, "bias", None) is not None else None)
    keep = torch.ones(old_rows, dtype=torch.bool)
    keep[[i for i in new_ids if i < old_rows]] = False
    mean_in = old_in[keep].float().mean(0)
    mean_out = old_out[keep].float().mean(0) if old_out is not None else None
    mean_bias = old_bias[keep].float().mean() if old_bias is not None else None
    if vocab > old_rows:
        model.resize_token_embeddings(vocab, mean_resizing=False)
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == emb.weight.data_ptr()
    with torch.no_grad():
        index = torch.tensor(new_ids, dtype=torch.long, device=emb.weight.device)
        emb.weight[index] = mean_in.to(emb.weight.dtype).to(emb.weight.device)
        if out is not None and not tied and mean_out is not None:
            out.weight[index] = mean_out.to(out.weight.dtype).to(out.weight.device)
            if mean_bias is not None and getattr(out, "bias", None) is not None:
                out.bias[index] = mean_bias.to(out.bias.dtype)
    where = "embeddings" + ("" if out is None or tied else " and output layer")
    grew = f"resized the model's {where} from {old_rows} to {vocab} rows; " if vocab > old_rows else ""
    return [f"{grew}the rows of the {len(new_ids)} new token{'s' if len(new_ids) > 1 else ''} start as the mean "
            f"of the old rows ({where})"]


# ------------------------------------------------------------------------------------------- rendering


@dataclass
class _Rendered:
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    spans: dict[int, tuple[int, int]]  # message index -> char span of its content in text


class _Chat:
    """Renders conversations of one tokenizer (template and special-token sets looked up once)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise UserError("fine-tuning needs a fast tokenizer (one with a tokenizer.json): use as_hf_tokenizer")
        self.tok = tokenizer
        self.template = chat_template_of(tokenizer)
        special = {int(i) for i in tokenizer.all_special_ids}
        turn_end = set(special)
        for tid, added in tokenizer.added_tokens_decoder.items():
            if added.special:
                special.add(int(tid))
            if added.special or not added.content.isspace():
                turn_end.add(int(tid))
        self.special = special  # may not appear inside a message
        self.turn_end = turn_end  # may end an assistant turn

    def text(self, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
        plain = [{"role": m["role"], "content": m["content"]} for m in messages]
        try:
            out = self.tok.apply_chat_template(plain, chat_template=self.template, tokenize=False,
                                               add_generation_prompt=add_generation_prompt)
        except Exception as exc:  # jinja errors, raise_exception() in templates
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise RecordError(f"the chat template refuses this conversation: {first}") from None
        return out if isinstance(out, str) else str(out)

    def _marked_spans(self, messages: list[dict[str, str]], plain: str) -> dict[int, tuple[int, int]] | None:
        if any(ch in m["content"] for m in messages for ch in (_OPEN, _MID, _CLOSE)):
            return None
        marked = [{"role": m["role"], "content": f"{_OPEN}{i}{_MID}{m['content']}{_CLOSE}"}
                  for i, m in enumerate(messages)]
        try:
            text = self.text(marked)
        except RecordError:
            return None
        pieces: list[str] = []
        spans: dict[int, tuple[int, int]] = {}
        pos = last = 0
        for match in _MARK_RE.finditer(text):
            pieces.append(text[last: match.start()])
            pos += match.start() - last
            i, content = int(match.group(1)), match.group(2)
            if i in spans or i >= len(messages):
                return None
            spans[i] = (pos, pos + len(content))
            pieces.append(content)
            pos += len(content)
            last = match.end()
        pieces.append(text[last:])
        stripped = "".join(pieces)
        if stripped != plain or any(ch in stripped for ch in (_OPEN, _MID, _CLOSE)):
            return None
        return spans

    def _searched_spans(self, messages: list[dict[str, str]], plain: str) -> dict[int, tuple[int, int]]:
        """For templates that change the content (trim, ...): find each message in order, an assistant one
        only after the rendered prefix that ends with its generation prompt."""
        spans: dict[int, tuple[int, int]] = {}
        pos = 0
        for i, m in enumerate(messages):
            lo = pos
            if m["role"] == "assistant" and i > 0:
                try:
                    prefix = self.text(messages[:i], add_generation_prompt=True)
                except RecordError:
                    prefix = ""
                if plain.startswith(prefix):
                    lo = max(lo, len(prefix))
            for candidate in (m["content"], m["content"].strip()):
                k = plain.find(candidate, lo) if candidate else -1
                if k >= 0:
                    spans[i] = (k, k + len(candidate))
                    pos = k + len(candidate)
                    break
        return spans

    def render(self, messages: list[dict[str, str]]) -> _Rendered:
        plain = self.text(messages)
        spans = self._marked_spans(messages, plain)
        if spans is None:
            spans = self._searched_spans(messages, plain)
        enc = self.tok(plain, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        ids = [int(t) for t in enc["input_ids"]]
        offsets = [(int(a), int(b)) for a, b in enc["offset_mapping"]]
        for k, tid in enumerate(ids):
            if tid in self.special:
                a, b = offsets[k]
                for i, (s, e) in spans.items():
                    if s <= a and b <= e and a < b:
                        raise RecordError(
                            f"message {i + 1} ({messages[i]['role']}) contains the special token "
                            f"{plain[a:b]!r}, which the chat template uses to mark turns: remove it")
        return _Rendered(plain, ids, offsets, spans)

    def mask(self, r: _Rendered, messages: list[dict[str, str]], targets: Iterable[int]) -> list[bool]:
        """True on the tokens of the target assistant messages and the end-of-turn token after each."""
        n = len(r.ids)
        mask = [False] * n
        starts = [a for a, _ in r.offsets]
        for i in targets:
            if i not in r.spans:
                raise RecordError(f"message {i + 1} ({messages[i]['role']}) does not appear in the text the chat "
                                  "template renders, so it is unclear which tokens to train on")
            s, e = r.spans[i]
            j = bisect_left(starts, s)
            while j > 0 and r.offsets[j - 1][1] > s:
                j -= 1  # a token that began before the content but reaches into it
            while j < n and r.offsets[j][0] < e:
                mask[j] = True
                j += 1
            pending: list[int] = []
            while j < n:
                if r.ids[j] in self.turn_end:
                    for p in (*pending, j):
                        mask[p] = True
                    break
                a, b = r.offsets[j]
                if r.text[a:b].strip():
                    break  # no end-of-turn token: the template ends turns with plain text
                pending.append(j)
                j += 1
        return mask


def _check_choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise UserError(f"{name} must be one of {', '.join(choices)}, not {value!r}")


def _targets(messages: list[dict[str, str]], loss_on: str, first: int = 0) -> list[int]:
    found = [i for i in range(first, len(messages)) if messages[i]["role"] == "assistant"]
    return found[-1:] if loss_on == "last" else found


def _render_masked(chat: _Chat, messages: list[dict[str, str]], loss_on: str) -> tuple[_Rendered, list[bool]]:
    r = chat.render(messages)
    if loss_on == "all":
        return r, [True] * len(r.ids)
    mask = chat.mask(r, messages, _targets(messages, loss_on))
    if not any(mask):
        raise RecordError("no token carries loss: the chat template renders no assistant token to train on")
    return r, mask


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], *, loss_on: str = "assistant",
                ) -> tuple[list[int], list[bool]]:
    """Token ids of a conversation rendered through the chat template, and per token whether it carries
    loss ("assistant": assistant contents + their end-of-turn token; "last": only the final assistant
    turn; "all": every token). UserError (a RecordError) with the reason when it cannot be rendered."""
    _check_choice(loss_on, LOSS_ON, "loss_on")
    normal = _messages(messages, "messages")
    r, mask = _render_masked(_Chat(tokenizer), normal, loss_on)
    return r.ids, mask


def end_of_turn_id(tokenizer: Any) -> int | None:
    """The token the chat template closes an assistant turn with (<|im_end|>, <|eot_id|>, <|end|>, eos...)."""
    try:
        chat = _Chat(tokenizer)
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        r = chat.render(messages)
        mask = chat.mask(r, messages, [1])
    except UserError:
        return None
    last = max((k for k, m in enumerate(mask) if m), default=None)
    return r.ids[last] if last is not None and r.ids[last] in chat.turn_end else None


def stop_token_ids(tokenizer: Any) -> list[int]:
    """Ids generation should stop on for chat: eos and the template's end-of-turn token."""
    ids = [int(tokenizer.eos_token_id)] if getattr(tokenizer, "eos_token_id", None) is not None else []
    turn = end_of_turn_id(tokenizer)
    if turn is not None and turn not in ids:
        ids.append(turn)
    return ids


def preview(tokenizer: Any, record: Any, *, loss_on: str = "assistant") -> list[tuple[str, bool]]:
    """(token text, carries loss) per token of one record (raw in any format, or normalised) rendered
    through the chat template; the texts join to exactly the rendered text. A preference record shows
    prompt + chosen with loss on the chosen answer. UserError with the reason if it cannot be used."""
    _check_choice(loss_on, LOSS_ON, "loss_on")
    chat = _Chat(tokenizer)
    rec = normalise_record(record)
    if "chosen" in rec:
        messages = rec["prompt"] + rec["chosen"]
        r = chat.render(messages)
        mask = ([True] * len(r.ids) if loss_on == "all"
                else chat.mask(r, messages, _targets(messages, loss_on, len(rec["prompt"]))))
    else:
        r, mask = _render_masked(chat, rec["messages"], loss_on)
    pieces: list[tuple[str, bool]] = []
    cursor = 0
    for (_, b), carries in zip(r.offsets, mask, strict=True):
        end = max(b, cursor)
        pieces.append((r.text[cursor:end], carries))
        cursor = end
    if pieces and cursor < len(r.text):
        pieces[-1] = (pieces[-1][0] + r.text[cursor:], pieces[-1][1])
    return pieces


# -------------------------------------------------------------------------------------------- building


def _sft_example(chat: _Chat, messages: list[dict[str, str]], max_len: int, loss_on: str,
                 overlong: str) -> tuple[SFTExample, str | None]:
    r, mask = _render_masked(chat, messages, loss_on)
    ids, n = r.ids, len(r.ids)
    note = None
    if n > max_len:
        if overlong == "drop":
            raise RecordError(f"{n} tokens, longer than max_len {max_len}: dropped", "dropped")
        total = sum(mask)
        ids, mask = ids[:max_len], mask[:max_len]
        kept = sum(mask)
        if not kept:
            raise RecordError(f"{n} tokens, longer than max_len {max_len}: cut to {max_len} tokens no assistant "
                              "token is left to train on, so it is dropped (raise max_len or shorten it)", "dropped")
        note = (f"{n} tokens, longer than max_len {max_len}: truncated to {max_len} "
                f"({kept} of {total} loss-bearing tokens kept)")
    labels = [t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)]
    return SFTExample(input_ids=list(ids), labels=labels), note


def _check_max_len(max_len: int) -> None:
    if not isinstance(max_len, int) or max_len < 2:
        raise UserError(f"max_len must be a whole number of at least 2 tokens, not {max_len!r}")


def _nothing_left(verdicts: list[RecordVerdict], what: str) -> UserError:
    bad = [str(v) for v in verdicts if v.status != "ok"][:5]
    return UserError(f"no usable {what} in the data" + (": " + "; ".join(bad) if bad else ""))


def build_sft_examples(paths: str | Path | Iterable[str | Path], tokenizer: Any, max_len: int, *,
                       loss_on: str = "assistant", overlong: str = "truncate",
                       ) -> tuple[list[SFTExample], list[RecordVerdict]]:
    """SFT examples of chat / ShareGPT / Alpaca files, and the verdicts (records truncated, dropped or in
    error, with lines; one summary per file). UserError for a file unusable as a whole, a preference file,
    or when no example is left."""
    _check_choice(loss_on, LOSS_ON, "loss_on")
    _check_choice(overlong, OVERLONG, "overlong")
    _check_max_len(max_len)
    files = _read_files(paths)
    _refuse_unusable(files, SFT_FORMATS, "SFT")
    chat = _Chat(tokenizer)
    examples: list[SFTExample] = []
    verdicts: list[RecordVerdict] = []
    for f in files:
        used = 0
        for rec in f.records:
            line = rec["source"]["line"]
            try:
                example, note = _sft_example(chat, rec["messages"], max_len, loss_on, overlong)
            except RecordError as exc:
                f.verdicts.append(RecordVerdict(str(f.path), line, exc.status, exc.reason))
                continue
            if note:
                f.verdicts.append(RecordVerdict(str(f.path), line, "truncated", note))
            examples.append(example)
            used += 1
        verdicts += _file_verdicts(f)
        verdicts.append(_summary(f, examples=used))
    if not examples:
        raise _nothing_left(verdicts, "SFT example")
    return examples, verdicts


def _preference_example(chat: _Chat, rec: dict[str, Any], max_len: int,
                        overlong: str) -> tuple[PreferenceExample, str | None]:
    prompt = rec["prompt"]
    parts: list[tuple[list[int], list[int]]] = []
    for key in ("chosen", "rejected"):
        messages = prompt + rec[key]
        r = chat.render(messages)
        mask = chat.mask(r, messages, _targets(messages, "assistant", len(prompt)))
        loss = [k for k, m in enumerate(mask) if m]
        if not loss:
            raise RecordError(f"'{key}': no token carries loss: the chat template renders no assistant token")
        parts.append((r.ids[: loss[0]], r.ids[loss[0]: loss[-1] + 1]))
    (prompt_ids, chosen), (prompt_again, rejected) = parts
    if prompt_ids != prompt_again:
        raise RecordError("the chat template renders the prompt differently before the chosen and the rejected "
                          "answer, so they cannot share one prompt")
    if not prompt_ids:
        raise RecordError("the prompt renders to no token")
    if chosen == rejected:
        raise RecordError("'chosen' and 'rejected' give the same tokens: nothing to prefer", "dropped")
    longest = max(len(chosen), len(rejected))
    total = len(prompt_ids) + longest
    note = None
    if total > max_len:
        head = f"prompt {len(prompt_ids)} + longest answer {longest} = {total} tokens, longer than max_len {max_len}"
        if overlong == "drop":
            raise RecordError(f"{head}: dropped", "dropped")
        keep = len(prompt_ids)
        if keep + longest > max_len:
            keep = min(keep, max(max_len // 2, max_len - longest))
        room = max_len - keep
        cut = []
        if keep < len(prompt_ids):
            cut.append(f"prompt cut from the left to its last {keep} tokens")
            prompt_ids = prompt_ids[len(prompt_ids) - keep:]
        if longest > room:
            cut.append(f"answers cut to {room} tokens")
            chosen, rejected = chosen[:room], rejected[:room]
        if chosen == rejected:
            raise RecordError(f"{head}: once cut to fit, 'chosen' and 'rejected' are the same tokens: dropped",
                              "dropped")
        note = f"{head}: truncated ({', '.join(cut)})"
    return PreferenceExample(prompt_ids=list(prompt_ids), chosen_ids=list(chosen), rejected_ids=list(rejected)), note


def build_preference_examples(paths: str | Path | Iterable[str | Path], tokenizer: Any, max_len: int, *,
                              overlong: str = "truncate",
                              ) -> tuple[list[PreferenceExample], list[RecordVerdict]]:
    """DPO examples (prompt ids, chosen and rejected completion ids) of preference files, and the verdicts.
    prompt + each answer fits max_len: an over-long pair has its prompt cut from the left (down to half of
    max_len) and then its answers cut, or is dropped (overlong="drop"); the verdict says which."""
    _check_choice(overlong, OVERLONG, "overlong")
    _check_max_len(max_len)
    files = _read_files(paths)
    _refuse_unusable(files, ("preference",), "DPO")
    chat = _Chat(tokenizer)
    examples: list[PreferenceExample] = []
    verdicts: list[RecordVerdict] = []
    for f in files:
        used = 0
        for rec in f.records:
            line = rec["source"]["line"]
            try:
                example, note = _preference_example(chat, rec, max_len, overlong)
            except RecordError as exc:
                f.verdicts.append(RecordVerdict(str(f.path), line, exc.status, exc.reason))
                continue
            if note:
                f.verdicts.append(RecordVerdict(str(f.path), line, "truncated", note))
            examples.append(example)
            used += 1
        verdicts += _file_verdicts(f)
        verdicts.append(_summary(f, examples=used))
    if not examples:
        raise _nothing_left(verdicts, "preference pair")
    return examples, verdicts


# --------------------------------------------------------------------------------------------- packing


def pack_examples(examples: Sequence[SFTExample | dict[str, Any]], window: int, pad_id: int, *,
                  pack: bool = True) -> list[dict[str, list[int]]]:
    """Rows of exactly `window` tokens: {"input_ids", "labels", "position_ids"}.

    pack=True puts several examples in one row (best fit, longest first; each row keeps its examples in
    their original order) with position ids restarting at 0 for each example, so a model that reads
    packed sequences from position ids never attends across examples (transformers' llama, mistral,
    qwen2... do so when called with no attention_mask and use_cache=False; with a cache they ignore
    it). The first token of each example gets no label (nothing before it in its own example predicts
    it). pack=False pads each example to its own row. Padding: pad_id, label -100, position ids
    restarting at 0.
    """
    if window < 1:
        raise UserError(f"window must be at least 1 token, not {window}")
    seqs: list[tuple[list[int], list[int]]] = []
    for ex in examples:
        ids = list(ex["input_ids"] if isinstance(ex, dict) else ex.input_ids)
        labels = list(ex["labels"] if isinstance(ex, dict) else ex.labels)
        if len(ids) != len(labels):
            raise ValueError("input_ids and labels differ in length")
        if len(ids) > window:
            raise UserError(f"an example of {len(ids)} tokens does not fit the window of {window}: build the "
                            "examples with max_len no larger than the window")
        if ids:
            seqs.append((ids, labels))
    if not pack:
        rows = [[k] for k in range(len(seqs))]
    else:
        rows = []
        free: list[tuple[int, int]] = []  # (room left, row index), sorted
        for k in sorted(range(len(seqs)), key=lambda k: (-len(seqs[k][0]), k)):
            size = len(seqs[k][0])
            at = bisect_left(free, (size, -1))
            if at < len(free):
                room, row = free.pop(at)
                rows[row].append(k)
            else:
                row, room = len(rows), window
                rows.append([k])
            if room - size > 0:
                insort(free, (room - size, row))
    out = []
    for members in rows:
        input_ids: list[int] = []
        labels: list[int] = []
        positions: list[int] = []
        for k in sorted(members):
            ids, labs = seqs[k]
            input_ids += ids
            labels += [IGNORE_INDEX, *labs[1:]]
            positions += range(len(ids))
        pad = window - len(input_ids)
        input_ids += [pad_id] * pad
        labels += [IGNORE_INDEX] * pad
        positions += range(pad)
        out.append({"input_ids": input_ids, "labels": labels, "position_ids": positions})
    return out
