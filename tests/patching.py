"""Patching a function for a test wherever the app uses it.

A module that imports a name at its top (`from desktop_app.engine.train.memory_plan import this_machine`) holds its own
binding, which `monkeypatch.setattr(memory_plan, "this_machine", ...)` does not reach: `patch_everywhere` replaces the
name in its module and in every loaded project module bound to the same object."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest


def patch_everywhere(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str, value: Any) -> list[str]:
    """Replace `module.name` and each project module's own binding of it; returns the modules patched."""
    original = getattr(module, name)
    patched = [module.__name__]
    monkeypatch.setattr(module, name, value)
    for other in list(sys.modules.values()):
        if other is module or not getattr(other, "__name__", "").startswith("desktop_app."):
            continue
        if getattr(other, name, None) is original:
            monkeypatch.setattr(other, name, value)
            patched.append(other.__name__)
    return patched
