"""The Optuna study of a sweep, in SQLite inside the sweep's folder (SWEEP/study.db): opened or created, with its
sampler (TPE, random, grid) and pruner (median, Hyperband, successive halving), and the trials it holds by state.

Optuna is the optional sweep extra: it is imported here only, when a sweep opens, and its absence is one line. A
database that is damaged, read-only or from an Optuna too new is one line too (UserError), never a traceback; so is
a sweep another process is running (SWEEP/sweep.lock, an OS lock that a killed process no longer holds).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import TrainSpec
from desktop_app.engine.sweep.space import Dimension
from desktop_app.engine.sweep.spec import SweepSpec
from desktop_app.engine.sweep_folder import LOCK_FILE, STUDY_FILE

if TYPE_CHECKING:
    import optuna

STUDY_NAME = "sweep"
INSTALL_HINT = "pip install azr-model-trainer[sweep]"
SQLITE_HEADER = b"SQLite format 3\x00"


def load_optuna() -> Any:
    """The optuna module, quiet (its progress is the sweep's events); UserError where the extra is not installed."""
    try:
        import optuna
    except ImportError:
        raise UserError(f"hyperparameter sweeps need Optuna, which is not installed here: {INSTALL_HINT}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def storage_url(db: Path) -> str:
    return f"sqlite:///{db.resolve()}"


def open_study(sweep_dir: Path, spec: SweepSpec, dims: list[Dimension], direction: str) -> optuna.Study:
    """The sweep's study, created on first use; a write at once, so a read-only database says so before any trial."""
    optuna = load_optuna()
    db = Path(sweep_dir) / STUDY_FILE
    if db.is_file() and db.stat().st_size and db.read_bytes()[:16] != SQLITE_HEADER:
        raise UserError(f"the sweep's database {db} is damaged (not an SQLite file): it cannot be resumed; start a new "
                        f"sweep (the trials' run folders in {db.parent / 'trials'} are intact)")
    train = TrainSpec.from_dict(spec.base.get("train") or {})
    try:
        storage = optuna.storages.RDBStorage(storage_url(db), engine_kwargs={"connect_args": {"timeout": 60}})
        study = optuna.create_study(storage=storage, study_name=STUDY_NAME, direction=direction, load_if_exists=True,
                                    sampler=make_sampler(optuna, spec, dims), pruner=make_pruner(optuna, spec, train))
        study.set_user_attr("opened_at", time.time())
    except Exception as exc:
        problem = database_problem(exc, db)
        if problem is None:
            raise
        raise UserError(problem) from None
    return study


def database_problem(exc: BaseException, db: Path) -> str | None:
    """What a person reads for a database error (None: not one of the database's faults)."""
    from sqlalchemy.exc import SQLAlchemyError

    optuna = load_optuna()
    faults = (SQLAlchemyError, sqlite3.Error, OSError, optuna.exceptions.StorageInternalError)
    chain, cause = [exc], exc.__cause__ or exc.__context__
    while cause is not None and len(chain) < 8:  # Optuna wraps SQLite's own words ("readonly database")
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    root = chain[-1]
    text = str(root).splitlines()[0] if str(root) else type(root).__name__
    lower = " ".join(str(e) for e in chain).lower()
    if isinstance(exc, RuntimeError) and "schema" in lower:
        return f"the sweep's database {db} was written by another Optuna version ({text})"
    if not isinstance(exc, faults):
        return None
    if "readonly" in lower or "read-only" in lower:
        return (f"the sweep's database {db} is read-only: copy the sweep folder somewhere you can write and resume it "
                "there")
    if "not a database" in lower or "malformed" in lower or "encrypted" in lower:
        return (f"the sweep's database {db} is damaged ({text.removeprefix('(sqlite3.DatabaseError) ')}): it cannot "
                f"be resumed; start a new sweep (the trials' run folders in {db.parent / 'trials'} are intact)")
    return f"the sweep's database {db} cannot be used: {text}"


def make_sampler(optuna: Any, spec: SweepSpec, dims: list[Dimension]) -> Any:
    if spec.sampler == "grid":
        return grid_sampler(optuna, {d.path: list(d.grid()) for d in dims}, spec.seed)
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    # Optuna's default starts TPE after 10 random trials; a short sweep starts it after half of its trials
    return optuna.samplers.TPESampler(seed=spec.seed, n_startup_trials=min(10, max(2, spec.trials // 2)))


def grid_sampler(optuna: Any, space: dict[str, list[Any]], seed: int) -> Any:
    """Optuna's grid sampler without its stop when the grid is done, which works only inside study.optimize (a sweep
    asks and tells; it stops by its trial count, which is capped at the grid's size)."""

    class SweepGrid(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            pass

    return SweepGrid(space, seed=seed)


def make_pruner(optuna: Any, spec: SweepSpec, train: TrainSpec) -> Any:
    """The pruner, on the run's step scale. median: a trial is judged from its second evaluation on (one is too early
    to tell), against the trials before it once two have finished; hyperband and halving: from a first rung of one
    evaluation, keeping the best third at each rung."""
    first = max(1, train.eval_every)
    if spec.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=first + 1)
    if spec.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=first, max_resource=max(first + 1, train.steps),
                                              reduction_factor=3)
    if spec.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=first, reduction_factor=3)
    return optuna.pruners.NopPruner()


def distributions(dims: list[Dimension], grid: bool) -> dict[str, Any]:
    """Optuna's distribution of each dimension, by setting path (a grid sweep's are its grid values)."""
    optuna = load_optuna()
    d = optuna.distributions
    out: dict[str, Any] = {}
    for dim in dims:
        if grid or not dim.is_range:
            out[dim.path] = d.CategoricalDistribution(list(dim.grid()))
        elif dim.setting.kind == "int":
            out[dim.path] = d.IntDistribution(int(dim.low), int(dim.high), log=dim.log)
        else:
            out[dim.path] = d.FloatDistribution(dim.low, dim.high, log=dim.log)
    return out


def grid_size(dims: list[Dimension]) -> int:
    size = 1
    for dim in dims:
        size *= len(dim.grid())
    return size


# --- the trials by state ------------------------------------------------------------------------------------------

def trials_in(study: optuna.Study, *states: str) -> list[optuna.trial.FrozenTrial]:
    """The study's trials in these states (COMPLETE, PRUNED, FAIL, RUNNING, WAITING), by number."""
    optuna = load_optuna()
    wanted = tuple(getattr(optuna.trial.TrialState, s) for s in states)
    return sorted(study.get_trials(deepcopy=False, states=wanted), key=lambda t: t.number)


def judged(study: optuna.Study) -> int:
    """Trials with a verdict: complete, pruned or failed."""
    return len(trials_in(study, "COMPLETE", "PRUNED", "FAIL"))


def take_over(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
    """A live handle on a trial left RUNNING by a process that is gone (killed, stopped): it reports and is told as
    if this process had asked for it. (Optuna's own Trial constructor, with the trial's storage id.)"""
    optuna = load_optuna()
    return optuna.trial.Trial(study, frozen._trial_id)


def tell(study: optuna.Study, trial: optuna.Trial, state: str, value: float | None = None) -> None:
    optuna = load_optuna()
    if state == "COMPLETE":
        study.tell(trial, value)
    else:
        study.tell(trial, state=getattr(optuna.trial.TrialState, state))


@contextlib.contextmanager
def sweep_lock(sweep_dir: Path) -> Iterator[None]:
    """Held while this process runs the sweep; UserError when another process holds it."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(Path(sweep_dir) / LOCK_FILE), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(f"the sweep in {sweep_dir} is running in another process: stop it there first (or wait for "
                        "it)") from None
    except OSError as exc:
        raise UserError(f"cannot write in the sweep folder {sweep_dir}: {exc.strerror or exc}; copy it somewhere you "
                        "can write and resume it there") from None
    try:
        yield
    finally:
        lock.release()
