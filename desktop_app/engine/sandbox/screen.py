"""A static screen of untrusted Python source, done by the parent before anything runs.

The runtime layers (audit hook, limits, namespaces, unprivileged user) stop what a program *does*; this
screen stops the introspection routes to the interpreter's internals that no audit event covers, such
as `().__class__.__base__.__subclasses__()` walks or `fn.__globals__['os']`. Without `getattr`, `vars`
or `eval` (none is in the sandbox's builtins), an attribute can only be reached by writing its name, so
refusing private and dunder names in the syntax tree closes those routes. AZR-style task programs never
need them.
"""

from __future__ import annotations

import ast

MAX_SOURCE_CHARS = 50_000
ALLOWED_DUNDERS = frozenset({"__name__", "__init__", "__len__", "__eq__", "__lt__", "__repr__"})


class ScreenError(ValueError):
    """The source is refused before running; the message says why."""


def screen_source(source: str, allowed_modules: tuple[str, ...]) -> ast.Module:
    """The parsed module, or ScreenError naming the first refused construct (with its line)."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ScreenError(f"program too long ({len(source)} > {MAX_SOURCE_CHARS} characters)")
    if "\x00" in source:
        raise ScreenError("program contains a NUL character")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise ScreenError(f"syntax error: {exc}") from None
    except (RecursionError, MemoryError):
        raise ScreenError("program nested too deeply to parse") from None
    allowed = frozenset(allowed_modules)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and node.attr not in ALLOWED_DUNDERS:
            raise ScreenError(f"line {line}: private attribute '.{node.attr}' is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
            raise ScreenError(f"line {line}: name '{node.id}' is not allowed")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in allowed:
                    raise ScreenError(f"line {line}: import of '{alias.name}' is not allowed")
        if isinstance(node, ast.ImportFrom):
            if node.level or (node.module or "").split(".")[0] not in allowed:
                raise ScreenError(f"line {line}: import from '{node.module}' is not allowed")
            if any(alias.name.startswith("_") for alias in node.names):
                raise ScreenError(f"line {line}: importing private names is not allowed")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__" in node.value:
            # format strings reach attributes too ("{0.__class__}"): refuse dunders in any text
            raise ScreenError(f"line {line}: text containing '__' is not allowed")
        if isinstance(node, (ast.Global, ast.Nonlocal)) and any(n.startswith("__") for n in node.names):
            raise ScreenError(f"line {line}: dunder names are not allowed")
    return tree
