"""Random valid mini programs and inputs: seed corpora, held-out sets and tests (see `mini_lang` for the language).

The generator only writes source text; `mini_lang.parse_program` checks and canonicalises it. Seeded callers (the
held-out protocol, the tests) depend on its exact random stream: a change to any draw changes every set after it.
"""

from __future__ import annotations

import random
from collections.abc import Callable


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
