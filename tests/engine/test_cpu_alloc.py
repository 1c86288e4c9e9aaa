"""glibc allocator tuning used by CPU training: applied during a run, undone after, no effect on numbers."""

from __future__ import annotations

import sys

import pytest
import torch
from train_helpers import final_weights, make_dataset, tiny_config

from desktop_app.engine.train import cpu_alloc
from desktop_app.engine.train.loop import train

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")


@linux_only
def test_tune_and_restore_nest_and_balance():
    assert cpu_alloc._state["tuned"] == 0
    assert cpu_alloc.tune_allocator() is True
    assert cpu_alloc.tune_allocator() is True  # nested (e.g. two runs in one process)
    assert cpu_alloc._state["tuned"] == 2
    cpu_alloc.restore_allocator()
    assert cpu_alloc._state["tuned"] == 1
    cpu_alloc.restore_allocator()
    assert cpu_alloc._state["tuned"] == 0
    cpu_alloc.restore_allocator()  # an extra restore is harmless
    assert cpu_alloc._state["tuned"] == 0


def test_not_applied_off_linux(monkeypatch):
    monkeypatch.setattr(cpu_alloc.sys, "platform", "win32")
    monkeypatch.setitem(cpu_alloc._state, "libc", None)
    assert cpu_alloc.tune_allocator() is False
    cpu_alloc.restore_allocator()
    assert cpu_alloc._state["tuned"] == 0


@linux_only
def test_training_tunes_then_restores_and_numbers_do_not_change(tmp_path, monkeypatch):
    data = make_dataset(tmp_path / "ds")
    gen = train(tiny_config(data, steps=3, threads=1), tmp_path / "run")
    events = []
    for event in gen:
        events.append(event)
        if event.type == "step":
            break
    assert cpu_alloc._state["tuned"] == 1
    assert any(e.type == "log" and "allocator" in e.message for e in events)
    list(gen)
    assert cpu_alloc._state["tuned"] == 0
    tuned = final_weights(tmp_path / "run")

    monkeypatch.setattr(cpu_alloc, "tune_allocator", lambda: False)
    monkeypatch.setattr("desktop_app.engine.train.loop.tune_allocator", lambda: False)
    list(train(tiny_config(data, steps=3, threads=1), tmp_path / "run2"))
    plain = final_weights(tmp_path / "run2")
    assert tuned.keys() == plain.keys()
    assert all(torch.equal(tuned[k], plain[k]) for k in tuned)
