"""The mini language: a small Python-syntax subset with its own interpreter, safe to run in-process.

A mini program is one line, `f = lambda x: EXPR` (or `lambda x: EXPR` alone, as an induction answer).
EXPR may use integers, True/False/None, list literals, the lambda parameters, `+ - * // %`, unary `-`
and `+`, comparisons (`== != < <= > >= in`, `not in`, chained), `and`/`or`/`not`, `A if C else B`,
indexing and slices, and calls to a few named functions: len, sum, sorted, reversed, min, max, abs,
range, and map/filter with a lambda as their first argument. map, filter, reversed and range return
*lists* in mini (Python returns iterators; `list(...)` around them makes the two agree).

Source text is parsed with `ast.parse` (syntax only) and the tree is turned into a tree of small Python
closures that evaluate it. The builder knows only the whitelisted node types; anything else is refused
at parse time with a `MiniError` naming the node ("Attribute is not allowed in mini programs"), before
anything runs. Nothing is ever passed to `eval`, `exec` or `compile`. Values are plain ints, bools,
None and lists, so no user code (no `__eq__`, no attribute) can run. Every evaluation has budgets: a
step count (one per node, plus the length of every list built, compared or walked), an integer bound,
a list length bound and a bound on the total number of elements in a value, so no program can run long
or grow large.

This module is the language: its syntax rules and the builder from syntax tree to closures, plus `Program`
and `parse_program`. The values and operations those closures run on, with their budgets, are in
`mini_runtime`; random programs (`random_program`, `random_input`) are written by `mini_programs`. Both are
re-exported here, so `mini_lang` stays the one place to import the mini language from.
"""

from __future__ import annotations

import ast
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from desktop_app.engine.tasks.mini_programs import random_input, random_program
from desktop_app.engine.tasks.mini_runtime import (
    BINOPS,
    COMPARE,
    DEFAULT_BUDGET,
    INTS,
    Budget,
    MiniError,
    Run,
    bounded_int,
    call_builtin,
    check_value,
    need_list,
    new_list,
    type_name,
)

__all__ = ["DEFAULT_BUDGET", "FUNCTIONS", "MAX_DEPTH", "MAX_NODES", "MAX_SOURCE_CHARS", "Budget", "MiniError",
           "Program", "check_value", "parse_program", "random_input", "random_program", "run_source", "to_source"]

MAX_SOURCE_CHARS = 1_000
MAX_NODES = 200  # expression nodes in one program
MAX_DEPTH = 40  # expression nesting; keeps the recursive builder and evaluator far from Python's limit

FUNCTIONS = ("len", "sum", "sorted", "reversed", "min", "max", "abs", "range", "map", "filter")
_ARITY = {"len": (1, 1), "sum": (1, 1), "sorted": (1, 1), "reversed": (1, 1), "abs": (1, 1), "min": (1, 9),
          "max": (1, 9), "range": (1, 3), "map": (2, 2), "filter": (2, 2)}

# Anything not handled by `_build` is refused by its node name, with a hint for the common ones.
_HINTS = {"Pow": " (`**`)", "Div": " (`/`; use `//`)", "Attribute": " (`.name`)", "NamedExpr": " (`:=`)",
          "ListComp": " (use map/filter)", "GeneratorExp": " (use map/filter)", "SetComp": "", "DictComp": "",
          "Is": " (`is`; use `==`)", "IsNot": " (`is not`; use `!=`)", "JoinedStr": " (f-strings)",
          "Starred": " (`*args`)", "Tuple": " (use a list)", "Import": "", "ImportFrom": "",
          "FunctionDef": " (write `f = lambda x: ...`)", "BitAnd": " (`&`)", "BitOr": " (`|`)", "BitXor": " (`^`)",
          "LShift": " (`<<`)", "RShift": " (`>>`)", "Invert": " (`~`)", "MatMult": " (`@`)"}


def _refuse(node: ast.AST) -> MiniError:
    name = type(node).__name__
    return MiniError(f"{name}{_HINTS.get(name, '')} is not allowed in mini programs")


# -- building: AST -> closures ---------------------------------------------------------------------------

Eval = Callable[[dict, Run], Any]


