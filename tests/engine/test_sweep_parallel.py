"""Several trials at once (engine/sweep/parallel.py): never more than fit (cores, the memory estimate, one per GPU), and
two trials at once on a 2-core machine split its cores (one torch thread each) instead of oversubscribing it."""

from __future__ import annotations

import pytest
from sweep_cases import base_config, new_sweep, of_type, run_to_end

from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep.parallel import heaviest_memory, plan_slots
from desktop_app.engine.sweep.space import parse_space
from desktop_app.engine.sweep_folder import trial_dir

optuna = pytest.importorskip("optuna", reason="sweeps need the optional sweep extra: pip install -e .[sweep]")
GIB = 2**30


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    return base_config(tmp_path_factory.mktemp("par"), steps=8)


def test_trials_at_once_are_never_more_than_fit(config):
    dims = parse_space(["lr=1e-4..1e-2:log", "batch_size=4,8,64"], config)
    need = heaviest_memory(config, dims)
    assert need > heaviest_memory(config, parse_space(["lr=1e-4..1e-2:log"], config))  # batch 64 is the heaviest
    auto = plan_slots(0, config, dims, cores=2, free=64 * GIB, gpus=0)
    assert (auto.n, auto.threads) == (2, 1) and "1 CPU thread(s) each (2 cores" in auto.reason
    many = plan_slots(8, config, dims, cores=2, free=64 * GIB, gpus=0)
    assert many.n == 2 and "8 asked: more than the cores" in many.reason
    tight = plan_slots(4, config, dims, cores=8, free=int(need * 2.5), gpus=0)
    assert (tight.n, tight.threads) == (2, 4) and "more than fit in memory" in tight.reason
    assert plan_slots(4, config, dims, cores=8, free=need // 2, gpus=0).n == 1  # one trial always runs
    gpus = plan_slots(0, config, dims, cores=2, free=GIB, gpus=3)
    assert (gpus.n, gpus.gpus) == (3, (0, 1, 2))
    on_cpu = RunConfig.from_dict({**config.to_dict(), "train": {**config.train, "device": "cpu"}})
    assert plan_slots(0, on_cpu, dims, cores=2, free=64 * GIB).gpus == ()


def test_two_trials_at_once_split_this_machines_cores(config, tmp_path, monkeypatch):
    import desktop_app.engine.sweep.parallel as parallel

    monkeypatch.setattr(parallel, "cpu_cores", lambda: 2)  # this machine has 2; the test holds on any
    events = run_to_end(new_sweep(config, tmp_path / "sw", vary=["lr=1e-3..3e-2:log"], trials=2, parallel=0,
                                  pruner="none"))
    assert events[-1].reason == "completed" and events[-1].result["complete"] == 2, events[-1]
    started = of_type(events, "sweep_start")[0]
    assert (started.parallel, started.threads) == (2, 1)
    kinds = [(e.type, getattr(e, "number", None)) for e in events]
    assert kinds.index(("trial_start", 1)) < kinds.index(("trial_end", 0))  # both trained at the same time
    for number in (0, 1):
        run = trial_dir(tmp_path / "sw", number)
        assert RunConfig.load(run / "run.json").train["threads"] == 1
        notes = [r["message"] for r in read_metrics(run) if r.get("type") == "log"]
        assert any("1 CPU thread(s) as configured" in n for n in notes), notes
