"""What the evaluation tests share: `run_cli`, the `eval` verb run in this process (exit code, stdout, stderr)."""

from __future__ import annotations

import pytest

from desktop_app import cli


@pytest.fixture
def run_cli(monkeypatch, capsys):
    monkeypatch.setattr(cli, "VERBS", {"eval": cli.VERBS["eval"]})

    def run(*argv):
        code = cli.main(["eval", *map(str, argv)])
        return code, *capsys.readouterr()

    return run
