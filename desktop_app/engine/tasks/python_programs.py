"""Random Python programs for the python task world, composed from typed parts (as mini_lang's generator is).

A program is `def f(...)` over one input kind (KINDS: an int, a list of ints, a string, or one of them with a
small int `k` beside it), then a pipeline of 1-3 steps. Each step is a part from PARTS that turns a value of one
type into another (int, ints, str, strs; bool only as the last step), written as readable statements: a local
per step, for and while loops, if/else, comprehensions. Constants are random and in the pair kinds often the
second parameter; names and forms (a loop or a comprehension) vary too, so every kind has far more than tens of
thousands of program texts. Programs are deterministic (no randomness, no iteration over sets of strings) and
use only the builtins the sandbox allows (sandbox/zygote.py SAFE_BUILTINS), no imports.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from dataclasses import dataclass

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# kind -> the parameter names a program may use (the first is the pipeline's source, the second the int k)
KIND_PARAMS: dict[str, tuple[tuple[str, ...], ...]] = {
    "int": (("x",), ("n",), ("num",)),
    "list": (("xs",), ("nums",), ("values",), ("items",)),
    "str": (("s",), ("text",), ("word",)),
    "list_k": (("xs", "k"), ("nums", "n"), ("values", "k")),
    "str_k": (("s", "k"), ("text", "n"), ("word", "k")),
    "int_k": (("a", "b"), ("x", "y"), ("n", "m")),
}
KINDS = tuple(KIND_PARAMS)
KIND_WEIGHTS = (3, 4, 3, 2, 2, 2)
SOURCE_TYPE = {"int": "int0", "list": "ints", "str": "str", "list_k": "ints", "str_k": "str", "int_k": "int0"}
LOOP_NAMES = {"int": ("v", "n", "x", "item", "num", "val"), "char": ("c", "ch", "letter"),
              "word": ("w", "word", "part", "token"), "index": ("i", "j", "idx"),
              "pair": ("p q", "left right", "u w", "cur nxt")}
LABELS = (("yes", "no"), ("big", "small"), ("even", "odd"), ("hi", "lo"), ("up", "down"), ("on", "off"))
STEP_COUNTS = (1, 2, 2, 3)


@dataclass(frozen=True)
class Program:
    source: str
    kind: str  # a key of KIND_PARAMS: what random_args draws for it


class Builder:
    """Names and constants of the program being written (`k`: the int parameter of a pair kind, else None)."""

    def __init__(self, rng: random.Random, params: tuple[str, ...]):
        self.rng = rng
        self.taken = set(params)
        self.k = params[1] if len(params) > 1 else None

    def fresh(self, *bases: str) -> str:
        """A new local variable, named after one of `bases`."""
        base = self.rng.choice(bases)
        name, i = base, 2
        while name in self.taken:
            name, i = f"{base}{i}", i + 1
        self.taken.add(name)
        return name

    def loop(self, role: str) -> str:
        """A loop variable (int, char, word, index; pair: two names "p q") clear of parameters and locals."""
        return self.rng.choice([n for n in LOOP_NAMES[role] if not self.taken & set(n.split())])

    def const(self, lo: int, hi: int) -> str:
        return str(self.rng.randint(lo, hi))

    def num(self, lo: int, hi: int) -> str:
        """A positive constant, or (pair kinds, often) the parameter k (always 1..12)."""
        if self.k and self.rng.random() < 0.45:
            return self.k
        return self.const(lo, hi)

    def pick(self, *options: str) -> str:
        return self.rng.choice(options)

    def letter(self) -> str:
        return self.rng.choice(LETTERS[3:23])


Lines = tuple[list[str], str]  # a step: its statements and the variable holding its result


def let(b: Builder, names: tuple[str, ...], expr: str) -> Lines:
    out = b.fresh(*names)
    return [f"{out} = {expr}"], out


@dataclass(frozen=True)
class Fold:
    """How a value is built over a loop: its names, its start, how one item is added, and the one-line form."""

    names: tuple[str, ...]
    start: str
    add: str  # "{out}" and "{item}" filled in
    whole: str  # "{body}" filled in with "ITEM for ... [if COND]"


LIST_FOLD = Fold(("out", "result", "kept", "mapped"), "[]", "{out}.append({item})", "[{body}]")
TEXT_FOLD = Fold(("out", "result", "built"), '""', "{out} += {item}", '"".join({body})')
SUM_FOLD = Fold(("total", "acc", "score"), "0", "{out} += {item}", "sum({body})")


def fold(b: Builder, kind: Fold, loop: str, item: str, cond: str = "") -> Lines:
    """A value built by `loop` ("for v in xs"): the one-line form (a comprehension, join or sum) or a loop."""
    out = b.fresh(*kind.names)
    if b.rng.random() < 0.5:
        return [f"{out} = " + kind.whole.format(body=f"{item} {loop}" + (f" if {cond}" if cond else ""))], out
    add = kind.add.format(out=out, item=item)
    body = [f"    if {cond}:", f"        {add}"] if cond else [f"    {add}"]
    return [f"{out} = {kind.start}", f"{loop}:", *body], out


def collect(b: Builder, loop: str, item: str, cond: str = "") -> Lines:
    """A list built by `loop`: a comprehension or a loop that appends."""
    return fold(b, LIST_FOLD, loop, item, cond)


def gather(b: Builder, loop: str, item: str, cond: str = "") -> Lines:
    """A string built by `loop`: a join over a generator or a loop that adds to a string."""
    return fold(b, TEXT_FOLD, loop, item, cond)


def accumulate(b: Builder, loop: str, item: str, cond: str = "") -> Lines:
    """A sum over `loop`: sum() of a generator or a loop that adds."""
    return fold(b, SUM_FOLD, loop, item, cond)


# -- expressions over one variable -------------------------------------------------------------------
def int_expr(b: Builder, v: str) -> str:
    a, c, m = b.num(2, 9), b.const(1, 9), b.num(2, 7)
    return b.pick(f"{v} * {a}", f"{v} + {a}", f"{v} - {c}", f"{v} * {a} + {c}", f"{v} * {a} - {c}", f"{v} * {v}",
                  f"{v} * {v} - {c}", f"abs({v} - {c})", f"{v} // {m}", f"{v} % {m}", f"({v} + {c}) % {m}",
                  f"max({v}, {c})", f"min({v}, {c})", f"{c} - {v}", f"-{v}", f"{v} * {v} % {m}",
                  f"{v} // {m} + {v} % {m}", f"{v} * {a} // {m}")


def int_pred(b: Builder, v: str, top: int = 12) -> str:
    m = b.rng.randint(2, 5)
    a, r, lo = b.num(0, top), b.rng.randint(0, m - 1), b.rng.randint(-5, top // 2)
    forms = [f"{v} % 2 == 0", f"{v} % 2 == 1", f"{v} % {m} == {r}", f"{v} % {m} != 0", f"{v} > {a}", f"{v} < {a}",
             f"{v} >= {a}", f"{v} <= {a}", f"{v} != {a}", f"abs({v}) > {a}", f"{lo} <= {v} <= {lo + m + 3}"]
    return b.pick(*forms, *([f"{v} % {b.k} == 0"] if b.k else []))


def char_pred(b: Builder, c: str) -> str:
    letter, group = b.letter(), "".join(sorted(b.rng.sample(LETTERS, b.rng.randint(3, 6))))
    return b.pick(f'{c} in "aeiou"', f'{c} not in "aeiou"', f'{c} > "{letter}"', f'{c} < "{letter}"',
                  f'{c} != "{letter}"', f'{c} in "{group}"', f'{c} not in "{group}"')


def word_pred(b: Builder, w: str) -> str:
    letter = b.letter()
    return b.pick(f"len({w}) > {b.num(1, 4)}", f"len({w}) <= {b.num(2, 4)}", f'{w}.startswith("{letter}")',
                  f'"{letter}" in {w}', f"len({w}) % 2 == 0", f'{w} < "{letter}"')


# -- ints -> ints -------------------------------------------------------------------------------------
def map_ints(b: Builder, s: str) -> Lines:
    v = b.loop("int")
    return collect(b, f"for {v} in {s}", int_expr(b, v))


def map_ints_if(b: Builder, s: str) -> Lines:
    v = b.loop("int")
    cond, e1, e2 = int_pred(b, v), int_expr(b, v), int_expr(b, v)
    if b.rng.random() < 0.5:
        return collect(b, f"for {v} in {s}", f"{e1} if {cond} else {e2}")
    out = b.fresh("out", "result", "changed")
    return [f"{out} = []", f"for {v} in {s}:", f"    if {cond}:", f"        {out}.append({e1})", "    else:",
            f"        {out}.append({e2})"], out


def filter_ints(b: Builder, s: str) -> Lines:
    v = b.loop("int")
    return collect(b, f"for {v} in {s}", v, int_pred(b, v))


def sort_ints(b: Builder, s: str) -> Lines:
    v = b.loop("int")
    return let(b, ("ordered", "ranked"), b.pick(f"sorted({s})", f"sorted({s}, reverse=True)", f"sorted({s}, key=abs)",
                                                f"sorted({s}, key=lambda {v}: ({v} % {b.const(2, 5)}, {v}))"))


def reorder_ints(b: Builder, s: str) -> Lines:
    a = b.num(1, 3)
    return let(b, ("part", "picked", "moved"), b.pick(f"{s}[::-1]", f"list(reversed({s}))", f"{s}[:{a}]",
                                                      f"{s}[{a}:]", f"{s}[::2]", f"{s}[1::2]", f"{s}[-{a}:]",
                                                      f"{s}[{a}:] + {s}[:{a}]", f"{s} + {s}[::-1]",
                                                      f"[{b.const(0, 9)}] + {s}", f"{s} + [{a}]"))


def prefix_ints(b: Builder, s: str) -> Lines:
    v, out = b.loop("int"), b.fresh("prefix", "running", "sums")
    if b.rng.random() < 0.5:
        total = b.fresh("total", "acc")
        op = b.pick(f"{total} += {v}", f"{total} = max({total}, {v})", f"{total} += {int_expr(b, v)}")
        return [f"{total} = 0", f"{out} = []", f"for {v} in {s}:", f"    {op}", f"    {out}.append({total})"], out
    return [f"{out} = []", f"for {v} in {s}:", f"    if not {out} or {v} {b.pick('>', '<', '>=')} {out}[-1]:",
            f"        {out}.append({v})"], out


def pairwise_ints(b: Builder, s: str) -> Lines:
    op = b.pick("-", "+", "*")
    if b.rng.random() < 0.5:
        i = b.loop("index")
        return collect(b, f"for {i} in range(len({s}) - 1)", f"{s}[{i} + 1] {op} {s}[{i}]")
    p, q = b.loop("pair").split()
    tail = b.pick(f"{s}[1:]", f"{s}[::-1]")
    item = b.pick(f"{q} {op} {p}", f"max({p}, {q})", f"min({p}, {q})")
    return collect(b, f"for {p}, {q} in zip({s}, {tail})", item)


def dedupe_ints(b: Builder, s: str) -> Lines:
    v, out = b.loop("int"), b.fresh("seen", "unique", "out")
    return [f"{out} = []", f"for {v} in {s}:", f"    if {v} not in {out}:", f"        {out}.append({v})"], out


def chunk_ints(b: Builder, s: str) -> Lines:
    i, size, how = b.loop("index"), b.num(2, 3), b.pick("sum", "max", "min", "len")
    return collect(b, f"for {i} in range(0, len({s}), {size})", f"{how}({s}[{i}:{i} + {size}])")


def enumerate_ints(b: Builder, s: str) -> Lines:
    i, v = b.loop("index"), b.loop("int")
    item = b.pick(f"{v} * {i}", f"{v} + {i}", f"{v} - {i}", f"{i} if {v} > {b.num(0, 9)} else {v}")
    return collect(b, f"for {i}, {v} in enumerate({s})", item)


def takewhile_ints(b: Builder, s: str) -> Lines:
    v, out = b.loop("int"), b.fresh("head", "prefix", "out")
    return [f"{out} = []", f"for {v} in {s}:", f"    if {int_pred(b, v)}:", "        break",
            f"    {out}.append({v})"], out


def histogram_ints(b: Builder, s: str) -> Lines:
    v, out, m = b.loop("int"), b.fresh("counts", "buckets"), b.num(2, 5)
    return [f"{out} = [0] * {m}", f"for {v} in {s}:", f"    {out}[{v} % {m}] += 1"], out


# -- ints -> int / str / bool -------------------------------------------------------------------------
def reduce_ints(b: Builder, s: str) -> Lines:
    return let(b, ("total", "size", "best", "spread"), b.pick(
        f"sum({s})", f"len({s})", f"max({s}, default=0)", f"min({s}, default=0)",
        f"max({s}) - min({s}) if {s} else 0", f"{s}.index(max({s})) if {s} else -1", f"{s}.count({b.const(0, 9)})"))


def sum_ints(b: Builder, s: str) -> Lines:
    v = b.loop("int")
    cond = int_pred(b, v) if b.rng.random() < 0.5 else ""
    return accumulate(b, f"for {v} in {s}", b.pick(v, int_expr(b, v), "1" if cond else v), cond)


def product_ints(b: Builder, s: str) -> Lines:
    v, out, m = b.loop("int"), b.fresh("prod", "result"), b.const(7, 100)
    return [f"{out} = 1", f"for {v} in {s}:", f"    {out} = {out} * {v} % {m}"], out


def alternate_ints(b: Builder, s: str) -> Lines:
    i, v, out = b.loop("index"), b.loop("int"), b.fresh("total", "acc", "balance")
    return [f"{out} = 0", f"for {i}, {v} in enumerate({s}):", f"    if {i} % 2 == 0:", f"        {out} += {v}",
            "    else:", f"        {out} -= {b.pick(v, int_expr(b, v))}"], out


def rises_ints(b: Builder, s: str) -> Lines:
    i, out = b.loop("index"), b.fresh("count", "rises", "changes")
    return [f"{out} = 0", f"for {i} in range(1, len({s})):", f"    if {s}[{i}] {b.pick('>', '<', '==')} {s}[{i} - 1]:",
            f"        {out} += 1"], out


def first_ints(b: Builder, s: str) -> Lines:
    v, out = b.loop("int"), b.fresh("found", "first", "answer")
    return [f"{out} = {b.pick('-1', '0')}", f"for {v} in {s}:", f"    if {int_pred(b, v)}:",
            f"        {out} = {b.pick(v, int_expr(b, v))}", "        break"], out


def weighted_ints(b: Builder, s: str) -> Lines:
    i, v = b.loop("index"), b.loop("int")
    return accumulate(b, f"for {i}, {v} in enumerate({s})", b.pick(f"{i} * {v}", f"({i} + 1) * {v}"))


def join_ints(b: Builder, s: str) -> Lines:
    v, sep = b.loop("int"), b.pick(",", "-", " ", "", "+", "|")
    if b.rng.random() < 0.6:
        return let(b, ("text", "joined", "line"), f'"{sep}".join(str({v}) for {v} in {s})')
    return gather(b, f"for {v} in {s}", f'"{b.pick("+", "#", "x")}" if {int_pred(b, v)} else "{b.pick("-", ".", "o")}"')


def check_ints(b: Builder, s: str) -> Lines:
    v = b.loop("int")
    return let(b, ("ok", "flag"), b.pick(f"all({int_pred(b, v)} for {v} in {s})",
                                         f"any({int_pred(b, v)} for {v} in {s})", f"{s} == sorted({s})",
                                         f"len({s}) > {b.num(2, 5)}"))


# -- int -> int / ints / str --------------------------------------------------------------------------
def arith_int(b: Builder, x: str) -> Lines:
    return let(b, ("y", "result", "value"), int_expr(b, x))


def branch_int(b: Builder, x: str) -> Lines:
    out = b.fresh("y", "result", "value")
    lines = [f"if {int_pred(b, x, 30)}:", f"    {out} = {int_expr(b, x)}"]
    if b.rng.random() < 0.4:
        lines += [f"elif {int_pred(b, x, 30)}:", f"    {out} = {int_expr(b, x)}"]
    return [*lines, "else:", f"    {out} = {int_expr(b, x)}"], out


def digits_int(b: Builder, x: str) -> Lines:
    if b.rng.random() < 0.5:
        c = b.loop("char")
        return let(b, ("total", "digits", "size"), b.pick(
            f"sum(int({c}) for {c} in str(abs({x})))", f"len(str(abs({x})))", f"int(str(abs({x}))[::-1])",
            f"max(int({c}) for {c} in str(abs({x})))", f'str({x}).count("{b.const(0, 9)}")'))
    rest, out = b.fresh("rest", "left"), b.fresh("total", "acc", "count")
    start, op = b.pick(("0", f"{out} += {rest} % 10"), ("1", f"{out} *= {rest} % 10 + 1"), ("0", f"{out} += 1"))
    return [f"{rest} = abs({x})", f"{out} = {start}", f"while {rest} > 0:", f"    {op}", f"    {rest} //= 10"], out


def loop_int(b: Builder, x: str) -> Lines:
    i, out, m = b.loop("index"), b.fresh("total", "acc"), b.const(3, 9)
    cond = int_pred(b, i) if b.rng.random() < 0.4 else ""
    body = [f"    if {cond}:", f"        {out} += {int_expr(b, i)}"] if cond else [f"    {out} += {int_expr(b, i)}"]
    return [f"{out} = 0", f"for {i} in range(abs({x}) % {m} + {b.const(1, 3)}):", *body], out


def divisors_int(b: Builder, x: str) -> Lines:  # loops up to |x|: only on the parameter itself (small)
    d = b.loop("index")
    return collect(b, f"for {d} in range(1, abs({x}) + 1)", d, f"{x} % {d} == 0")


def divisor_count_int(b: Builder, x: str) -> Lines:  # as divisors_int
    d = b.loop("index")
    return accumulate(b, f"for {d} in range(1, abs({x}) + 1)", "1", f"{x} % {d} {b.pick('==', '!=')} 0")


def steps_int(b: Builder, x: str) -> Lines:
    y, out = b.fresh("cur", "rest", "z"), b.fresh("steps", "count")
    if b.rng.random() < 0.5:
        step = b.pick(f"{y} // 2 if {y} % 2 == 0 else 3 * {y} + 1", f"{y} // 2 if {y} % 2 == 0 else {y} - 1")
        return [f"{y} = abs({x}) + 1", f"{out} = 0", f"while {y} != 1 and {out} < {b.const(10, 30)}:",
                f"    {y} = {step}", f"    {out} += 1"], out
    c = b.num(2, 9)
    out_name = b.pick(out, y)
    return [f"{y} = abs({x})", f"{out} = 0", f"while {y} >= {c}:", f"    {y} -= {c}", f"    {out} += 1"], out_name


def gcd_int(b: Builder, x: str) -> Lines:
    p, q = b.fresh("p", "big"), b.fresh("q", "small")
    return [f"{p}, {q} = abs({x}), {b.num(4, 36)}", f"while {q}:", f"    {p}, {q} = {q}, {p} % {q}"], p


def misc_int(b: Builder, x: str) -> Lines:
    lo = b.rng.randint(-5, 10)
    return let(b, ("y", "result", "value"), b.pick(
        f'bin(abs({x})).count("1")', f"max({lo}, min({x}, {lo + b.rng.randint(5, 30)}))",
        f"pow({x}, {b.const(2, 5)}, {b.num(5, 30)})", f"{x} * {b.num(2, 9)} if {x} > 0 else -{x}"))


def list_int(b: Builder, x: str) -> Lines:
    i, c = b.loop("index"), b.loop("char")
    a = b.num(3, 7)
    return let(b, ("seq", "row", "digits"), b.pick(
        f"[{x} * {i} for {i} in range(1, {a})]", f"[{x} + {i} * {b.const(2, 5)} for {i} in range({a})]",
        f"[{x} % {i} for {i} in range(2, {a} + 2)]", f"[int({c}) for {c} in str(abs({x}))]",
        f"list(range(0, abs({x}) % 20, {b.num(2, 4)}))"))


def halving_int(b: Builder, x: str) -> Lines:
    y, out = b.fresh("cur", "rest"), b.fresh("seq", "trail")
    step = b.pick(f"{y} //= 2", f"{y} -= {b.num(2, 6)}", f"{y} //= {b.const(3, 4)}")
    return [f"{y} = abs({x}) % {b.const(20, 60)}", f"{out} = []", f"while {y} > 0:", f"    {out}.append({y})",
            f"    {step}"], out


def text_int(b: Builder, x: str) -> Lines:
    yes, no = b.rng.choice(LABELS)
    return let(b, ("text", "label", "word"), b.pick(
        f"str({x})[::-1]", f"bin(abs({x}))[2:]", f'"{b.pick("*", "#", "ab")}" * (abs({x}) % {b.const(4, 8)})',
        f'"{yes}" if {int_pred(b, x, 30)} else "{no}"', f"str({x}) * {b.num(2, 3)}"))


# -- str -> str ---------------------------------------------------------------------------------------
def case_str(b: Builder, s: str) -> Lines:
    return let(b, ("text", "result", "out"), b.pick(f"{s}.upper()", f"{s}.title()", f"{s}.capitalize()",
                                                    f"{s}.swapcase()", f"{s}.lower()", f"{s}[::-1]"))


def caesar_str(b: Builder, s: str) -> Lines:
    c, k = b.loop("char"), b.num(1, 25)
    return gather(b, f"for {c} in {s}", f"chr((ord({c}) - 97 + {k}) % 26 + 97) if {c}.isalpha() else {c}")


def filter_str(b: Builder, s: str) -> Lines:
    c = b.loop("char")
    return gather(b, f"for {c} in {s}", c, char_pred(b, c))


def map_str(b: Builder, s: str) -> Lines:
    c, i = b.loop("char"), b.loop("index")
    if b.rng.random() < 0.5:
        return gather(b, f"for {c} in {s}", b.pick(f"{c} * 2", f"{c}.upper() if {char_pred(b, c)} else {c}",
                                                     f'"{b.letter()}" if {char_pred(b, c)} else {c}'))
    item = b.pick(f"{c}.upper() if {i} % 2 == 0 else {c}", f"{c} * ({i} % 3 + 1)",
                  f"{c} if {i} % {b.num(2, 3)} else '-'")
    return gather(b, f"for {i}, {c} in enumerate({s})", item)


def edit_str(b: Builder, s: str) -> Lines:
    a = b.num(1, 4)
    return let(b, ("text", "result", "trimmed"), b.pick(
        '{}.replace("{}", "{}")'.format(s, *b.rng.sample(LETTERS, 2)),
        f'{s}.replace("{b.pick("a", "e", "o", " ")}", "")',
        f'"".join(sorted({s}))', f'"".join(sorted({s}, reverse=True))', f"{s}[{a}:]", f"{s}[:{a}]", f"{s}[::2]",
        f"{s}[1::2]", f"{s}[{a}:] + {s}[:{a}]", f"{s} + {s}[::-1]", f"{s} + str(len({s}))", f'"-".join({s}.split())',
        f"{s} * {b.num(2, 3)}"))


def dedupe_str(b: Builder, s: str) -> Lines:
    c, out = b.loop("char"), b.fresh("seen", "unique", "out")
    return [f'{out} = ""', f"for {c} in {s}:", f"    if {c} not in {out}:", f"        {out} += {c}"], out


def runs_str(b: Builder, s: str) -> Lines:
    i, j, out = b.fresh("i", "start"), b.fresh("j", "end"), b.fresh("out", "code", "packed")
    return [f'{out} = ""', f"{i} = 0", f"while {i} < len({s}):", f"    {j} = {i}",
            f"    while {j} < len({s}) and {s}[{j}] == {s}[{i}]:", f"        {j} += 1",
            f"    {out} += {s}[{i}] + str({j} - {i})", f"    {i} = {j}"], out


# -- str -> int / strs / ints / bool ------------------------------------------------------------------
def count_str(b: Builder, s: str) -> Lines:
    c = b.loop("char")
    if b.rng.random() < 0.4:
        return accumulate(b, f"for {c} in {s}", b.pick("1", f"ord({c}) % {b.num(2, 10)}"), char_pred(b, c))
    return let(b, ("count", "size", "where"), b.pick(
        f"len({s})", f'{s}.count("{b.letter()}")', f"len(set({s}))", f'{s}.find("{b.letter()}")',
        f"sum(ord({c}) - 96 for {c} in {s})", f"len({s}.split())", f"{s}.count({s}[0]) if {s} else 0"))


def split_str(b: Builder, s: str) -> Lines:
    i, size = b.loop("index"), b.num(2, 3)
    return let(b, ("words", "parts", "pieces"), b.pick(
        f"{s}.split()", f'{s}.split("{b.pick("a", "e", "i", "o")}")', f"list({s})",
        f"[{s}[{i}:{i} + {size}] for {i} in range(0, len({s}), {size})]"))


def codes_str(b: Builder, s: str) -> Lines:
    c, i, w = b.loop("char"), b.loop("index"), b.loop("word")
    if b.rng.random() < 0.3:
        return collect(b, f"for {i}, {c} in enumerate({s})", i, char_pred(b, c))
    return let(b, ("codes", "values", "sizes"), b.pick(
        f"[ord({c}) - 96 for {c} in {s}]", f"[ord({c}) % {b.num(2, 10)} for {c} in {s}]",
        f"[len({w}) for {w} in {s}.split()]", f"[{s}.count({c}) for {c} in {s}]"))


def check_str(b: Builder, s: str) -> Lines:
    c = b.loop("char")
    return let(b, ("ok", "flag"), b.pick(f"{s} == {s}[::-1]", f"all({char_pred(b, c)} for {c} in {s})",
                                         f"any({char_pred(b, c)} for {c} in {s})", f"len({s}) > {b.num(3, 6)}"))


# -- strs -> str / strs / int / ints ------------------------------------------------------------------
def join_strs(b: Builder, s: str) -> Lines:
    w, sep = b.loop("word"), b.pick(" ", "-", "", ",", "/")
    return let(b, ("text", "joined", "line"), b.pick(
        f'"{sep}".join({s})', f'"{sep}".join({w}[::-1] for {w} in {s})', f'"".join({w}[0] for {w} in {s} if {w})',
        f'max({s}, key=len, default="")', f'"{sep}".join({w}[-1] for {w} in {s} if {w})'))


def order_strs(b: Builder, s: str) -> Lines:
    a = b.num(1, 3)
    return let(b, ("ordered", "words", "picked"), b.pick(
        f"sorted({s})", f"sorted({s}, key=len)", f"sorted({s}, reverse=True)", f"{s}[::-1]", f"{s}[{a}:]",
        f"{s}[:{a}]"))


def map_strs(b: Builder, s: str) -> Lines:
    w = b.loop("word")
    if b.rng.random() < 0.4:
        return collect(b, f"for {w} in {s}", w, word_pred(b, w))
    item = b.pick(f"{w}.upper()", f"{w}[::-1]", f"{w}[:{b.num(1, 3)}]", f"{w}.capitalize()", f"{w} + str(len({w}))",
                  f"{w} * 2", f'{w}.replace("{b.letter()}", "")')
    return collect(b, f"for {w} in {s}", item)


def measure_strs(b: Builder, s: str) -> Lines:
    w = b.loop("word")
    if b.rng.random() < 0.4:
        return accumulate(b, f"for {w} in {s}", b.pick("1", f"len({w})"), word_pred(b, w))
    return let(b, ("count", "size", "longest"), b.pick(
        f"len({s})", f"sum(len({w}) for {w} in {s})", f"max((len({w}) for {w} in {s}), default=0)"))


def lengths_strs(b: Builder, s: str) -> Lines:
    w = b.loop("word")
    return collect(b, f"for {w} in {s}", b.pick(f"len({w})", f'{w}.count("{b.letter()}")', f"len({w}) % {b.num(2, 3)}"))


@dataclass(frozen=True)
class Part:
    takes: str  # int0 (the int parameter itself) | int | ints | str | strs
    gives: str  # int | ints | str | strs | bool (bool: only as the last step)
    write: Callable[[Builder, str], Lines]


PARTS: tuple[Part, ...] = (
    *(Part("ints", "ints", fn) for fn in (map_ints, map_ints_if, filter_ints, sort_ints, reorder_ints, prefix_ints,
                                           pairwise_ints, dedupe_ints, chunk_ints, enumerate_ints, takewhile_ints,
                                           histogram_ints)),
    *(Part("ints", "int", fn) for fn in (reduce_ints, sum_ints, product_ints, alternate_ints, rises_ints, first_ints,
                                          weighted_ints)),
    Part("ints", "str", join_ints), Part("ints", "bool", check_ints),
    *(Part("int", "int", fn) for fn in (arith_int, branch_int, digits_int, loop_int, steps_int, gcd_int, misc_int)),
    Part("int0", "ints", divisors_int), Part("int0", "int", divisor_count_int),
    Part("int", "ints", list_int), Part("int", "ints", halving_int), Part("int", "str", text_int),
    *(Part("str", "str", fn) for fn in (case_str, caesar_str, filter_str, map_str, edit_str, dedupe_str, runs_str)),
    Part("str", "int", count_str), Part("str", "strs", split_str), Part("str", "ints", codes_str),
    Part("str", "bool", check_str),
    Part("strs", "str", join_strs), Part("strs", "strs", order_strs), Part("strs", "strs", map_strs),
    Part("strs", "int", measure_strs), Part("strs", "ints", lengths_strs),
)


def random_program(rng: random.Random, kind: str | None = None) -> Program:
    """A random program of `kind` (else a random kind): 1-3 steps from PARTS, each over the previous step's value."""
    while True:
        chosen = kind or rng.choices(KINDS, KIND_WEIGHTS)[0]
        params = rng.choice(KIND_PARAMS[chosen])
        body = write_steps(Builder(rng, params), params[0], SOURCE_TYPE[chosen], rng.choice(STEP_COUNTS))
        source = render(params, *body)
        if len(params) == 1 or uses_name(source, params[1]):  # a pair kind's program must read its k
            return Program(source, chosen)


