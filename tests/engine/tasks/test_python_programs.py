"""The python world's program generator: variety, determinism, and programs the sandbox accepts (nothing runs here)."""

from __future__ import annotations

import ast
import random

import pytest

from desktop_app.engine.sandbox.executor import ZYGOTE
from desktop_app.engine.sandbox.literal import parse_literal
from desktop_app.engine.sandbox.screen import screen_source
from desktop_app.engine.tasks.python_programs import KIND_PARAMS, KINDS, random_args, random_program


class _Blank(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool) or node.value is None:
            return node
        return ast.Name("N" if isinstance(node.value, (int, float)) else "S")


def shape(program: str) -> str:
    """The program with every number and string constant blanked: programs equal up to constants share it."""
    return ast.unparse(_Blank().visit(ast.parse(program)))


def zygote_names(name: str) -> tuple[str, ...]:
    """A tuple constant of the sandbox's fork server (ALLOWED_MODULES, SAFE_BUILTINS), read without importing it."""
    tree = ast.parse(ZYGOTE.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"zygote.py has no {name}")


def test_variety_of_texts_and_shapes() -> None:
    # 1,800 shapes of 2,000: were the shapes equally likely, that takes a space of about 9,000 of them, so a held-out
    # program shares its structure with one of 1,000 training programs about one time in ten at most (the old world
    # had 16 shapes: every held-out program shared one). Measured: 1,952-1,964 shapes, 1,973-1,980 texts.
    rng = random.Random(0)
    programs = [random_program(rng).source for _ in range(2_000)]
    assert len(set(programs)) >= 1_900
    assert len({shape(p) for p in programs}) >= 1_800


@pytest.mark.parametrize("kind", KINDS)
def test_every_input_kind_has_its_own_variety(kind: str) -> None:
    rng = random.Random(kind)
    programs = [random_program(rng, kind) for _ in range(1_000)]
    assert {p.kind for p in programs} == {kind}
    assert len({p.source for p in programs}) >= 900
    assert len({len(p.source.splitlines()) for p in programs}) >= 5  # one-liners and multi-step bodies alike


def test_the_same_seed_gives_the_same_programs_and_inputs() -> None:
    def draw(seed: int) -> list[tuple[str, str]]:
        rng = random.Random(seed)
        return [(p.source, random_args(p.kind, rng)) for p in (random_program(rng) for _ in range(200))]

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_programs_pass_the_screen_use_only_the_sandboxs_builtins_and_read_their_parameters() -> None:
    allowed, builtins = zygote_names("ALLOWED_MODULES"), set(zygote_names("SAFE_BUILTINS"))
    rng = random.Random(11)
    for _ in range(1_500):
        program = random_program(rng)
        tree = screen_source(program.source, allowed)
        (fn,) = tree.body
        assert isinstance(fn, ast.FunctionDef) and fn.name == "f"
        params = [a.arg for a in fn.args.args]
        assert tuple(params) in KIND_PARAMS[program.kind]
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        stored |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.Lambda) for a in n.args.args}
        loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert loaded - stored - set(params) <= builtins, program.source
        assert set(params) <= loaded, program.source  # every parameter is read (a pair kind's k too)
        assert not any(isinstance(n, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal)) for n in ast.walk(tree))
        assert 2 <= len(program.source.splitlines()) <= 25


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_are_small_literals_of_the_kind(kind: str) -> None:
    rng = random.Random(kind)
    for _ in range(200):
        text = random_args(kind, rng)
        args = parse_literal(f"({text},)")
        assert len(args) == len(KIND_PARAMS[kind][0]) and len(text) <= 40
        if kind.endswith("_k"):
            assert isinstance(args[1], int) and 1 <= args[1] <= 12
