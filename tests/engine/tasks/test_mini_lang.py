"""The mini language: agrees with CPython, refuses everything off its whitelist by name, stays in budget."""

from __future__ import annotations

import ast
import builtins
import collections
import contextlib
import random
import time

import pytest

from desktop_app.engine.sandbox.literal import same_value
from desktop_app.engine.tasks.mini_lang import (
    FUNCTIONS,
    Budget,
    MiniError,
    parse_program,
    random_input,
    random_program,
    run_source,
    to_source,
)


class _ListWrap(ast.NodeTransformer):
    """CPython's map/filter/reversed/range give iterators; mini gives lists. list(...) makes them agree."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in {"map", "filter", "reversed", "range"}:
            return ast.Call(ast.Name("list", ast.Load()), [node], [])
        return node


_PY_BUILTINS = {name: getattr(builtins, name) for name in (*FUNCTIONS, "list")}


def _cpython(source: str):
    """The CPython function for trusted, generator-made program text (tests only)."""
    tree = ast.fix_missing_locations(_ListWrap().visit(ast.parse(source)))
    namespace: dict = {"__builtins__": _PY_BUILTINS}
    exec(compile(tree, "<generated>", "exec"), namespace)
    return namespace["f"]


def test_interpreter_agrees_with_cpython_on_thousands_of_generated_programs() -> None:
    rng = random.Random(20240611)
    stats: collections.Counter[str] = collections.Counter()
    for n in range(3000):
        kind = rng.choice(["int", "list"])
        program = parse_program(random_program(rng, kind, depth=rng.randint(1, 4), wide=n % 2 == 0))
        reference = _cpython(program.source)  # the canonical text: checks the printer keeps the meaning too
        for _ in range(2):
            value = random_input(rng, kind)
            try:
                got, error = program.run(value), None
            except MiniError as exc:
                got, error = None, exc
            if error is not None and error.budget:
                stats["budget"] += 1  # mini stopped early on purpose; CPython would go on
                continue
            try:
                expected, py_error = reference(value), None
            except Exception as exc:  # any CPython error: mini must fail too
                expected, py_error = None, exc
            if error is None:
                assert py_error is None, (program.source, value, py_error)
                assert same_value(got, expected), (program.source, value, got, expected)
                stats["same value"] += 1
            else:
                assert py_error is not None, (program.source, value, error, expected)
                stats["both fail"] += 1
    assert stats["same value"] >= 4000 and stats["both fail"] >= 200, stats


@pytest.mark.parametrize("source, reason", [
    ("f = lambda x: x.__class__", "Attribute"),
    ("f = lambda x: ().__class__", "Attribute"),
    ("f = lambda x: x.bit_length()", "Attribute"),
    ("__import__('os')", "calling '__import__' is not allowed"),
    ("f = lambda x: __import__('os').system('true')", "Attribute"),  # the outermost offence is named
    ("f = lambda x: [y for y in x]", "ListComp"),
    ("f = lambda x: sum(y for y in x)", "GeneratorExp"),
    ("f = lambda x: {y: 1 for y in x}", "DictComp"),
    ("f = lambda x: x ** 2", "Pow"),
    ("f = lambda x: x / 2", "Div"),
    ("f = lambda x: x << 2", "LShift"),
    ("f = lambda x: ~x", "Invert"),
    ("import os", "Import is not allowed"),
    ("from os import system", "ImportFrom is not allowed"),
    ("f = lambda x: 'abc'", "strings are not allowed"),
    ("f = lambda x: 1.5", "floats are not allowed"),
    ("def f(x):\n    return x", "FunctionDef"),
    ("f = lambda x: (y := x)", "NamedExpr"),
    ("f = lambda x: y", "name 'y' is not allowed"),
    ("f = lambda x: open", "name 'open' is not allowed"),
    ("f = lambda x: print(x)", "calling 'print' is not allowed"),
    ("f = lambda x: eval('1')", "calling 'eval' is not allowed"),
    ("f = lambda x: eval(x)", "calling 'eval' is not allowed"),
    ("f = lambda x: len", "len can only be called"),
    ("f = lambda x: sorted(x, reverse=True)", "keyword arguments"),
    ("f = lambda x: len(*x)", "Starred"),
    ("f = lambda x: (1, 2)", "Tuple"),
    ("f = lambda x: {1: 2}", "Dict"),
    ("f = lambda x: {1}", "Set"),
    ("f = lambda x: x is None", "Is"),
    ("f = lambda x: f(x)", "calling 'f' is not allowed"),  # no recursion
    ("f = lambda x: (lambda y: y)(x)", "calling 'Lambda'"),
    ("f = lambda x: map(len, x)", "first argument of map must be a lambda"),
    ("f = lambda x, y: x", "exactly one plain parameter"),
    ("f = lambda *x: x", "exactly one plain parameter"),
    ("f = lambda __x: __x", "'__x' is not allowed"),
    ("f = lambda len: len", "'len' is not allowed"),
    ("g = lambda x: x", "assigns its lambda to f"),
    ("f = lambda x: x\ng = lambda x: x", "one line"),
    ("f = lambda x: x; import os", "Import"),
    ("x + 1", "f = lambda x: EXPR"),
    ("f = lambda x: len(x, x)", "len() takes 1 arguments"),
    ("f = lambda x: x[1, 2]", "Tuple"),
    ("f = lambda x: 10000000000000", "integer literal out of range"),
    ("0) or (1", "not a valid program"),
    ("", "empty program"),
    ("f = lambda x: " + "x + " * 400 + "x", "too long"),
])
def test_refuses_what_is_not_on_the_whitelist_with_a_clear_reason(source: str, reason: str) -> None:
    with pytest.raises(MiniError) as info:
        parse_program(source)
    assert reason in str(info.value)
    assert not info.value.budget


def test_semantics_of_the_named_functions_and_operators() -> None:
    cases = [
        ("f = lambda x: map(lambda y: y * 2, x)", [1, 2], [2, 4]),
        ("f = lambda x: filter(lambda y: y % 2, x)", [1, 2, 3], [1, 3]),
        ("f = lambda x: reversed(x)", [1, 2, 3], [3, 2, 1]),
        ("f = lambda x: range(x)", 3, [0, 1, 2]),
        ("f = lambda x: range(1, 10, x)", 4, [1, 5, 9]),
        ("f = lambda x: sorted(x)[::-1][1:]", [3, 1, 2], [2, 1]),
        ("f = lambda x: [min(x), max(x), sum(x), len(x), abs(-x[1])]", [4, -2], [-2, 4, 2, 2, 2]),
        ("f = lambda x: map(lambda y: map(lambda z: y * z, x), x)", [1, 2], [[1, 2], [2, 4]]),
        ("f = lambda x: -7 // x", 2, -4),
        ("f = lambda x: -7 % x", 3, 2),
        ("f = lambda x: 1 < x <= 3", 3, True),
        ("f = lambda x: x and 5 or 7", 0, 7),
        ("f = lambda x: (x > 0) + (x > 1)", 5, 2),
        ("f = lambda x: 3 in x", [1, 3], True),
        ("f = lambda x: [None] * x", 2, [None, None]),
        ("lambda x: x + 1", 1, 2),
        ("f = lambda xs: sum(xs)", [1, 2], 3),
    ]
    for source, value, expected in cases:
        got = run_source(source, value)
        assert same_value(got, expected), (source, got)


@pytest.mark.parametrize("source, value, reason", [
    ("f = lambda x: 10 // x", 0, "division by zero"),
    ("f = lambda x: 10 % x", 0, "division by zero"),
    ("f = lambda x: x[5]", [1], "index out of range"),
    ("f = lambda x: min(x)", [], "empty"),
    ("f = lambda x: x + 1", [1], "unsupported operand"),
    ("f = lambda x: len(x)", 3, "no len"),
    ("f = lambda x: x < [1]", 1, "'<' not supported"),
    ("f = lambda x: x[::0]", [1], "step cannot be zero"),
    ("f = lambda x: sorted(x)", [1, [2]], "cannot order"),
    ("f = lambda x: x", "abc", "mini values are"),
    ("f = lambda x: x", (1, 2), "mini values are"),
    ("f = lambda x: x", 1.5, "mini values are"),
])
def test_runtime_errors_are_mini_errors(source: str, value, reason: str) -> None:
    with pytest.raises(MiniError) as info:
        run_source(source, value)
    assert reason in str(info.value) and not info.value.budget


@pytest.mark.parametrize("source, value", [
    ("f = lambda x: map(lambda y: map(lambda z: map(lambda w: sum(range(999)), range(999)), range(999)), "
     "range(999))", 0),  # ~10^12 steps of work if unbounded
    ("f = lambda x: map(lambda y: x, x)", list(range(999))),  # a 10^6-element value
    ("f = lambda x: sorted(map(lambda y: x, range(999)))", list(range(999))),
    ("f = lambda x: [x] * 999 * 999", 1),
    ("f = lambda x: x * 999999", [1, 2]),
    ("f = lambda x: range(999999999)", 0),
    ("f = lambda x: x * x * x * x * x * x * x * x", 99999),  # huge int
    ("f = lambda x: sum(map(lambda y: 999999999999 - 1, range(50)))", 0),
    ("f = lambda x: (((x + x) + (x + x)) + ((x + x) + (x + x))) * 999", list(range(100))),
])
def test_budgets_stop_runaway_programs_quickly(source: str, value) -> None:
    start = time.perf_counter()
    with pytest.raises(MiniError) as info:
        run_source(source, value)
    assert info.value.budget
    assert time.perf_counter() - start < 0.5


def test_a_smaller_budget_applies_per_run() -> None:
    program = parse_program("f = lambda x: sum(map(lambda y: y, range(x)))")
    assert program.run(100) == 4950
    with pytest.raises(MiniError, match="step budget"):
        program.run(100, Budget(steps=50))


@pytest.mark.parametrize("source", [
    "f = lambda x: " + "-" * 900 + "x",
    "f = lambda x: " + "[" * 150 + "]" * 150,
    "f = lambda x: " + "(" * 400 + "x" + ")" * 400,
    "f = lambda x: " + "abs(" * 80 + "x" + ")" * 80,
    "f = lambda x: " + " + ".join(["x"] * 240),
])
def test_deep_or_large_programs_are_refused_at_parse_time(source: str) -> None:
    start = time.perf_counter()
    with pytest.raises(MiniError):
        parse_program(source)
    assert time.perf_counter() - start < 0.5


def test_canonical_text_and_induction_form() -> None:
    assert to_source("f=lambda   x :((x+1))*2") == "f = lambda x: (x + 1) * 2"
    program = parse_program("lambda x: sorted(x)[ :2]")
    assert program.source == "f = lambda x: sorted(x)[:2]" and program.lambda_source == "lambda x: sorted(x)[:2]"
    assert parse_program(program.source).source == program.source
    assert not parse_program("f = lambda x: 3").uses_param
    assert parse_program("f = lambda x: map(lambda y: x, [1])").uses_param


def test_nothing_is_compiled_to_code_or_evaluated(monkeypatch: pytest.MonkeyPatch) -> None:
    real_compile = builtins.compile

    def ast_only_compile(source, filename, mode, flags=0, *args, **kwargs):
        assert flags & ast.PyCF_ONLY_AST, "mini compiled something to a code object"
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("mini called eval/exec")

    monkeypatch.setattr(builtins, "compile", ast_only_compile)
    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    rng = random.Random(3)
    for _ in range(200):
        kind = rng.choice(["int", "list"])
        source = random_program(rng, kind, depth=3, wide=True) + " " * rng.randint(1, 9)  # fresh cache keys
        with contextlib.suppress(MiniError):
            parse_program(source).run(random_input(rng, kind))


def test_model_written_text_parses_without_python_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "1if" makes Python warn (invalid decimal literal): not the user's concern
        assert run_source("f = lambda x: 1if x else 2", [1]) == 1
