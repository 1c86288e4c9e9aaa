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

`random_program` writes random valid programs (seed corpora, held-out sets, tests).
"""

from __future__ import annotations

import ast
import functools
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_SOURCE_CHARS = 1_000
MAX_NODES = 200  # expression nodes in one program
MAX_DEPTH = 40  # expression nesting; keeps the recursive builder and evaluator far from Python's limit


class MiniError(ValueError):
    """A program that is not mini, or a run that failed. `budget` is True when a limit stopped it."""

    def __init__(self, message: str, budget: bool = False):
        super().__init__(message)
        self.budget = budget


@dataclass(frozen=True)
class Budget:
    """Limits of one evaluation."""

    steps: int = 10_000  # node evaluations, plus list elements built, compared or walked
    max_int: int = 10**12  # every integer result must have abs value below this
    max_list: int = 1_000  # length of any list
    max_items: int = 10_000  # elements of a value, nested lists counted all the way down


DEFAULT_BUDGET = Budget()
FUNCTIONS = ("len", "sum", "sorted", "reversed", "min", "max", "abs", "range", "map", "filter")
_ARITY = {"len": (1, 1), "sum": (1, 1), "sorted": (1, 1), "reversed": (1, 1), "abs": (1, 1), "min": (1, 9),
          "max": (1, 9), "range": (1, 3), "map": (2, 2), "filter": (2, 2)}
_INTS = (int, bool)

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


def _type_name(value: Any) -> str:
    return "NoneType" if value is None else type(value).__name__


# -- runtime helpers ---------------------------------------------------------------------------------------


class _Run:
    """The mutable state of one evaluation: steps left and the limits."""

    __slots__ = ("left", "max_int", "max_items", "max_list")

    def __init__(self, budget: Budget):
        self.left = budget.steps
        self.max_int, self.max_list, self.max_items = budget.max_int, budget.max_list, budget.max_items

    def charge(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise MiniError("step budget exhausted", budget=True)


def _weight(value: Any, cap: int = 1 << 62) -> int:
    """Elements in a value, nested lists counted all the way down (a scalar weighs 1). Stops counting
    once past `cap`: callers only need to know that a value is too large, not by how much."""
    if type(value) is not list:
        return 1
    n = 1
    for item in value:
        n += _weight(item, cap - n) if type(item) is list else 1
        if n > cap:
            break
    return n


def _int(value: int, run: _Run) -> int:
    if -run.max_int < value < run.max_int:
        return value
    raise MiniError(f"integer out of range (abs value >= {run.max_int})", budget=True)


def _new_list(items: list, run: _Run) -> list:
    """Admit a freshly built list: length and total-size bounds, and its size charged as steps."""
    if len(items) > run.max_list:
        raise MiniError(f"list too long (> {run.max_list} elements)", budget=True)
    weight = _weight(items, min(run.max_items, run.left))
    run.charge(weight)
    if weight > run.max_items:
        raise MiniError(f"value too large (> {run.max_items} elements)", budget=True)
    return items


def _need_list(value: Any, what: str) -> list:
    if type(value) is not list:
        raise MiniError(f"{what} needs a list, not {_type_name(value)}")
    return value


def _add(a: Any, b: Any, run: _Run) -> Any:
    if type(a) in _INTS and type(b) in _INTS:
        return _int(a + b, run)
    if type(a) is list and type(b) is list:
        return _new_list(a + b, run)
    raise MiniError(f"unsupported operand types for +: {_type_name(a)} and {_type_name(b)}")


def _sub(a: Any, b: Any, run: _Run) -> Any:
    if type(a) in _INTS and type(b) in _INTS:
        return _int(a - b, run)
    raise MiniError(f"unsupported operand types for -: {_type_name(a)} and {_type_name(b)}")


def _mul(a: Any, b: Any, run: _Run) -> Any:
    if type(a) in _INTS and type(b) in _INTS:
        return _int(a * b, run)
    if type(a) is list and type(b) in _INTS:
        a, b = b, a
    if type(b) is list and type(a) in _INTS:
        times = max(0, int(a))
        # check before building: `[0] * 10**11` must never be allocated
        if len(b) * times > run.max_list:
            raise MiniError(f"list too long (> {run.max_list} elements)", budget=True)
        if (_weight(b, run.max_items) - 1) * times + 1 > run.max_items:
            raise MiniError(f"value too large (> {run.max_items} elements)", budget=True)
        return _new_list(b * times, run)
    raise MiniError(f"unsupported operand types for *: {_type_name(a)} and {_type_name(b)}")


def _floordiv(a: Any, b: Any, run: _Run) -> Any:
    if type(a) in _INTS and type(b) in _INTS:
        if not b:
            raise MiniError("division by zero")
        return _int(a // b, run)
    raise MiniError(f"unsupported operand types for //: {_type_name(a)} and {_type_name(b)}")


def _mod(a: Any, b: Any, run: _Run) -> Any:
    if type(a) in _INTS and type(b) in _INTS:
        if not b:
            raise MiniError("division by zero")
        return _int(a % b, run)
    raise MiniError(f"unsupported operand types for %: {_type_name(a)} and {_type_name(b)}")


_BINOPS: dict[type, Callable[[Any, Any, _Run], Any]] = {
    ast.Add: _add, ast.Sub: _sub, ast.Mult: _mul, ast.FloorDiv: _floordiv, ast.Mod: _mod}


def _compare_cost(a: Any, b: Any, run: _Run) -> None:
    if type(a) is list or type(b) is list:
        run.charge(_weight(a, run.left) + _weight(b, run.left))


def _ordered(symbol: str, test: Callable[[Any, Any], bool]) -> Callable[[Any, Any, _Run], bool]:
    def compare(a: Any, b: Any, run: _Run) -> bool:
        _compare_cost(a, b, run)
        try:
            return test(a, b)
        except TypeError:  # e.g. 1 < [1] or None < 0: plain values only, so no user code ran
            raise MiniError(f"'{symbol}' not supported between {_type_name(a)} and {_type_name(b)}") from None
    return compare


def _eq(a: Any, b: Any, run: _Run) -> bool:
    _compare_cost(a, b, run)
    return a == b


def _ne(a: Any, b: Any, run: _Run) -> bool:
    _compare_cost(a, b, run)
    return a != b


def _in(a: Any, b: Any, run: _Run) -> bool:
    _need_list(b, "'in'")
    run.charge(_weight(b, run.left) + _weight(a, run.left))
    return a in b


def _not_in(a: Any, b: Any, run: _Run) -> bool:
    return not _in(a, b, run)


_COMPARE: dict[type, Callable[[Any, Any, _Run], bool]] = {
    ast.Eq: _eq, ast.NotEq: _ne, ast.In: _in, ast.NotIn: _not_in,
    ast.Lt: _ordered("<", lambda a, b: a < b), ast.LtE: _ordered("<=", lambda a, b: a <= b),
    ast.Gt: _ordered(">", lambda a, b: a > b), ast.GtE: _ordered(">=", lambda a, b: a >= b)}


def _call_builtin(name: str, args: list, run: _Run) -> Any:
    """One call of a named function; arguments are values (map/filter get a Python callable first)."""
    if name == "len":
        value = args[0]
        if type(value) is not list:
            raise MiniError(f"object of type {_type_name(value)} has no len()")
        return len(value)
    if name == "abs":
        if type(args[0]) not in _INTS:
            raise MiniError(f"bad operand type for abs(): {_type_name(args[0])}")
        return _int(abs(args[0]), run)
    if name in ("map", "filter"):
        fn, items = args[0], _need_list(args[1], f"{name}()")
        run.charge(len(items))
        if name == "map":
            return _new_list([fn(item) for item in items], run)
        return [item for item in items if fn(item)]
    if name == "range":
        if any(type(a) not in _INTS for a in args):
            raise MiniError("range() needs integers")
        if len(args) == 3 and not args[2]:
            raise MiniError("range() step must not be zero")
        span = range(*args)  # lazy: its length is known before anything is built
        if len(span) > run.max_list:
            raise MiniError(f"list too long (> {run.max_list} elements)", budget=True)
        return _new_list(list(span), run)
    if name in ("min", "max") and len(args) > 1:
        items = args
    else:
        items = _need_list(args[0], f"{name}()")
    run.charge(_weight(items, run.left))
    if name == "sum":
        if any(type(v) not in _INTS for v in items):
            raise MiniError("sum() needs a list of integers")
        total = 0
        for v in items:  # bound every partial sum, like every other integer result
            total = _int(total + v, run)
        return total
    if name == "reversed":
        return items[::-1]
    try:
        if name == "sorted":
            return sorted(items)
        if not items:
            raise MiniError(f"{name}() of an empty list")
        return min(items) if name == "min" else max(items)
    except TypeError:
        raise MiniError(f"{name}() cannot order these values") from None


# -- building: AST -> closures ---------------------------------------------------------------------------

Eval = Callable[[dict, _Run], Any]


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


def _build_lambda(node: ast.Lambda, scope: _Scope) -> Callable[[dict, _Run], Callable[[Any], Any]]:
    """An inner lambda (first argument of map/filter): evaluates to a one-argument Python callable."""
    param = _lambda_param(node)
    body = _build(node.body, _Scope(scope.names | {param}, scope.shared))

    def make(env: dict, run: _Run) -> Callable[[Any], Any]:
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
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) not in (int, bool, type(None)):
            kind = {str: "strings", float: "floats", bytes: "bytes", complex: "complex numbers"}.get(
                type(value), f"constants of type {type(value).__name__}")
            raise MiniError(f"{kind} are not allowed in mini programs")
        if type(value) is int and not -DEFAULT_BUDGET.max_int < value < DEFAULT_BUDGET.max_int:
            raise MiniError(f"integer literal out of range (abs value >= {DEFAULT_BUDGET.max_int})")

        def constant(env: dict, run: _Run) -> Any:
            run.left -= 1
            if run.left < 0:
                run.charge(0)
            return value
        return constant
    if isinstance(node, ast.Name):
        name = node.id
        if name not in scope.names:
            if name.startswith("_"):
                raise MiniError(f"name {name!r} is not allowed in mini programs")
            if name in FUNCTIONS:
                raise MiniError(f"{name} can only be called, as {name}(...)")
            raise MiniError(f"name {name!r} is not allowed in mini programs (only the lambda parameters)")
        scope.shared.used.add(name)

        def load(env: dict, run: _Run) -> Any:
            run.left -= 1
            if run.left < 0:
                run.charge(0)
            return env[name]
        return load
    if isinstance(node, ast.List):
        elts = [_build(e, scope) for e in node.elts]

        def make_list(env: dict, run: _Run) -> list:
            run.charge(1)
            return _new_list([e(env, run) for e in elts], run)
        return make_list
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise _refuse(node.op)
        op = _BINOPS[type(node.op)]
        left, right = _build(node.left, scope), _build(node.right, scope)

        def binop(env: dict, run: _Run) -> Any:
            run.left -= 1
            if run.left < 0:
                run.charge(0)
            a = left(env, run)
            return op(a, right(env, run), run)
        return binop
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise _refuse(node.op)
        operand = _build(node.operand, scope)
        kind = type(node.op)

        def unary(env: dict, run: _Run) -> Any:
            run.charge(1)
            value = operand(env, run)
            if kind is ast.Not:
                return not value
            if type(value) not in _INTS:
                raise MiniError(f"bad operand type for unary {'-' if kind is ast.USub else '+'}: "
                                f"{_type_name(value)}")
            return _int(-value if kind is ast.USub else +value, run)
        return unary
    if isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise _refuse(op)
        first = _build(node.left, scope)
        rest = [(_COMPARE[type(op)], _build(c, scope)) for op, c in zip(node.ops, node.comparators, strict=True)]

        def compare(env: dict, run: _Run) -> bool:
            run.charge(1)
            a = first(env, run)
            for test, right in rest:  # chained: each operand evaluated once, stop at the first False
                b = right(env, run)
                if not test(a, b, run):
                    return False
                a = b
            return True
        return compare
    if isinstance(node, ast.BoolOp):
        parts = [_build(v, scope) for v in node.values]
        is_and = isinstance(node.op, ast.And)

        def boolop(env: dict, run: _Run) -> Any:
            run.charge(1)
            value = parts[0](env, run)
            for part in parts[1:]:  # Python semantics: returns the deciding operand, short-circuits
                if (not value) if is_and else value:
                    return value
                value = part(env, run)
            return value
        return boolop
    if isinstance(node, ast.IfExp):
        test, body, orelse = _build(node.test, scope), _build(node.body, scope), _build(node.orelse, scope)

        def ifexp(env: dict, run: _Run) -> Any:
            run.charge(1)
            return body(env, run) if test(env, run) else orelse(env, run)
        return ifexp
    if isinstance(node, ast.Subscript):
        return _build_subscript(node, scope)
    if isinstance(node, ast.Call):
        return _build_call(node, scope)
    if isinstance(node, ast.Lambda):
        raise MiniError("a lambda is only allowed as the whole program or as the first argument of map/filter")
    raise _refuse(node)


def _build_subscript(node: ast.Subscript, scope: _Scope) -> Eval:
    target = _build(node.value, scope)
    if isinstance(node.slice, ast.Slice):
        parts = [None if p is None else _build(p, scope) for p in (node.slice.lower, node.slice.upper,
                                                                     node.slice.step)]

        def sliced(env: dict, run: _Run) -> list:
            run.charge(1)
            value = target(env, run)
            bounds = [None if p is None else p(env, run) for p in parts]
            items = _need_list(value, "slicing")
            if any(b is not None and type(b) not in _INTS for b in bounds):
                raise MiniError("slice bounds must be integers or None")
            if bounds[2] is not None and not bounds[2]:
                raise MiniError("slice step cannot be zero")
            result = items[bounds[0]:bounds[1]:bounds[2]]
            run.charge(len(result))
            return result
        return sliced
    index = _build(node.slice, scope)

    def indexed(env: dict, run: _Run) -> Any:
        run.charge(1)
        value = target(env, run)
        i = index(env, run)
        items = _need_list(value, "indexing")
        if type(i) not in _INTS:
            raise MiniError(f"list indices must be integers, not {_type_name(i)}")
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
    args: list[Callable[[dict, _Run], Any]] = []
    for i, arg in enumerate(node.args):
        if name in ("map", "filter") and i == 0:
            if not isinstance(arg, ast.Lambda):
                raise MiniError(f"the first argument of {name} must be a lambda")
            args.append(_build_lambda(arg, scope))
        else:
            args.append(_build(arg, scope))

    def call(env: dict, run: _Run) -> Any:
        run.charge(1)
        return _call_builtin(name, [a(env, run) for a in args], run)
    return call


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
        run = _Run(budget)
        check_value(value, budget)
        try:
            return self._body({self.param: value}, run)
        except MiniError:
            raise
        except RecursionError:  # not reachable with the depth bound; kept as a last line of defence
            raise MiniError("evaluation nested too deeply", budget=True) from None


def check_value(value: Any, budget: Budget = DEFAULT_BUDGET) -> None:
    """Refuse values mini does not have (str, float, tuple, dict) or that break the bounds."""
    stack = [value]
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        if seen > budget.max_items:
            raise MiniError(f"value too large (> {budget.max_items} elements)")
        t = type(v)
        if t is bool or v is None:
            continue
        if t is int:
            if not -budget.max_int < v < budget.max_int:
                raise MiniError(f"integer out of range (abs value >= {budget.max_int})")
        elif t is list:
            if len(v) > budget.max_list:
                raise MiniError(f"list too long (> {budget.max_list} elements)")
            stack.extend(v)
        else:
            raise MiniError(f"mini values are ints, bools, None and lists, not {t.__name__}")


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


# -- random programs ------------------------------------------------------------------------------------


class _Generator:
    """Typed random expressions: 'int', 'list' (of ints) and 'bool'. Source text is fully parenthesised;
    parse_program canonicalises it. `wide` adds rarer forms (bool arithmetic, None, nested lists, chains)
    that the CPython agreement test wants covered but a tiny model does not need to learn first."""

    def __init__(self, rng: random.Random, wide: bool):
        self.rng, self.wide = rng, wide
        self.params = ["y", "z", "w", "v"]

    def const(self) -> str:
        n = self.rng.randint(-3, 9)
        return f"({n})" if n < 0 else str(n)

    def var(self, scope: list[tuple[str, str]], kind: str) -> str | None:
        names = [n for n, k in scope if k == kind]
        return self.rng.choice(names) if names else None

    def expr(self, kind: str, depth: int, scope: list[tuple[str, str]]) -> str:
        return getattr(self, f"gen_{kind}")(depth, scope)

    def gen_int(self, depth: int, scope: list[tuple[str, str]]) -> str:
        r = self.rng
        name = self.var(scope, "int")
        if depth <= 0 or r.random() < 0.2:
            return name if name and r.random() < 0.7 else self.const()
        d = depth - 1
        i = lambda: self.gen_int(d, scope)  # noqa: E731 - short local helpers read best here
        lst = lambda: self.gen_list(d, scope)  # noqa: E731
        forms: list[tuple[float, Callable[[], str]]] = [
            (3, lambda: f"({i()} {r.choice('+-*')} {i()})"),
            (1, lambda: f"({i()} {r.choice(['//', '%'])} {r.randint(2, 5)})"),
            (0.4, lambda: f"({i()} {r.choice(['//', '%'])} {i()})"),
            (0.5, lambda: f"(-{i()})"),
            (1, lambda: f"len({lst()})"), (1, lambda: f"sum({lst()})"),
            (0.6, lambda: f"{r.choice(['min', 'max'])}({lst()})"),
            (0.6, lambda: f"{r.choice(['min', 'max'])}({i()}, {i()})"),
            (0.4, lambda: f"abs({i()})"),
            (1, lambda: f"{lst()}[{r.randint(-2, 2) if r.random() < 0.7 else i()}]"),
            (1, lambda: f"({i()} if {self.gen_bool(d, scope)} else {i()})"),
        ]
        if self.wide:
            forms += [(0.5, lambda: f"({self.gen_bool(d, scope)} {r.choice('+-*')} {i()})"),
                      (0.5, lambda: f"({i()} {r.choice(['and', 'or'])} {i()})"),
                      (0.2, lambda: f"(+{i()})"), (0.2, lambda: r.choice(["True", "False"])),
                      (0.3, lambda: f"{r.choice(['min', 'max'])}({i()}, {i()}, {i()})")]
        return self.pick(forms)

    def gen_list(self, depth: int, scope: list[tuple[str, str]]) -> str:
        r = self.rng
        name = self.var(scope, "list")
        if depth <= 0 or r.random() < 0.2:
            if name and r.random() < 0.8:
                return name
            if r.random() < 0.3:
                return f"range({r.randint(0, 6)})"
            return "[" + ", ".join(self.const() for _ in range(r.randint(0, 3))) + "]"
        d = depth - 1
        lst = lambda: self.gen_list(d, scope)  # noqa: E731
        param = next(p for p in self.params if all(p != n for n, _ in scope))
        inner = [*scope, (param, "int")]
        forms: list[tuple[float, Callable[[], str]]] = [
            (1, lambda: f"({lst()} + {lst()})"),
            (1, lambda: f"sorted({lst()})"), (0.7, lambda: f"reversed({lst()})"),
            (0.7, lambda: f"{lst()}[::-1]"),
            (1, lambda: f"{lst()}[{self.bound()}:{self.bound()}]"),
            (1.5, lambda: f"map(lambda {param}: {self.gen_int(d, inner)}, {lst()})"),
            (1.5, lambda: f"filter(lambda {param}: {self.gen_bool(d, inner)}, {lst()})"),
            (0.5, lambda: f"({lst()} * {r.randint(0, 3)})"),
            (0.7, lambda: "[" + ", ".join(self.gen_int(d, scope) for _ in range(r.randint(1, 3))) + "]"),
            (0.5, lambda: f"range({r.choice([f'len({lst()})', f'(abs({self.gen_int(d, scope)}) % 8)'])})"),
            (0.7, lambda: f"({lst()} if {self.gen_bool(d, scope)} else {lst()})"),
        ]
        if self.wide:
            forms += [(0.4, lambda: f"{lst()}[{self.bound()}:{self.bound()}:{r.choice(['-1', '2', '-2', '3'])}]"),
                      (0.3, lambda: f"({lst()} * {self.gen_bool(d, scope)})"),
                      (0.3, lambda: f"sorted([{lst()}, {lst()}])"),
                      (0.3, lambda: f"map(lambda {param}: [{param}, None], {lst()})"),
                      (0.3, lambda: f"({lst()} or {lst()})"),
                      (0.3, lambda: f"range({r.randint(-3, 3)}, {r.randint(-3, 9)}, {r.choice([1, 2, -1, 3])})")]
        return self.pick(forms)

    def gen_bool(self, depth: int, scope: list[tuple[str, str]]) -> str:
        r = self.rng
        d = max(depth - 1, 0)
        i = lambda: self.gen_int(d, scope)  # noqa: E731
        forms: list[tuple[float, Callable[[], str]]] = [
            (4, lambda: f"({i()} {r.choice(['==', '!=', '<', '<=', '>', '>='])} {i()})"),
            (1, lambda: f"({i()} % 2 == {r.randint(0, 1)})"),
            (1, lambda: f"({i()} {r.choice(['in', 'not in'])} {self.gen_list(d, scope)})"),
        ]
        if depth > 0:
            b = lambda: self.gen_bool(d, scope)  # noqa: E731
            forms += [(1, lambda: f"({b()} {r.choice(['and', 'or'])} {b()})"), (0.5, lambda: f"(not {b()})")]
        if self.wide:
            forms += [(0.5, lambda: f"({i()} < {i()} <= {i()})"),
                      (0.4, lambda: f"({self.gen_list(d, scope)} {r.choice(['==', '<', '>='])} "
                                    f"{self.gen_list(d, scope)})"),
                      (0.3, lambda: f"(not {i()})"), (0.2, lambda: f"({i()} == None)")]
        return self.pick(forms)

    def bound(self) -> str:
        r = self.rng.random()
        return "" if r < 0.35 else str(self.rng.randint(-3, 4))

    def pick(self, forms: list[tuple[float, Callable[[], str]]]) -> str:
        weights = [w for w, _ in forms]
        return self.rng.choices(forms, weights)[0][1]()


def random_program(rng: random.Random, input_kind: str = "list", output_kind: str | None = None,
                   depth: int = 3, wide: bool = False) -> str:
    """Source text of a random mini program over an int or int-list input (it may still fail at run time)."""
    if output_kind is None:
        output_kind = rng.choice(["int", "list"] if not wide else ["int", "list", "bool"])
    body = _Generator(rng, wide).expr(output_kind, depth, [("x", input_kind)])
    return f"f = lambda x: {body}"


def random_input(rng: random.Random, kind: str) -> int | list[int]:
    """A small random input: an int, or a short list of small ints."""
    if kind == "int":
        return rng.randint(-10, 20)
    return [rng.randint(-5, 12) for _ in range(rng.randint(0, 6))]
