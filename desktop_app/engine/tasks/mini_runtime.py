"""Mini values at run time: the budgets of one evaluation and every operation a mini program can perform.

`mini_lang` builds a program into closures that call these; they take and return plain ints, bools, None and
lists only, and charge every step and bound every value, so no program can run long or grow large. Kept apart
from the builder so that the language's syntax rules and its run-time semantics can each be read on their own.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
INTS = (int, bool)


def type_name(value: Any) -> str:
    """Python's name for a value's type, as error messages show it."""
    return "NoneType" if value is None else type(value).__name__


class Run:
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


def bounded_int(value: int, run: Run) -> int:
    """An integer result, or MiniError when it breaks the integer bound."""
    if -run.max_int < value < run.max_int:
        return value
    raise MiniError(f"integer out of range (abs value >= {run.max_int})", budget=True)


def new_list(items: list, run: Run) -> list:
    """Admit a freshly built list: length and total-size bounds, and its size charged as steps."""
    if len(items) > run.max_list:
        raise MiniError(f"list too long (> {run.max_list} elements)", budget=True)
    weight = _weight(items, min(run.max_items, run.left))
    run.charge(weight)
    if weight > run.max_items:
        raise MiniError(f"value too large (> {run.max_items} elements)", budget=True)
    return items


def need_list(value: Any, what: str) -> list:
    """`value` when it is a list, else MiniError saying that `what` needs one."""
    if type(value) is not list:
        raise MiniError(f"{what} needs a list, not {type_name(value)}")
    return value


def _add(a: Any, b: Any, run: Run) -> Any:
    if type(a) in INTS and type(b) in INTS:
        return bounded_int(a + b, run)
    if type(a) is list and type(b) is list:
        return new_list(a + b, run)
    raise MiniError(f"unsupported operand types for +: {type_name(a)} and {type_name(b)}")


def _sub(a: Any, b: Any, run: Run) -> Any:
    if type(a) in INTS and type(b) in INTS:
        return bounded_int(a - b, run)
    raise MiniError(f"unsupported operand types for -: {type_name(a)} and {type_name(b)}")


def _mul(a: Any, b: Any, run: Run) -> Any:
    if type(a) in INTS and type(b) in INTS:
        return bounded_int(a * b, run)
    if type(a) is list and type(b) in INTS:
        a, b = b, a
    if type(b) is list and type(a) in INTS:
        times = max(0, int(a))
        # check before building: `[0] * 10**11` must never be allocated
        if len(b) * times > run.max_list:
            raise MiniError(f"list too long (> {run.max_list} elements)", budget=True)
        if (_weight(b, run.max_items) - 1) * times + 1 > run.max_items:
            raise MiniError(f"value too large (> {run.max_items} elements)", budget=True)
        return new_list(b * times, run)
    raise MiniError(f"unsupported operand types for *: {type_name(a)} and {type_name(b)}")


def _floordiv(a: Any, b: Any, run: Run) -> Any:
    if type(a) in INTS and type(b) in INTS:
        if not b:
            raise MiniError("division by zero")
        return bounded_int(a // b, run)
    raise MiniError(f"unsupported operand types for //: {type_name(a)} and {type_name(b)}")


def _mod(a: Any, b: Any, run: Run) -> Any:
    if type(a) in INTS and type(b) in INTS:
        if not b:
            raise MiniError("division by zero")
        return bounded_int(a % b, run)
    raise MiniError(f"unsupported operand types for %: {type_name(a)} and {type_name(b)}")


# the evaluator of each arithmetic operator, by its ast node type
BINOPS: dict[type, Callable[[Any, Any, Run], Any]] = {
    ast.Add: _add, ast.Sub: _sub, ast.Mult: _mul, ast.FloorDiv: _floordiv, ast.Mod: _mod}


def _compare_cost(a: Any, b: Any, run: Run) -> None:
    if type(a) is list or type(b) is list:
        run.charge(_weight(a, run.left) + _weight(b, run.left))


def _ordered(symbol: str, test: Callable[[Any, Any], bool]) -> Callable[[Any, Any, Run], bool]:
    def compare(a: Any, b: Any, run: Run) -> bool:
        _compare_cost(a, b, run)
        try:
            return test(a, b)
        except TypeError:  # e.g. 1 < [1] or None < 0: plain values only, so no user code ran
            raise MiniError(f"'{symbol}' not supported between {type_name(a)} and {type_name(b)}") from None
    return compare


def _eq(a: Any, b: Any, run: Run) -> bool:
    _compare_cost(a, b, run)
    return a == b


def _ne(a: Any, b: Any, run: Run) -> bool:
    _compare_cost(a, b, run)
    return a != b


def _in(a: Any, b: Any, run: Run) -> bool:
    need_list(b, "'in'")
    run.charge(_weight(b, run.left) + _weight(a, run.left))
    return a in b


def _not_in(a: Any, b: Any, run: Run) -> bool:
    return not _in(a, b, run)


# the test of each comparison operator, by its ast node type
COMPARE: dict[type, Callable[[Any, Any, Run], bool]] = {
    ast.Eq: _eq, ast.NotEq: _ne, ast.In: _in, ast.NotIn: _not_in,
    ast.Lt: _ordered("<", lambda a, b: a < b), ast.LtE: _ordered("<=", lambda a, b: a <= b),
    ast.Gt: _ordered(">", lambda a, b: a > b), ast.GtE: _ordered(">=", lambda a, b: a >= b)}


def call_builtin(name: str, args: list, run: Run) -> Any:
    """One call of a named function; arguments are values (map/filter get a Python callable first)."""
    if name == "len":
        value = args[0]
        if type(value) is not list:
            raise MiniError(f"object of type {type_name(value)} has no len()")
        return len(value)
    if name == "abs":
        if type(args[0]) not in INTS:
            raise MiniError(f"bad operand type for abs(): {type_name(args[0])}")
        return bounded_int(abs(args[0]), run)
    if name in ("map", "filter"):
        fn, items = args[0], need_list(args[1], f"{name}()")
        run.charge(len(items))
        if name == "map":
            return new_list([fn(item) for item in items], run)
        return [item for item in items if fn(item)]
    if name == "range":
        if any(type(a) not in INTS for a in args):
            raise MiniError("range() needs integers")
        if len(args) == 3 and not args[2]:
            raise MiniError("range() step must not be zero")
        span = range(*args)  # lazy: its length is known before anything is built
        if len(span) > run.max_list:
            raise MiniError(f"list too long (> {run.max_list} elements)", budget=True)
        return new_list(list(span), run)
    if name in ("min", "max") and len(args) > 1:
        items = args
    else:
        items = need_list(args[0], f"{name}()")
    run.charge(_weight(items, run.left))
    if name == "sum":
        if any(type(v) not in INTS for v in items):
            raise MiniError("sum() needs a list of integers")
        total = 0
        for v in items:  # bound every partial sum, like every other integer result
            total = bounded_int(total + v, run)
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

