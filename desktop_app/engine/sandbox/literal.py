"""Bounded literal values: the only way a value crosses the sandbox boundary.

Untrusted programs (and model answers) are represented by *text*. The parent turns text into a value
only through `parse_literal`, which accepts Python literal syntax for a small set of plain types
(int, float, str, bool, None, list, tuple, dict) and refuses anything else, with limits on text
size, nesting depth, element count and integer size. It walks the syntax tree itself: nothing is ever
evaluated, so `0) or (1` or `__import__('os')` are parse errors, never code. Comparisons are done by
`same_value`, which is strict about types (True is not 1, 1 is not 1.0) and never calls a user `__eq__`
(only plain values exist here). `to_literal` is the inverse for plain values.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any

PLAIN_TYPES = (int, float, str, bool, type(None), list, tuple, dict)


class LiteralError(ValueError):
    """Text that is not an acceptable literal (the message says why)."""


@dataclass(frozen=True)
class LiteralLimits:
    max_chars: int = 100_000
    max_depth: int = 20
    max_items: int = 10_000     # elements in all containers together
    max_int_digits: int = 100   # decimal digits of any integer
    max_str_chars: int = 10_000


DEFAULT_LIMITS = LiteralLimits()


def parse_literal(text: str, limits: LiteralLimits = DEFAULT_LIMITS) -> Any:
    """The plain value written in `text`, or LiteralError. Never evaluates anything."""
    if not isinstance(text, str):
        raise LiteralError(f"expected text, got {type(text).__name__}")
    if len(text) > limits.max_chars:
        raise LiteralError(f"value text too long ({len(text)} > {limits.max_chars} characters)")
    stripped = text.strip()
    if not stripped:
        raise LiteralError("empty value")
    # Cheap pre-check: the parser itself recurses on nesting, so refuse deep brackets before parsing.
    depth = best = 0
    for ch in stripped:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth -= 1
    if best > limits.max_depth:
        raise LiteralError(f"value nested too deeply (> {limits.max_depth} levels)")
    try:
        tree = ast.parse(stripped, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise LiteralError(f"not a literal value ({type(exc).__name__})") from None
    counter = [0]
    return _value(tree.body, 0, limits, counter)


def _value(node: ast.AST, depth: int, limits: LiteralLimits, counter: list[int]) -> Any:
    if depth > limits.max_depth:
        raise LiteralError(f"value nested too deeply (> {limits.max_depth} levels)")
    counter[0] += 1
    if counter[0] > limits.max_items:
        raise LiteralError(f"value has too many elements (> {limits.max_items})")
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            return _check_int(value, limits)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise LiteralError("non-finite float")
            return value
        if isinstance(value, str):
            if len(value) > limits.max_str_chars:
                raise LiteralError(f"string too long (> {limits.max_str_chars} characters)")
            return value
        raise LiteralError(f"unsupported constant of type {type(value).__name__}")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant) and type(node.operand.value) in (int, float):
        value = _value(node.operand, depth + 1, limits, counter)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.List):
        return [_value(e, depth + 1, limits, counter) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(e, depth + 1, limits, counter) for e in node.elts)
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=False):
            if k is None:
                raise LiteralError("'**' is not allowed in a literal")
            key = _value(k, depth + 1, limits, counter)
            if isinstance(key, (list, dict)):
                raise LiteralError("dict keys must be hashable plain values")
            if isinstance(key, tuple) and not _hashable(key):
                raise LiteralError("dict keys must be hashable plain values")
            out[key] = _value(v, depth + 1, limits, counter)
        return out
    raise LiteralError(f"{type(node).__name__} is not allowed in a literal value")


def _hashable(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_hashable(v) for v in value)
    return not isinstance(value, (list, dict))


def _check_int(value: int, limits: LiteralLimits) -> int:
    if value.bit_length() > limits.max_int_digits * 3.33:  # ~bits per decimal digit, without str(value)
        raise LiteralError(f"integer too large (> {limits.max_int_digits} digits)")
    return value


def same_value(a: Any, b: Any) -> bool:
    """Strict equality of plain values: types must match exactly (True != 1 != 1.0), NaN never equal."""
    if type(a) is not type(b) or type(a) not in PLAIN_TYPES:
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        for key, value in a.items():
            match = [k for k in b if same_value(k, key)]
            if len(match) != 1 or not same_value(value, b[match[0]]):
                return False
        return True
    if isinstance(a, float):
        return a == b and math.isfinite(a)
    return bool(a == b)


def to_literal(value: Any, limits: LiteralLimits = DEFAULT_LIMITS) -> str:
    """Literal text of a plain value (refuses other types, so what it writes parse_literal reads back)."""
    counter = [0]

    def walk(v: Any, depth: int) -> str:
        counter[0] += 1
        if counter[0] > limits.max_items or depth > limits.max_depth:
            raise LiteralError("value too large or too deeply nested")
        t = type(v)
        if t is bool or v is None:
            return repr(v)
        if t is int:
            return repr(_check_int(v, limits))
        if t is float:
            if not math.isfinite(v):
                raise LiteralError("non-finite float")
            return repr(v)
        if t is str:
            if len(v) > limits.max_str_chars:
                raise LiteralError("string too long")
            return repr(v)
        if t is list:
            return "[" + ", ".join(walk(x, depth + 1) for x in v) + "]"
        if t is tuple:
            inner = ", ".join(walk(x, depth + 1) for x in v)
            return "(" + inner + ("," if len(v) == 1 else "") + ")"
        if t is dict:
            return "{" + ", ".join(f"{walk(k, depth + 1)}: {walk(x, depth + 1)}" for k, x in v.items()) + "}"
        raise LiteralError(f"values of type {t.__name__} cannot leave the sandbox")

    return walk(value, 0)
