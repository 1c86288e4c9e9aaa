"""Shared fixtures for engine tests (helpers live in ingest_cases.py: a module name no other conftest shadows)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ingest_cases import make_malformed_corpus


@pytest.fixture
def malformed_corpus(tmp_path: Path) -> dict[str, Path]:
    """name -> path of every case; the expected verdict of each is in ingest_cases.EXPECTED_VERDICTS."""
    return make_malformed_corpus(tmp_path)
