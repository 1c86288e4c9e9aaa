"""Distributed training pieces that need no second process: row sharding of batches, the checks that refuse
what cannot run on several processes, the failure message, auto micro-batch, tied weights in a gathered state."""

from __future__ import annotations

import os

import pytest
import torch
from train_helpers import make_dataset, tiny_config

from desktop_app.engine.data.batches import WindowBatchSource
from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import DistributedSpec, RunConfig, SpecError
from desktop_app.engine.train import auto_batch
from desktop_app.engine.train.distributed import DistContext, launched_world_size, lost_peer_message
from desktop_app.engine.train.setup import check_optimizer_state
from desktop_app.engine.train.sync import check_run


def _fake(world: int = 2, rank: int = 0, strategy: str = "ddp") -> DistContext:
    return DistContext(rank=rank, world=world, local_rank=rank, local_world=world, backend="gloo",
                       spec=DistributedSpec(strategy=strategy), owns_group=False)


def test_each_process_reads_its_rows_of_the_same_order(tmp_path):
    store = TokenStore(make_dataset(tmp_path / "ds"))
    whole = WindowBatchSource(store, seed=3)
    ranks = [WindowBatchSource(store, seed=3) for _ in range(2)]
    for r, source in enumerate(ranks):
        source.set_shard(r, 2)
    for _ in range(5):
        batch, position = whole.take(8)
        parts = [source.take(8) for source in ranks]
        assert all(p[1] == position for p in parts)  # the position (what checkpoints keep) does not depend on N
        assert torch.equal(torch.cat([p[0] for p in parts]), batch)
    assert all(s.state_dict() == whole.state_dict() for s in ranks)


def test_distributed_spec_defaults_and_refusals():
    assert RunConfig.from_dict({"distributed": {}}).distributed_spec().strategy == "ddp"
    with pytest.raises(SpecError, match="unknown DistributedSpec field"):
        RunConfig.from_dict({"distributed": {"stratgy": "fsdp"}}).distributed_spec()
    problems = DistributedSpec(strategy="zero3", backend="mpi", timeout_s=1).validate()
    assert any("strategy" in p for p in problems) and any("backend" in p for p in problems)
    assert any("timeout_s" in p for p in problems)


@pytest.mark.parametrize(("changes", "strategy", "message"), [
    ({"batch_size": 9}, "ddp", "cannot be split over 2 processes"),
    ({"optimizer": "adamw8bit"}, "fsdp", "cannot update FSDP's sharded parameters"),
    ({"nonfinite_policy": "rollback"}, "fsdp", "rollback"),
])
def test_what_cannot_run_on_several_processes_is_refused_clearly(tmp_path, changes, strategy, message):
    config = tiny_config(make_dataset(tmp_path / "ds"), **changes)
    with pytest.raises(UserError, match=message):
        check_run(_fake(strategy=strategy), config, config.train_spec())
    check_run(None, config, config.train_spec())  # one process: fine


def test_rollout_methods_run_on_several_processes_with_ddp_not_fsdp():
    config = RunConfig(base_model="/base", objective="selfplay", train={"batch_size": 9})
    check_run(_fake(), config, config.train_spec())  # its rounds are shared out by episode: batch_size is not split
    with pytest.raises(UserError, match=r"use distributed\.strategy ddp"):
        check_run(_fake(strategy="fsdp"), config, config.train_spec())


def test_optimizer_state_of_another_optimizer_is_refused_on_resume():
    eight_bit = {"state.0.state1": torch.zeros(1), "state.0.__bnb_optimizer_quant_state__.qmap1": torch.zeros(1)}
    adamw = {"state.0.exp_avg": torch.zeros(1), "state.0.exp_avg_sq": torch.zeros(1)}
    check_optimizer_state(eight_bit, "adamw8bit")
    check_optimizer_state(adamw, "adamw")
    with pytest.raises(UserError, match="8-bit AdamW state"):
        check_optimizer_state(eight_bit, "adamw")
    with pytest.raises(UserError, match="holds AdamW state"):
        check_optimizer_state(adamw, "adamw8bit")


def test_a_lost_peer_says_what_happened_and_what_to_do():
    exc = RuntimeError("[/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:1. This is "
                       "typically caused by a remote worker crashing.")
    text = lost_peer_message(0, "exchanging step results", exc)
    assert "Connection closed by peer [127.0.0.1]:1" in text and "pair.cc" not in text
    assert "died, was killed" in text and "--resume" in text


