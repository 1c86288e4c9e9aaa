"""Exceptions that mean "the user asked for something impossible" (shown as one clear line, no traceback)."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad path, bad setting, unusable file). The message says how."""