class _Shared:
    """What the builder tracks over a whole program: names used, node count, current depth."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.nodes = 0
        self.depth = 0


@dataclass
class _Scope:
    names: frozenset[str]
    shared: _Shared = field(default_factory=_Shared)


def _lambda_param(node: ast.Lambda) -> str:
    a = node.args
    if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults or len(a.args) != 1:
        raise MiniError("a mini lambda takes exactly one plain parameter (`lambda x: ...`)")
    name = a.args[0].arg
    if name.startswith("_") or name in FUNCTIONS:
        raise MiniError(f"parameter name {name!r} is not allowed in mini programs")
    return name


def _build_lambda(node: ast.Lambda, scope: _Scope) -> Callable[[dict, Run], Callable[[Any], Any]]:
    """An inner lambda (first argument of map/filter): evaluates to a one-argument Python callable."""
    param = _lambda_param(node)
    body = _build(node.body, _Scope(scope.names | {param}, scope.shared))

    def make(env: dict, run: Run) -> Callable[[Any], Any]:
        def call(value: Any) -> Any:
            inner = dict(env)
            inner[param] = value
            return body(inner, run)
        return call
    return make


def _build(node: ast.AST, scope: _Scope) -> Eval:
    """The evaluator of one expression node, or MiniError naming what is not allowed."""
    shared = scope.shared
    shared.nodes += 1
    if shared.nodes > MAX_NODES:
        raise MiniError(f"program too large (> {MAX_NODES} expression nodes)")
    shared.depth += 1
    try:
        if shared.depth > MAX_DEPTH:
            raise MiniError(f"program nested too deeply (> {MAX_DEPTH} levels)")
        return _build_node(node, scope)
    finally:
        shared.depth -= 1


def _build_node(node: ast.AST, scope: _Scope) -> Eval:
    """Dispatch on the node's type; a type the table does not know is refused by name."""
    builder = _BUILDERS.get(type(node))
    if builder is None:
        raise _refuse(node)
    return builder(node, scope)


def _build_constant(node: ast.Constant, scope: _Scope) -> Eval:
    value = node.value
    if type(value) not in (int, bool, type(None)):
        kind = {str: "strings", float: "floats", bytes: "bytes", complex: "complex numbers"}.get(
            type(value), f"constants of type {type(value).__name__}")
        raise MiniError(f"{kind} are not allowed in mini programs")
    if type(value) is int and not -DEFAULT_BUDGET.max_int < value < DEFAULT_BUDGET.max_int:
        raise MiniError(f"integer literal out of range (abs value >= {DEFAULT_BUDGET.max_int})")

    def constant(env: dict, run: Run) -> Any:
        run.left -= 1  # run.charge(1) inlined, for speed: leaves are the most frequent nodes
        if run.left < 0:
            run.charge(0)
        return value
    return constant


def _build_name(node: ast.Name, scope: _Scope) -> Eval:
    name = node.id
    if name not in scope.names:
        if name.startswith("_"):
            raise MiniError(f"name {name!r} is not allowed in mini programs")
        if name in FUNCTIONS:
            raise MiniError(f"{name} can only be called, as {name}(...)")
        raise MiniError(f"name {name!r} is not allowed in mini programs (only the lambda parameters)")
    scope.shared.used.add(name)

    def load(env: dict, run: Run) -> Any:
        run.left -= 1
        if run.left < 0:
            run.charge(0)
        return env[name]
    return load


def _build_list(node: ast.List, scope: _Scope) -> Eval:
    elts = [_build(e, scope) for e in node.elts]

    def make_list(env: dict, run: Run) -> list:
        run.charge(1)
        return new_list([e(env, run) for e in elts], run)
    return make_list


def _build_binop(node: ast.BinOp, scope: _Scope) -> Eval:
    if type(node.op) not in BINOPS:
        raise _refuse(node.op)
    op = BINOPS[type(node.op)]
    left, right = _build(node.left, scope), _build(node.right, scope)

    def binop(env: dict, run: Run) -> Any:
        run.left -= 1
        if run.left < 0:
            run.charge(0)
        a = left(env, run)
        return op(a, right(env, run), run)
    return binop