def write_steps(b: Builder, source: str, kind: str, steps: int) -> Lines:
    """The statements of `steps` parts chained from the variable `source` of type `kind`, and the result's name."""
    lines: list[str] = []
    for step in range(steps):
        last = step == steps - 1
        options = [p for p in PARTS if (p.takes == kind or (kind == "int0" and p.takes == "int"))
                   and (last or p.gives != "bool")]
        part = b.rng.choice(options)
        more, source = part.write(b, source)
        lines += more
        kind = part.gives
    return lines, source


def render(params: tuple[str, ...], body: list[str], result: str) -> str:
    """`def f(params):` with the body; a last one-line step `name = expr` becomes `return expr`."""
    if body[-1].startswith(f"{result} = "):
        body = [*body[:-1], "return " + body[-1][len(result) + 3:]]
    else:
        body = [*body, f"return {result}"]
    return f"def f({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in body)


def uses_name(source: str, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(source)))


def random_args(kind: str, rng: random.Random) -> str:
    """The argument list (as written inside f(...)) of one small random input of `kind`."""
    first = {"int": _small_int, "int_k": _small_int, "list": _small_list, "list_k": _small_list,
             "str": _small_text, "str_k": _small_text}[kind](rng)
    if kind.endswith("_k"):
        return f"{first!r}, {rng.randint(1, 12 if kind == 'int_k' else 4)}"
    return repr(first)


def _small_int(rng: random.Random) -> int:
    return rng.randint(-20, 60) if rng.random() < 0.8 else rng.randint(61, 150)


def _small_list(rng: random.Random) -> list[int]:
    return [rng.randint(-9, 20) for _ in range(rng.randint(1, 7))]


def _small_text(rng: random.Random) -> str:
    words = rng.choice((1, 1, 1, 2, 3))
    size = (3, 8) if words == 1 else (2, 5)
    return " ".join("".join(rng.choice(LETTERS) for _ in range(rng.randint(*size))) for _ in range(words))
