"""The answer inside a chat model's reply: what it wrote around the answer is not the answer.

A chat model answers in prose, in code fences or in `<answer>` tags; a task world reads one clean answer (a
value, a call `f(ARGS)` or a program). `extract_answer(reply, kind)` finds it, in this order:

  1. the last `<answer>...</answer>` block (the chat prompts ask for one; an unclosed last one counts)
  2. values and calls: each line, as written and after a label on it ("Output:", "Answer:", "f(3) =",
     "... is"), markdown stripped, that the bounded literal parser reads (a call: an `f(...)` whose arguments
     it reads): the first when the reply opens with the bare answer or inside an `<answer>` block, else the
     last one (a model that reasons first ends with its answer)
  3. programs: the first fenced code block, else the function from the first `def ` (its indented body), or
     the line from the first `lambda`

Nothing is evaluated here; the world checks what comes out. `None`: no answer could be found (the world
then judges the whole reply, and calls it unparseable).
"""

from __future__ import annotations

import re

from desktop_app.engine.sandbox.literal import LiteralError, LiteralLimits, parse_literal

ANSWER_KINDS = ("value", "call", "program")
LIMITS = LiteralLimits(max_chars=2_000, max_depth=8, max_items=500, max_int_digits=30, max_str_chars=500)
MAX_REPLY_CHARS = 20_000  # a longer reply is cut: its answer is near the start or nowhere

_TAG = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.S | re.I)
_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|\Z)", re.S)
# Labels a reply puts before its answer on the same line: "Output: 4", "The answer is 4", "f(3) = 4", "**4**".
_LABEL = re.compile(r"(?:\b(?:output|answer|result|input|returns?|is|gives|equals)\b\s*[:=]?|[:=])\s*", re.I)


def extract_answer(reply: str, kind: str) -> str | None:
    """The answer of `kind` (value | call | program) in a chat reply, as one clean text; None when there is none."""
    if not isinstance(reply, str) or not reply.strip():
        return None
    block = answer_block(reply)
    tags = block is not None
    text = block if block is not None else reply[:MAX_REPLY_CHARS]
    if kind == "program":
        return _program(text)
    read = _call if kind == "call" else _value
    lines = _candidates(text)
    found = [next((f for f in map(read, line) if f is not None), None) for line in lines]
    hits = [f for f in found if f is not None]
    if not hits:
        return None
    starts_with_it = read(lines[0][0]) is not None  # the reply opens with the bare answer
    return hits[0] if tags or starts_with_it else hits[-1]


def answer_block(reply: str) -> str | None:
    """The text of the reply's last non-empty <answer> block (an unclosed one runs to the end), or None."""
    blocks = [b for b in _TAG.findall(reply[:MAX_REPLY_CHARS]) if b.strip()] if isinstance(reply, str) else []
    return blocks[-1] if blocks else None


def _candidates(text: str) -> list[list[str]]:
    """Per non-empty line (fence markers dropped): the line as written, then the text after each label on it (first
    to last), markdown stripped."""
    out: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip().strip("`").strip()
        if not line or line.startswith("```"):
            continue
        plain = line.replace("**", "").replace("__", "").strip()
        out.append([plain, *(plain[m.end():].strip() for m in _LABEL.finditer(plain) if plain[m.end():].strip())])
    return out


def _value(candidate: str) -> str | None:
    for text in (candidate.rstrip(".").strip(), candidate):  # "4." ends a sentence, it is not 4.0
        if not text:
            continue
        try:
            parse_literal(text, LIMITS)
        except LiteralError:
            continue
        return text
    return None


def _call(candidate: str) -> str | None:
    """The first `f(...)` in the text whose arguments (up to the matching parenthesis) the literal parser reads."""
    start = candidate.find("f(")
    while start >= 0:
        if start == 0 or not (candidate[start - 1].isalnum() or candidate[start - 1] == "_"):
            inner = _balanced(candidate, start + 2)
            if inner is not None:
                try:
                    value = parse_literal(f"({inner},)" if inner.strip() else "()", LIMITS)
                except LiteralError:
                    value = None
                if isinstance(value, tuple):
                    return f"f({inner})"
        start = candidate.find("f(", start + 2)
    return None


def _balanced(text: str, start: int) -> str | None:
    """The text from `start` to the parenthesis that closes the one just before it (quotes respected), or None."""
    depth, quote = 1, ""
    for i in range(start, min(len(text), start + LIMITS.max_chars)):
        ch = text[i]
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _program(text: str) -> str | None:
    fence = _FENCE.search(text)
    if fence and fence.group(1).strip():
        return fence.group(1).strip("\n")
    start = text.find("def ")
    if start >= 0:
        return _function(text[start:])
    for marker in ("f = lambda", "f=lambda", "lambda"):
        start = text.find(marker)
        if start >= 0:
            return text[start:].splitlines()[0].strip()
    return None


def _function(text: str) -> str:
    """A `def` and the lines that belong to it (indented, blank, or more top-level definitions), prose cut off."""
    lines = text.splitlines()
    kept = lines[:1]
    for line in lines[1:]:
        if line.strip() and not line[0].isspace() and not line.startswith(("def ", "import ", "from ", "@", "#")):
            break
        kept.append(line)
    return "\n".join(kept).rstrip() + "\n"
