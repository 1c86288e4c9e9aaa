"""The complete CPU demonstration of self-play: seed corpus -> tokenizer + dataset -> pretrain a tiny model
-> Absolute Zero self-play on the mini world, with every curve live, within a time budget.

`run_demo` is a generator of the same events as training (the CLI prints them, the window plots them),
plus Log lines per phase, and ends with Finished(result={"before": rates, "after": rates, ...}) where the
rates are the held-out solve rates per task type of the pretrained model and of the self-played one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Event, Finished, Log, Progress
from desktop_app.engine.tasks.base import TASK_TYPES

DEMO_WORLD = {"depth": 2, "references": 2}
DEMO_SELFPLAY = {"world": "mini", "world_options": DEMO_WORLD, "proposals_per_type": 2, "solver_tasks_per_type": 6,
                 "solver_samples": 4, "max_new_tokens": 40, "heldout_per_type": 48, "seed_tasks_per_type": 64}


def _timed(events: Iterator[Event], controls: Controls, deadline: float, outer: Controls) -> Iterator[Event]:
    """Pass events on; ask the run to stop (it saves first) once the deadline passes or the user stops."""
    for event in events:
        if time.monotonic() > deadline or outer.stop.is_set():
            controls.stop.set()
        if outer.pause.is_set():
            controls.pause.set()
        elif controls.pause.is_set():
            controls.pause.clear()
        yield event


def run_demo(out_dir: str | Path, *, minutes: float = 15.0, seed: int = 0, corpus_tasks: int = 12000,
             pretrain_share: float = 0.5, controls: Controls | None = None,
             selfplay_options: dict[str, Any] | None = None, pretrain_steps: int = 100_000,
             selfplay_steps: int = 100_000, eval_every: int = 10,
             train_overrides: dict[str, Any] | None = None) -> Iterator[Event]:
    """The demo within `minutes` (pretraining gets `pretrain_share` of it); `pretrain_steps` and
    `selfplay_steps` cap the phases by steps instead (tests use them for a seeded, time-independent run)."""
    from desktop_app.engine.data.prepare import prepare_dataset
    from desktop_app.engine.method_options import SelfPlayOptions
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.objectives.selfplay import SelfPlayObjective, heldout_solve_rates, heldout_tasks
    from desktop_app.engine.selfplay.rollout import TextCodec
    from desktop_app.engine.specs import DataSpec, RunConfig, TrainSpec
    from desktop_app.engine.tasks import get_world
    from desktop_app.engine.train.loop import train
    from desktop_app.engine.train.setup import config_from_preset

    controls = controls or Controls()
    out = Path(out_dir).expanduser()
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: choose a new folder for the demo")
    if minutes <= 0.5:
        raise UserError("give the demo at least a minute (--minutes)")
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    options = SelfPlayOptions.from_dict({**DEMO_SELFPLAY, **(selfplay_options or {})}).check()
    world = get_world("mini", **options.world_options)

    yield Log("info", f"1/4 seed corpus: {corpus_tasks} mini tasks with answers, and propose examples")
    corpus = out / "corpus"
    corpus.mkdir()
    shards = 8  # several files: the dataset's validation split takes whole documents from all of them
    for i in range(shards):
        if controls.stop.is_set():
            yield Finished("stopped", message="stopped while writing the seed corpus")
            return
        yield Progress("seed corpus", i, shards, "files")
        world.write_seed_corpus(corpus / f"mini-{i}.txt", corpus_tasks // shards, seed * 100 + i, TASK_TYPES,
                                proposals=True)

    yield Log("info", "2/4 tokenizer and dataset (a small character-level BPE: digits stay digits)")
    spec = DataSpec(tokenizer="bpe", vocab_size=160, context_length=256, val_fraction=0.02, seed=seed)
    for event in prepare_dataset([corpus], out / "dataset", spec, controls):
        yield event
        if isinstance(event, Finished) and event.reason != "completed":
            return

    budget = minutes * 60.0
    pretrain_deadline = start + budget * pretrain_share
    yield Log("info", f"3/4 pretraining the tiny preset for about {budget * pretrain_share / 60:.1f} minutes")
    config, notes = config_from_preset(out / "dataset", "tiny", seed=seed, steps=pretrain_steps, batch_size=32,
                                       lr=3e-3, warmup_steps=50, eval_every=200, save_every=200, sample_tokens=0,
                                       early_stopping_patience=0, **(train_overrides or {}))
    for note in notes:
        yield Log("info", note)
    inner = Controls()
    for event in _timed(train(config, out / "pretrain", inner), inner, pretrain_deadline, controls):
        yield event
    if controls.stop.is_set():
        yield Finished("stopped", message="stopped during pretraining")
        return

    loaded = load_model(out / "pretrain", device="cpu")
    text = TextCodec(loaded.tokenizer)
    heldout = {t: heldout_tasks(world, t, options.heldout_per_type, 9001) for t in TASK_TYPES}
    eos = {loaded.tokenizer.eos_token_id} if loaded.tokenizer.eos_token_id is not None else set()
    before = heldout_solve_rates(loaded.model, text, world, heldout, max_len=256, eos=eos,
                                 max_new_tokens=options.max_new_tokens)
    yield Log("info", "held-out solve rate before self-play: " + ", ".join(
        f"{t} {before[f'heldout_solve_rate/{t}']:.2f}" for t in TASK_TYPES))
    del loaded

    yield Log("info", f"4/4 self-play (Absolute Zero on the mini world) for the remaining "
              f"{max(0.0, start + budget - time.monotonic()) / 60:.1f} minutes")
    train_spec = TrainSpec(steps=selfplay_steps, batch_size=64, micro_batch_size=32, lr=2e-4, warmup_steps=5,
                           schedule="constant", eval_every=eval_every, save_every=eval_every, sample_tokens=0,
                           log_every=1, early_stopping_patience=0, grad_clip=1.0,
                           **{"threads": 1, **(train_overrides or {})})
    sp_config = RunConfig(base_model=str(out / "pretrain"), dataset=str(out / "dataset"), train=train_spec.to_dict(),
                          seed=seed)
    objective = SelfPlayObjective(options.replace(heldout_seed=9001))
    inner = Controls()
    last_eval: dict[str, float] = {}
    best_eval: dict[str, float] = {}
    try:
        for event in _timed(train(sp_config, out / "selfplay", inner, objective=objective), inner,
                            start + budget, controls):
            if getattr(event, "type", "") == "eval":
                last_eval = dict(event.metrics)
                if last_eval.get("val_loss", 1.0) < best_eval.get("val_loss", 1.0):
                    best_eval = dict(last_eval)  # the best checkpoint is kept: report its rates
            yield event
    finally:
        objective.close()
    after = {k: v for k, v in (best_eval or last_eval).items() if k.startswith("heldout_solve_rate")}
    summary = {"before": {t: before[f"heldout_solve_rate/{t}"] for t in TASK_TYPES},
               "after": {t: after.get(f"heldout_solve_rate/{t}", float("nan")) for t in TASK_TYPES},
               "last": {t: last_eval.get(f"heldout_solve_rate/{t}", float("nan")) for t in TASK_TYPES},
               "minutes": (time.monotonic() - start) / 60.0, "pretrain_run": str(out / "pretrain"),
               "selfplay_run": str(out / "selfplay")}
    yield Log("info", "held-out solve rate after self-play (best checkpoint): " + ", ".join(
        f"{t} {summary['after'][t]:.2f}" for t in TASK_TYPES))
    yield Finished("completed", message="self-play demo finished", result=summary)
