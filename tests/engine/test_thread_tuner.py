"""ThreadTuner: picks the faster thread count from step timings, backs off, reacts to a busy machine."""

from __future__ import annotations

import itertools
import time

import torch

from desktop_app.engine.generate.thread_tuner import ThreadTuner, TunerTiming


def _drive(tuner: ThreadTuner, seconds_for: dict[int, float], steps: int) -> list[int]:
    """Run `steps` steps whose time depends only on the thread count; returns the count of each step."""
    used = []
    for _ in range(steps):
        used.append(tuner.threads)
        tuner.record(seconds_for[tuner.threads])
    return used


def test_switches_to_the_faster_setting_after_a_short_probe():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=2, probe=3, interval=8))
    used = _drive(tuner, {1: 0.010, 2: 0.006}, 20)
    assert used[:4] == [1, 1, 1, 1]  # 2 warm-up steps, then 2 timed steps on the starting setting
    assert used[4:7] == [2, 2, 2]  # the probe
    assert used[7:15] == [2] * 8  # kept until the next probe is due
    assert used[15:18] == [1, 1, 1] and used[18:] == [2, 2]  # which 1 thread loses again
    assert tuner.current == 2 and tuner.switches == 1


def test_keeps_the_start_when_the_other_is_slower_and_backs_off():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=0, probe=3, interval=8, max_interval=32))
    used = _drive(tuner, {1: 0.010, 2: 0.100}, 200)
    assert tuner.current == 1 and tuner.switches == 0
    probes = [i for i in range(1, len(used)) if used[i] == 2 and used[i - 1] == 1]
    # A far slower probe step ends its probe at once, and the gaps between probes grow to the cap.
    assert all(used[i + 1] == 1 for i in probes if i + 1 < len(used))
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert gaps == sorted(gaps) and gaps[-1] >= 32


def test_a_jump_in_step_time_triggers_a_new_probe():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=0, probe=3, interval=8))
    _drive(tuner, {1: 0.010, 2: 0.006}, 12)
    assert tuner.current == 2
    # Another thread gets busy: two threads collapse; the tuner must go back to one within a few steps.
    used = _drive(tuner, {1: 0.012, 2: 0.120}, 10)
    assert tuner.current == 1
    assert used[-3:] == [1, 1, 1]


def test_resume_starts_on_fewer_threads_and_reprobes_more_at_once():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=0, probe=2, interval=8))
    _drive(tuner, {1: 0.010, 2: 0.005}, 10)
    assert tuner.current == 2
    again = ThreadTuner.resume(tuner.state(), TunerTiming(warm=0, probe=2, interval=8))
    assert again.threads == 1  # never starts on the setting that collapses on a busy machine
    used = _drive(again, {1: 0.010, 2: 0.005}, 6)
    assert 2 in used[:4] and again.current == 2


def test_resume_after_the_fewer_won_keeps_the_back_off():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=0, probe=2, interval=8))
    _drive(tuner, {1: 0.010, 2: 0.050}, 40)
    state = tuner.state()
    again = ThreadTuner.resume(state, TunerTiming(warm=0, probe=2, interval=8))
    assert again.threads == 1 and again.interval == state["interval"] >= 16


def test_apply_sets_torch_threads_only_on_change():
    before = torch.get_num_threads()
    try:
        tuner = ThreadTuner(1, 2)
        tuner.apply()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def _sleepy_check(seconds_for: dict[int, float]):
    return lambda: time.sleep(seconds_for[torch.get_num_threads()])


def test_a_quick_check_that_favours_fewer_threads_skips_the_real_probe():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=0, probe=3, interval=8), quick_check=_sleepy_check({1: 0.001, 2: 0.003}))
    before = torch.get_num_threads()
    try:
        used = _drive(tuner, {1: 0.010, 2: 0.001}, 40)
    finally:
        torch.set_num_threads(before)
    assert set(used) == {1}  # the real steps never ran on 2 threads, although they would have been faster
    assert tuner.interval == 8  # a lost check is cheap: checked again after the base interval


def test_a_quick_check_that_favours_more_threads_lets_the_probe_run():
    tuner = ThreadTuner(1, 2, TunerTiming(warm=0, probe=3, interval=8), quick_check=_sleepy_check({1: 0.003, 2: 0.001}))
    before = torch.get_num_threads()
    try:
        _drive(tuner, {1: 0.010, 2: 0.005}, 12)
    finally:
        torch.set_num_threads(before)
    assert tuner.current == 2