def _build_unary(node: ast.UnaryOp, scope: _Scope) -> Eval:
    if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
        raise _refuse(node.op)
    operand = _build(node.operand, scope)
    kind = type(node.op)

    def unary(env: dict, run: Run) -> Any:
        run.charge(1)
        value = operand(env, run)
        if kind is ast.Not:
            return not value
        if type(value) not in INTS:
            raise MiniError(f"bad operand type for unary {'-' if kind is ast.USub else '+'}: "
                            f"{type_name(value)}")
        return bounded_int(-value if kind is ast.USub else +value, run)
    return unary


def _build_compare(node: ast.Compare, scope: _Scope) -> Eval:
    for op in node.ops:
        if type(op) not in COMPARE:
            raise _refuse(op)
    first = _build(node.left, scope)
    rest = [(COMPARE[type(op)], _build(c, scope)) for op, c in zip(node.ops, node.comparators, strict=True)]

    def compare(env: dict, run: Run) -> bool:
        run.charge(1)
        a = first(env, run)
        for test, right in rest:  # chained: each operand evaluated once, stop at the first False
            b = right(env, run)
            if not test(a, b, run):
                return False
            a = b
        return True
    return compare


def _build_boolop(node: ast.BoolOp, scope: _Scope) -> Eval:
    parts = [_build(v, scope) for v in node.values]
    is_and = isinstance(node.op, ast.And)

    def boolop(env: dict, run: Run) -> Any:
        run.charge(1)
        value = parts[0](env, run)
        for part in parts[1:]:  # Python semantics: returns the deciding operand, short-circuits
            if (not value) if is_and else value:
                return value
            value = part(env, run)
        return value
    return boolop


def _build_ifexp(node: ast.IfExp, scope: _Scope) -> Eval:
    test, body, orelse = _build(node.test, scope), _build(node.body, scope), _build(node.orelse, scope)

    def ifexp(env: dict, run: Run) -> Any:
        run.charge(1)
        return body(env, run) if test(env, run) else orelse(env, run)
    return ifexp


def _refuse_lambda(node: ast.Lambda, scope: _Scope) -> Eval:
    raise MiniError("a lambda is only allowed as the whole program or as the first argument of map/filter")


def _build_subscript(node: ast.Subscript, scope: _Scope) -> Eval:
    target = _build(node.value, scope)
    if isinstance(node.slice, ast.Slice):
        parts = [None if p is None else _build(p, scope) for p in (node.slice.lower, node.slice.upper,
                                                                     node.slice.step)]

        def sliced(env: dict, run: Run) -> list:
            run.charge(1)
            value = target(env, run)
            bounds = [None if p is None else p(env, run) for p in parts]
            items = need_list(value, "slicing")
            if any(b is not None and type(b) not in INTS for b in bounds):
                raise MiniError("slice bounds must be integers or None")
            if bounds[2] is not None and not bounds[2]:
                raise MiniError("slice step cannot be zero")
            result = items[bounds[0]:bounds[1]:bounds[2]]
            run.charge(len(result))
            return result
        return sliced
    index = _build(node.slice, scope)

    def indexed(env: dict, run: Run) -> Any:
        run.charge(1)
        value = target(env, run)
        i = index(env, run)
        items = need_list(value, "indexing")
        if type(i) not in INTS:
            raise MiniError(f"list indices must be integers, not {type_name(i)}")
        if not -len(items) <= i < len(items):
            raise MiniError("list index out of range")
        return items[i]
    return indexed


def _build_call(node: ast.Call, scope: _Scope) -> Eval:
    if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
        what = node.func.id if isinstance(node.func, ast.Name) else type(node.func).__name__
        raise MiniError(f"calling {what!r} is not allowed in mini programs (only {', '.join(FUNCTIONS)})")
    name = node.func.id
    if node.keywords:
        raise MiniError(f"keyword arguments are not allowed in mini programs ({name})")
    low, high = _ARITY[name]
    if not low <= len(node.args) <= high:
        raise MiniError(f"{name}() takes {low if low == high else f'{low} to {high}'} arguments in mini programs")
    args: list[Callable[[dict, Run], Any]] = []
    for i, arg in enumerate(node.args):
        if name in ("map", "filter") and i == 0:
            if not isinstance(arg, ast.Lambda):
                raise MiniError(f"the first argument of {name} must be a lambda")
            args.append(_build_lambda(arg, scope))
        else:
            args.append(_build(arg, scope))

    def call(env: dict, run: Run) -> Any:
        run.charge(1)
        return call_builtin(name, [a(env, run) for a in args], run)
    return call


