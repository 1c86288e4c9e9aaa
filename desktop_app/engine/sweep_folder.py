"""A hyperparameter sweep on disk (torch-free, Optuna-free): its files, its trials' run folders and the note each trial
run carries. engine/sweep/ runs a sweep; the run tracking (train/tracking.py) reads a trial's note to group the trial
under its sweep.

Layout of a sweep folder SWEEP:
    sweep.json             the sweep as asked (engine/sweep/spec.py: the base run config, what varies, the metric,
                           how many trials, sampler, pruner, trials at once); written once, atomically
    study.db               the Optuna study (SQLite): every trial's settings, reported values and state
    sweep.lock             held while a process runs the sweep (an OS lock: a killed process leaves none held)
    best.json              the best trial so far: its number, value, settings, run folder and checkpoint
    tracking.json          the sweep's own tracked run where a tracker has one (MLflow's parent run)
    trials/trial-NNNN/     one ordinary run folder per trial (run.json, metrics.jsonl, checkpoints/) holding
                           sweep_trial.json: which sweep and trial it is, and the settings the trial tried
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.run_folder import read_json

SWEEP_FILE = "sweep.json"
STUDY_FILE = "study.db"
LOCK_FILE = "sweep.lock"
BEST_FILE = "best.json"
TRIALS_DIR = "trials"
TRIAL_FILE = "sweep_trial.json"  # inside a trial's run folder
SWEEPS = "sweeps"  # the workspace's folder of sweeps (the server's)


def is_sweep_dir(folder: str | Path) -> bool:
    return (Path(folder) / SWEEP_FILE).is_file()


def sweeps_folder(workspace_root: str | Path) -> Path:
    """Where a workspace keeps its sweeps, one folder each."""
    return Path(workspace_root) / SWEEPS


def trial_dir(sweep_dir: str | Path, number: int) -> Path:
    return Path(sweep_dir) / TRIALS_DIR / f"trial-{number:04d}"


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def read_trial(run_dir: str | Path) -> dict[str, Any] | None:
    """The sweep note of a trial's run folder: {"sweep": name, "sweep_dir", "trial": number, "params": {setting:
    value}, "metric", and the sweep's tracked-run ids}; None for a run that is no sweep's trial."""
    note = read_json(Path(run_dir) / TRIAL_FILE)
    return note if isinstance(note, dict) and isinstance(note.get("trial"), int) else None


def write_trial(run_dir: str | Path, note: dict[str, Any]) -> None:
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(run_dir) / TRIAL_FILE, note)


def read_best(sweep_dir: str | Path) -> dict[str, Any] | None:
    best = read_json(Path(sweep_dir) / BEST_FILE)
    return best if isinstance(best, dict) else None
