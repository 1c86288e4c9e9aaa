"""Run folders written by an earlier version of the app (tests/fixtures/runs_v1, made before the engine's
regrouping by tests/fixtures/make_run_fixtures.py) still open, replay their curves and resume bit-exactly:
the resumed records equal those of the same runs trained without interruption by that earlier version. Self-play's
records after its checkpoint are those of this version's rounds (re-recorded when a round came to decode every task
type's proposals and answers in one batch each, again when the held-out protocol and the trivial-task filter
changed which tasks a round plays, and again when every reply came to draw from its own seed, so that a round
shared among processes samples what one process samples: all on purpose); the records it replays are the earlier
version's."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from desktop_app.engine.run_folder import list_committed, read_metrics, verify_checkpoint
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.loop import train

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1"
RELOCATED = ("run.json", "adapter_config.json")


def _relocate(root: Path, old: str) -> None:
    """Point the absolute paths the runs recorded (their base model) at the copy, keeping manifests true."""
    for path in root.rglob("*.json"):
        if path.name not in RELOCATED or old not in path.read_text(encoding="utf-8"):
            continue
        path.write_text(path.read_text(encoding="utf-8").replace(old, str(root)), encoding="utf-8")
        manifest = path.parent / "manifest.json"
        if manifest.is_file():
            data = json.loads(manifest.read_text(encoding="utf-8"))
            data["files"][path.name] = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                        "bytes": path.stat().st_size}
            manifest.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


@pytest.fixture
def old_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict]:
    root = tmp_path / "runs_v1"
    shutil.copytree(FIXTURE, root)
    expected = json.loads((root / "expected.json").read_text(encoding="utf-8"))
    _relocate(root, expected["root"])
    monkeypatch.chdir(root)  # the pretraining run names its dataset relative to the fixture folder
    return root, expected


TIMINGS = ("elapsed_s", "eta_s", "tokens_per_s", "mfu", "rollout_tokens_per_s", "checks_per_s", "check_share")


def _stable(records: list[dict]) -> list[dict]:
    """Step and eval records without what depends on the clock."""
    return [{k: v for k, v in r.items() if k not in TIMINGS and not k.startswith("time/")}
            for r in records if r.get("type") in ("step", "eval")]


def _same(got: list[dict], want: list[dict]) -> bool:
    """The same records, floats to 1e-5 of each other: the fixture was recorded on another CPU, whose kernels round
    differently in the last digits (a grad norm of 1.32997298 against 1.32997286 on an Intel Xeon); resuming on one
    machine stays bit-exact (tests/engine/test_training.py compares resumed and uninterrupted runs exactly)."""
    if len(got) != len(want) or any(a.keys() != b.keys() for a, b in zip(got, want, strict=True)):
        return False
    return all(a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7) if isinstance(b[k], float) else a[k] == b[k]
               for a, b in zip(got, want, strict=True) for k in b)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pretrain", "lora", "selfplay"])
def test_an_old_run_resumes_bit_exactly(old_runs: tuple[Path, dict], name: str) -> None:
    root, expected = old_runs
    run_dir = root / name
    verify_checkpoint(list_committed(run_dir)[-1])
    reference = _stable(expected[name])
    assert _same(_stable(read_metrics(run_dir)), [r for r in reference if r["step"] <= 4])  # the history it replays
    events = list(train(RunConfig.load(run_dir / "run.json"), run_dir, resume=True))
    assert events[-1].reason == "completed", events[-1]
    got = _stable(read_metrics(run_dir))
    assert _same(got, reference), (got, reference)


def test_an_old_run_opens_and_generates(old_runs: tuple[Path, dict]) -> None:
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    root, _ = old_runs
    for name in ("pretrain", "lora", "selfplay"):
        loaded = load_model(root / name, device="cpu")
        assert loaded.kind == "run" and loaded.path.name == "step-00000004"
        stats = [e for e in stream_text(loaded, "the", GenerateSpec(max_new_tokens=4, temperature=0.0))
                 if e.type == "generation"]
        assert len(stats) == 1 and stats[0].token_ids