# the builder of each allowed expression node; `_build_node` refuses every other type by name
_BUILDERS: dict[type, Callable[[Any, _Scope], Eval]] = {
    ast.Constant: _build_constant, ast.Name: _build_name, ast.List: _build_list, ast.BinOp: _build_binop,
    ast.UnaryOp: _build_unary, ast.Compare: _build_compare, ast.BoolOp: _build_boolop, ast.IfExp: _build_ifexp,
    ast.Subscript: _build_subscript, ast.Call: _build_call, ast.Lambda: _refuse_lambda}


# -- programs -------------------------------------------------------------------------------------------


class Program:
    """A parsed mini program. `source` is its canonical text, `f = lambda x: EXPR` (printed on first use:
    checking an answer never needs it, and printing costs more than parsing)."""

    __slots__ = ("_body", "_node", "_source", "param", "uses_param")

    def __init__(self, node: ast.Lambda, param: str, uses_param: bool, body: Eval):
        self._node, self.param, self.uses_param, self._body = node, param, uses_param, body
        self._source: str | None = None

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = "f = " + ast.unparse(self._node)
        return self._source

    @property
    def lambda_source(self) -> str:
        """`lambda x: EXPR`: the program as an induction answer writes it."""
        return self.source.removeprefix("f = ")

    def __repr__(self) -> str:
        return f"Program({self.source!r})"

    def run(self, value: Any, budget: Budget = DEFAULT_BUDGET) -> Any:
        """f(value), or MiniError. The input must be a mini value (int, bool, None, list of those)."""
        run = Run(budget)
        check_value(value, budget)
        try:
            return self._body({self.param: value}, run)
        except MiniError:
            raise
        except RecursionError:  # not reachable with the depth bound; kept as a last line of defence
            raise MiniError("evaluation nested too deeply", budget=True) from None


@functools.lru_cache(maxsize=4096)
def parse_program(src: str) -> Program:
    """The mini program written in `src` (`f = lambda x: EXPR` or `lambda x: EXPR`), or MiniError."""
    if not isinstance(src, str):
        raise MiniError(f"expected program text, got {type(src).__name__}")
    text = src.strip()
    if not text:
        raise MiniError("empty program")
    if len(text) > MAX_SOURCE_CHARS:
        raise MiniError(f"program too long ({len(text)} > {MAX_SOURCE_CHARS} characters)")
    try:
        with warnings.catch_warnings():  # model-written text: Python's warnings on it ("1if") are noise here
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise MiniError(f"not a valid program: {detail}") from None
    for stmt in tree.body:
        if not isinstance(stmt, (ast.Assign, ast.Expr)):
            raise _refuse(stmt)
    if len(tree.body) != 1:
        raise MiniError("a mini program is one line: `f = lambda x: EXPR`")
    stmt = tree.body[0]
    node = stmt.value
    if not isinstance(node, ast.Lambda):
        _build(node, _Scope(frozenset({"x"})))  # names what is not allowed in there, if anything
        raise MiniError("a mini program is `f = lambda x: EXPR`")
    if isinstance(stmt, ast.Assign) and (len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name)
                                         or stmt.targets[0].id != "f"):
        raise MiniError("a mini program assigns its lambda to f: `f = lambda x: EXPR`")
    param = _lambda_param(node)
    scope = _Scope(frozenset({param}))
    body = _build(node.body, scope)
    return Program(node, param, param in scope.shared.used, body)


def run_source(src: str, value: Any, budget: Budget = DEFAULT_BUDGET) -> Any:
    """Parse and run in one go."""
    return parse_program(src).run(value, budget)


def to_source(src: str) -> str:
    """The canonical text of a program (redundant parentheses and spacing normalised)."""
    return parse_program(src).source