def test_single_process_without_torchrun(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert launched_world_size() == 1
    assert DistContext.start(DistributedSpec(), torch.device("cpu")) is None
    monkeypatch.setenv("WORLD_SIZE", "x")
    assert launched_world_size() == 1


def test_pipeline_refuses_torchrun(monkeypatch, tmp_path, capsys):
    from desktop_app.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    (tmp_path / "p.json").write_text("{}")
    assert main(["train", "--pipeline", str(tmp_path / "p.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("[process 1] error: a pipeline runs in one process")
    assert not (tmp_path / "o").exists()


# --- auto micro-batch ---------------------------------------------------------------------------------------

def test_divisors_and_search_find_the_largest_fitting_divisor():
    assert auto_batch.divisors(12) == [12, 6, 4, 3, 2, 1]
    for limit in range(1, 40):
        tried: list[int] = []

        def fits(m: int, limit: int = limit, tried: list[int] = tried) -> bool:
            tried.append(m)
            return m <= limit

        best = auto_batch.largest_fitting(24, fits)
        assert best == max(d for d in auto_batch.divisors(24) if d <= limit)
        assert len(tried) <= 4  # binary search over 8 divisors


def test_search_reports_what_it_tried():
    micro, why = auto_batch.search_micro_batch(16, lambda m: m <= 5)
    assert micro == 4 and "16 out of memory" in why and "4 fits" in why


def test_cpu_memory_model_keeps_the_batch_and_warns_when_nothing_fits():
    gib = 1 << 30
    micro, why = auto_batch.cpu_micro_batch(32, fixed_bytes=1 * gib, bytes_per_row=0.5 * gib, available_bytes=10 * gib)
    assert micro == 8 and 32 % micro == 0 and "10.0 GiB free" in why  # 6 GiB budget - 1 GiB fixed -> 10 rows -> 8
    micro, why = auto_batch.cpu_micro_batch(32, fixed_bytes=1 * gib, bytes_per_row=0.5 * gib,
                                            available_bytes=10 * gib, processes=2)
    assert micro == 4 and "shared by 2 processes" in why
    micro, why = auto_batch.cpu_micro_batch(8, fixed_bytes=5 * gib, bytes_per_row=gib, available_bytes=gib)
    assert micro == 1 and "may not fit" in why


def test_training_with_auto_micro_batch_logs_its_choice(tmp_path):
    from desktop_app.engine.train.loop import train

    config = tiny_config(make_dataset(tmp_path / "ds"), steps=2, batch_size=8, auto_micro_batch=True)
    events = list(train(config, tmp_path / "run"))
    notes = [e.message for e in events if e.type == "log" and "auto micro-batch" in e.message]
    assert notes and notes[0].startswith("auto micro-batch 8 of 8")
    assert events[-1].reason == "completed"


def test_first_event_says_how_many_processes_train(tmp_path):
    from desktop_app.engine.train.loop import train

    config = tiny_config(make_dataset(tmp_path / "ds"), steps=1)
    first = next(iter(train(config, tmp_path / "run")))
    assert first.to_dict() == {"type": "start", "world_size": 1, "strategy": "single", "device": "cpu",
                               "start_step": 0}


def test_gathered_state_drops_tied_copies_as_the_model_does():
    from desktop_app.engine.model.architecture import build_model
    from desktop_app.engine.specs import ModelSpec
    from desktop_app.engine.train.checkpoints import model_state_for_saving

    model = build_model(ModelSpec("llama", 64, 32, 1, 2, 2, 64, 16, tie_embeddings=True), seed=0)
    own = model_state_for_saving(model)
    gathered = {k: v.clone() for k, v in model.state_dict().items()}  # separate copies, as a gather returns them
    assert model_state_for_saving(model, gathered).keys() == own.keys()
    assert "lm_head.weight" not in own


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_signals_set_the_controls():
    import signal

    from desktop_app.cli.reporting import StopSignals
    from desktop_app.engine.events import Controls

    controls = Controls()
    with StopSignals(controls):
        os.kill(os.getpid(), signal.SIGUSR2)
        assert controls.pause.is_set()
        os.kill(os.getpid(), signal.SIGUSR2)
        assert not controls.pause.is_set()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert controls.save_now.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert controls.stop.is_set()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
