"""The one training loop. Every method is an objective (objectives/base.py) plugged into it.

`train(config, run_dir, controls)` is a generator of events (see events.py). Every yield is a progress report and a
cancel point; the GUI iterates it in a worker thread, the CLI with a progress bar. The loop owns optimisation,
precision, accumulation, clipping, failure handling, controls, metrics and checkpoints; the objective owns batches,
loss and evaluation. The setup (setup.py, then build.py for the parts) runs first; then each step is: take the batch,
forward/backward over micro-batches, clip, (sync processes), check finiteness, step the optimizer, log, evaluate, save.

Cost notes (why the hot path looks the way it does): per optimizer step there is exactly one device->host sync
(loss and grad norm read together, needed anyway to keep non-finite values away from the optimizer); per
micro-step none. Metrics lines are written only on logged steps.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from desktop_app.engine import run_folder
from desktop_app.engine.devices import (
    PrecisionChoice,
    apply_threads,
    choose_precision,
    choose_threads,
    cpu_cores,
    free_device_memory,
    is_out_of_memory,
    resolve_device,
)
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import (
    Controls,
    EvalResult,
    Event,
    Finished,
    History,
    Log,
    Progress,
    RunFolder,
    Sample,
    Started,
    StepMetrics,
)
from desktop_app.engine.methods import method_of
from desktop_app.engine.objectives.base import Objective
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train import distributed as dist_mod
from desktop_app.engine.train import figures, memory_faults, saving, setup
from desktop_app.engine.train.build import Found, build_parts
from desktop_app.engine.train.cpu_alloc import restore_allocator, tune_allocator
from desktop_app.engine.train.data_files import DataFiles
from desktop_app.engine.train.distributed import DistContext, PeerLostError
from desktop_app.engine.train.optim import lr_at, set_lr
from desktop_app.engine.train.run import Run
from desktop_app.engine.train.setup import Parts
from desktop_app.engine.train.sync import SyncedControls, check_run, rank_device, rows_for_rank

ROLLBACK_LR_FACTOR = 0.5


def next_micro_batch(micro: int, batch: int) -> int | None:
    """After an out-of-memory error: the next smaller micro-batch that divides the batch (None: at 1 already).

    Halving keeps the effective batch (micro x accumulation = batch) and so the training maths.
    """
    m = micro // 2
    while m >= 1 and batch % m:
        m -= 1
    return m if 1 <= m < micro else None


def train(config: RunConfig, run_dir: str | Path, controls: Controls | None = None, *, resume: bool = False,
          accept_config_change: bool = False, objective: Objective | None = None,
          interactive: bool = False) -> Iterator[Event]:
    """Train (or resume) the run described by `config` in `run_dir`, yielding events.

    resume: continue from the newest committed checkpoint that verifies (newer damaged ones are
    reported and skipped). A config different from the checkpoint's is refused with a diff unless
    `accept_config_change`. `objective` overrides the config's objective (tests, future methods);
    `interactive` tells the thread policy that a window shares the CPU, and asks for Progress events for the window:
    the setup's phases (before Started, which stays the first event of the CLI and metrics.jsonl) and the first step.
    Setup problems raise UserError; problems during training end with Finished(reason="failed").
    """
    config.check()
    previous_threads = torch.get_num_threads()
    run = Run(config, Path(run_dir), controls or Controls(), config.train_spec(), objective, interactive)
    try:
        memory_faults.refuse_before_start(run.config)  # too big for this device whatever is freed: before allocating
        notes = yield from _start(run, resume, accept_config_change)
        yield from _run(run, notes)
    except Exception as exc:  # out of memory (setup, a step, an evaluation): said with the estimate; checkpoints kept
        if not memory_faults.is_out_of_memory(exc):
            raise
        yield from memory_faults.report_out_of_memory(run, exc)
    finally:
        if run.objective is not None:  # its workers (self-play's sandbox executor), whatever the ending
            run.objective.close()
        if run.metrics is not None:
            run.metrics.close()
        apply_threads(previous_threads)
        if run.flushed_denormals:
            torch.set_flush_denormal(False)  # the process default (torch has no getter to save it)
        if run.tuned_allocator:
            restore_allocator()
        if run.dist is not None:
            run.dist.close(clean=run.finished_cleanly)


# --- setup ------------------------------------------------------------------------------------------------------

def _phase(run: Run, what: str) -> Iterator[Event]:
    """A phase of the setup starts (a window shows it while the phase runs; nothing for the CLI)."""
    if run.interactive:
        yield Progress("setup", 0, 0, "", what)


def _start(run: Run, resume: bool, accept_config_change: bool) -> Generator[Event, None, list[Event]]:
    """Processes, base, checkpoint, run folder, threads and precision, then the parts; returns the setup's notes
    (emitted right after Started), the run's folder and a resumed run's history first. Yields only the phases."""
    spec, notes = run.spec, []
    # Several processes (torchrun): join them first, on this process's own GPU.
    device = resolve_device(spec.device)
    if dist_mod.launched_world_size() > 1:
        device = rank_device(device)
        run.dist = DistContext.start(run.config.distributed_spec(), device)
        check_run(run.dist, run.config, spec)
        notes.append(Log("info", run.dist.describe()))
    run.sync = SyncedControls(run.controls, run.dist)
    # The base model (its weights' folder and checksum: run.json records both, so a resume refuses a changed one),
    # and the checkpoint (if any) the run continues from.
    base_info = None
    if run.config.base_model:
        yield from _phase(run, "checking the base model's weights")
        run.config, base_info = setup.resolve_base(run.config, resume)
    if resume:
        yield from _phase(run, "reading the checkpoint")
    loaded, found = setup.choose_checkpoint(run.run_dir, run.config, resume, accept_config_change)
    data = DataFiles.check(run.run_dir, run.config, resumed=loaded is not None, accept_change=accept_config_change)
    notes += found + data.notes
    # A view gets the run's folder, and a resumed run's curve so far, read before metrics.jsonl is cut back to
    # what the checkpoint had seen. Only process 0 writes the run folder.
    if run.is_main:
        view: list[Event] = [RunFolder(str(run.run_dir), method_of(run.config).key, resumed=loaded is not None)]
        if loaded is not None:
            offset = int(loaded.trainer_state.get("metrics_offset", 0))
            view.append(History(str(run.run_dir), run_folder.read_metrics(run.run_dir, upto_bytes=offset)))
        notes[:0] = view
        run.metrics = setup.open_run_folder(run.run_dir, run.config, loaded, notes)
        data.record(run.run_dir)
    precision, found = _tune_process(run, device, loaded)
    notes += found
    yield from _phase(run, "loading the base model and preparing the data" if base_info is not None else
                      "building the model and preparing the data")
    notes += build_parts(run, Found(device, precision, base_info, loaded))
    return notes


def _tune_process(run: Run, device: torch.device,
                  loaded: ckpt.LoadedCheckpoint | None) -> tuple[PrecisionChoice, list[Event]]:
    """Threads and precision; on the CPU, denormals flushed and the allocator tuned (undone in train())."""
    spec, notes = run.spec, []
    local = run.dist.local_world if run.dist is not None else 1  # processes on one machine share its cores
    threads, why_threads = choose_threads(spec.threads, interactive=run.interactive, cores=max(1, cpu_cores() // local))
    apply_threads(threads)
    precision = choose_precision(device, spec.precision)
    shared = f" ({local} processes share this machine's cores)" if local > 1 and device.type == "cpu" else ""
    notes.append(Log("info", f"device {device.type}; {why_threads}{shared}"))
    if device.type == "cpu":
        notes += setup.thread_warnings(spec.threads, threads, loaded)
        # Many epochs over little data drive gradients and Adam's second moments into denormal floats, which x86
        # computes far slower (seen in the benchmark: a 12M model trained ~12 times on one batch slowed down ~6x
        # until denormals were flushed). Flushing them to zero costs nothing in accuracy.
        run.flushed_denormals = bool(torch.set_flush_denormal(True))
        # Reuse warm heap memory for each step's large tensors instead of fresh mmaps (see cpu_alloc).
        run.tuned_allocator = tune_allocator()
        if run.tuned_allocator:
            notes.append(Log("info", "CPU allocator tuned for training: large buffers are reused between steps"))
    notes.append(Log("warning" if precision.warning else "info", f"precision {precision.name}: {precision.reason}"))
    return precision, notes


# --- the steps --------------------------------------------------------------------------------------------------

def _run(run: Run, notes: list[Event]) -> Iterator[Event]:
    """Started and the setup's notes, then steps until the run completes, stops, fails or stops early."""
    dist, parts = run.dist, run.parts
    assert parts is not None
    yield run.emit(Started(world_size=dist.world if dist is not None else 1,
                           strategy=dist.spec.strategy if dist is not None else "single",
                           device=str(parts.ctx.device), start_step=run.state.step))
    for event in notes:
        yield run.emit(event)
    try:
        outcome = yield from _steps(run)
        if outcome in ("failed", "early_stopped"):  # its Finished was emitted
            run.finished_cleanly = True
            return
        # loop left: completed (all steps, or the time budget), or stopped between steps
        if run.state.step != run.last_saved_step and run.state.step > 0:
            yield from saving.save(run)
        if outcome == "time_budget":
            minutes = run.spec.time_budget_s / 60
            finished = Finished("completed", step=run.state.step, message=f"trained {run.state.step} steps in the "
                                f"time limit of {minutes:.3g} min", result=run.result())
        elif run.state.step >= run.spec.steps:
            finished = Finished("completed", step=run.state.step, message=f"trained {run.state.step} steps",
                                result=run.result())
        else:
            finished = Finished("stopped", step=run.state.step, message=f"stopped at step {run.state.step}",
                                result=run.result())
        yield run.emit(finished)
        run.finished_cleanly = True
    except saving.SaveFailed as exc:
        yield from saving.end_after_failed_save(run, exc)
    except Exception as exc:
        if dist is None or not (isinstance(exc, PeerLostError) or dist_mod.is_communication_error(exc)):
            raise
        if not isinstance(exc, PeerLostError):  # raised inside DDP's backward or an FSDP gather
            exc = PeerLostError(dist_mod.lost_peer_message(dist.rank, f"training step {run.state.step + 1}", exc))
        where = f" ({run.last_checkpoint.name})" if run.last_checkpoint is not None else " (none yet)"
        message = str(exc).replace("The last committed checkpoint", f"The last committed checkpoint{where}", 1)
        yield run.emit(Log("error", message))
        yield run.emit(Finished("failed", step=run.state.step, message=message, result=run.result()))


@dataclass
class _StepNumbers:
    """One step's figures once its gradients are in: loss and gradient norm (read in the step's one sync), the
    objective's metric sums and the tokens it processed (every process's, when several train)."""

    loss: float
    grad_norm: float
    metrics: dict[str, Any]
    tokens: int
    seq_len: float = 0.0  # the length of the sequences trained (figures.mean_length; 0 when unknown)

    @property
    def finite(self) -> bool:
        return math.isfinite(self.loss) and math.isfinite(self.grad_norm)


@dataclass
class _Session:
    """What the step loop keeps across steps: the parameters it clips, the step this session started at, whether this
    process evaluates, the tokens/s and MFU window since the last logged step (evaluating and saving not counted), the
    steps' durations."""

    params: list[torch.nn.Parameter]
    clip: float
    start_step: int
    evaluates: bool
    log_t0: float = field(default_factory=time.perf_counter)
    log_tokens: int = 0
    log_flops: float = 0.0
    clock: figures.StepClock = field(default_factory=figures.StepClock)

    def exclude(self, since: float) -> None:
        """Leave the time since `since` out of tokens/s and MFU (it counts in the ETA as time between steps)."""
        spent = time.perf_counter() - since
        self.log_t0 += spent
        self.clock.add_between(spent)


def _steps(run: Run) -> Generator[Event, None, str | None]:
    """The step loop; returns a reason when it ended the run itself (after emitting its Finished)."""
    spec, parts = run.spec, run.parts
    assert parts is not None and run.sync is not None
    run.session_start, run.paused_s = time.perf_counter(), 0.0
    # FSDP: every process takes part in each forward (evaluation too); DDP: process 0 evaluates alone, unless the
    # objective shares its evaluation out (the rollout methods)
    session = _Session([p for p in parts.model.parameters() if p.requires_grad],
                       spec.grad_clip if spec.grad_clip > 0 else float("inf"), run.state.step,
                       evaluates=run.is_main or (run.dist is not None and (run.dist.fsdp or
                                                                           parts.objective.shares_evaluation)))
    if run.interactive:
        yield figures.first_step(spec, run.state.step)
    while run.state.step < spec.steps:
        yield from _pause_point(run)
        if run.flag("stop"):
            break
        t_step = time.perf_counter()
        step = run.state.step + 1
        batch, position = parts.source.take(spec.batch_size)
        batch = rows_for_rank(run.dist, parts.objective, batch, source_shards=parts.source_shards,
                              batch_size=spec.batch_size)
        numbers = yield from _gradients(run, session, batch, step)
        if not numbers.finite:
            if (yield from _not_finite(run, step, position, numbers)):
                return "failed"
            continue
        lr = _update(run, step)
        session.clock.step_done(time.perf_counter() - t_step)
        run.state.step = step
        run.state.tokens_seen += numbers.tokens
        session.log_tokens += numbers.tokens
        session.log_flops += numbers.tokens * figures.training_flops_per_token(
            parts.ctx.model_spec, numbers.seq_len, adapter=parts.ctx.adapter, fallback=parts.flops_per_token)
        if step % spec.log_every == 0 or step == spec.steps:
            yield run.emit(_step_metrics(run, session, step, lr, numbers))
            yield from run.take_notes()
        early_stop = yield from _evaluate_due(run, session, step)
        yield from _save_due(run, session, step, early_stop)
        if early_stop:
            yield from _stop_early(run, step)
            return "early_stopped"
        if spec.time_budget_s and _clock(run) >= spec.time_budget_s:
            return "time_budget"
    return None


def _pause_point(run: Run) -> Iterator[Event]:
    """Wait here while the run is paused (a stop ends the pause)."""
    assert run.sync is not None
    if run.flag("pause") and not run.flag("stop"):
        yield run.emit(Log("info", f"paused at step {run.state.step}"))
        t = time.perf_counter()
        run.sync.wait_while_paused()
        run.paused_s += time.perf_counter() - t
        if not run.flag("stop"):
            yield run.emit(Log("info", "resumed"))


def _gradients(run: Run, session: _Session, batch: Any, step: int) -> Generator[Event, None, _StepNumbers]:
    """The step's gradients (summed over micro-batches, unscaled, clipped) and its figures, read in one sync."""
    parts, dist = run.parts, run.dist
    assert parts is not None and run.sync is not None
    parts.optimizer.zero_grad(set_to_none=True)
    shapes: list[tuple[int, int]] = []
    loss_sum, metric_sums, step_tokens = yield from _forward_backward(run, batch, step, shapes)
    seq_len = figures.mean_length(shapes)
    if parts.scaler is not None:
        parts.scaler.unscale_(parts.optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(session.params, session.clip)
    if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor; the global norm is its full value
        grad_norm = grad_norm.full_tensor()
    if dist is None:
        loss_value, norm_value = torch.stack([loss_sum.float(), grad_norm.float().to(loss_sum.device)]).tolist()
        return _StepNumbers(loss_value, norm_value, metric_sums, step_tokens, seq_len)
    return _StepNumbers(*run.sync.sync_step(loss_sum, grad_norm, metric_sums, step_tokens), seq_len)


def _not_finite(run: Run, step: int, position: list[int], numbers: _StepNumbers) -> Generator[Event, None, bool]:
    """A non-finite loss or gradient norm: nothing is applied. fp16's overflow only recalibrates the loss scale;
    anything else is skipped or rolled back (_nonfinite). True when too many of them ended the run."""
    parts, spec = run.parts, run.spec
    assert parts is not None
    parts.optimizer.zero_grad(set_to_none=True)
    if parts.scaler is not None and math.isfinite(numbers.loss):
        parts.scaler.update()  # fp16 overflow: normal loss-scale calibration, not a bad batch
        run.state.step = step
        return False
    yield from _nonfinite(run, step, position, numbers.loss, numbers.grad_norm)
    if run.state.nonfinite_count < spec.max_nonfinite:
        return False
    report = "; ".join(f"step {e['step']} batch {e['batch']}" for e in run.state.nonfinite_events)
    message = (f"stopped after {run.state.nonfinite_count} non-finite steps ({report}). Try a lower "
               "learning rate, a longer warm-up or fp32.")
    yield run.emit(Log("error", message))
    yield run.emit(Finished("failed", step=run.state.step, message=message, result=run.result()))
    return True


def _update(run: Run, step: int) -> float:
    """Apply the step's gradients at its learning rate; returns that rate."""
    parts = run.parts
    assert parts is not None
    lr = lr_at(step, run.spec, run.state.lr_scale, _time_share(run))
    set_lr(parts.optimizer, lr)
    if parts.scaler is not None:
        parts.scaler.step(parts.optimizer)
        parts.scaler.update()
    else:
        parts.optimizer.step()
    parts.optimizer.zero_grad(set_to_none=True)
    return lr


def _time_share(run: Run) -> float:
    """How much of a time-limited run's time has passed (0 without a limit). A time-limited run decays over its time
    limit too (when that comes before its last step), from the end of its first step on: that step holds the
    one-off costs (compilation, graph capture: 60% of a 4-minute self-play run on an H100) that would otherwise
    spend the decay before any update."""
    budget = run.spec.time_budget_s
    if not budget:
        return 0.0
    clock = _clock(run)
    if run.state.first_step_s is None:
        run.state.first_step_s = clock
    return (clock - run.state.first_step_s) / max(budget - run.state.first_step_s, 1e-9)


def _step_metrics(run: Run, session: _Session, step: int, lr: float, numbers: _StepNumbers) -> StepMetrics:
    """A logged step's record: loss, rate, speed, MFU, progress, ETA and the objective's metrics; restarts the tokens/s
    window. The ETA is 0 until the session's first few steps tell its pace (figures.StepClock)."""
    spec, parts = run.spec, run.parts
    assert parts is not None
    now = time.perf_counter()
    window = max(now - session.log_t0, 1e-9)
    tps = session.log_tokens / window
    devices = run.dist.world if run.dist is not None else 1  # the tokens are every process's
    mfu = figures.utilisation(session.log_flops, window, parts.peak_flops * devices)
    elapsed = now - run.session_start - run.paused_s
    progress, eta = figures.step_progress(step, spec, session.clock.eta(spec.steps - step), run.elapsed())
    metrics = {"loss": numbers.loss, "lr": lr, "grad_norm": numbers.grad_norm, "tokens_per_s": tps, "mfu": mfu,
               "tokens": run.state.tokens_seen, "epoch": parts.source.epoch_progress, "progress": progress}
    for name, value in numbers.metrics.items():
        metrics[name] = float(value)
    session.log_t0, session.log_tokens, session.log_flops = time.perf_counter(), 0, 0.0
    return StepMetrics(step=step, total_steps=spec.steps, metrics=metrics, elapsed_s=run.state.elapsed_s + elapsed,
                       eta_s=eta)


def _evaluate_due(run: Run, session: _Session, step: int) -> Generator[Event, None, bool]:
    """Evaluate when the schedule says so; returns whether early stopping ends the run (process 0's verdict)."""
    spec, dist = run.spec, run.dist
    if not (spec.eval_every and (step % spec.eval_every == 0 or step == spec.steps)):
        return False
    t_eval = time.perf_counter()
    if session.evaluates:
        yield from _evaluate(run)
    early_stop = bool(spec.early_stopping_patience and run.state.evals_since_best >= spec.early_stopping_patience)
    if dist is not None:  # process 0's verdict (it holds the validation history)
        early_stop = dist.from_main([float(early_stop)])[0] > 0
    session.exclude(t_eval)
    return early_stop


def _save_due(run: Run, session: _Session, step: int, early_stop: bool) -> Iterator[Event]:
    """Save on schedule, when asked (save now, stop), before stopping early and after the last step."""
    spec = run.spec
    assert run.sync is not None
    if (spec.save_every and step % spec.save_every == 0) or run.flag("save_now") or run.flag("stop") \
            or early_stop or step == spec.steps:
        run.sync.clear_save_now()
        t_save = time.perf_counter()
        yield from saving.save(run)
        session.exclude(t_save)


def _stop_early(run: Run, step: int) -> Iterator[Event]:
    spec, parts = run.spec, run.parts
    assert parts is not None
    message = parts.objective.stalled(spec.early_stopping_patience, run.state.best_val_loss) \
        if run.state.best_val_loss is not None else \
        f"no improvement for {spec.early_stopping_patience} evaluations (process 0 holds the history)"
    yield run.emit(Log("info", f"early stopping: {message}"))
    yield run.emit(Finished("early_stopped", step=step, message=message, result=run.result()))


def _clock(run: Run) -> float:
    """The run's training time by process 0's clock: every process takes the same learning rate and stops at the
    same step."""
    return run.elapsed() if run.dist is None else run.dist.from_main([run.elapsed()])[0]


def _forward_backward(run: Run, batch: Any, step: int, shapes: list[tuple[int, int]]
                      ) -> Generator[Event, None, tuple[torch.Tensor, dict[str, torch.Tensor], int]]:
    """The step's forward and backward in micro-batches, retried smaller on out-of-memory (the same effective
    batch); returns (loss, metric sums, tokens), and each micro-batch's (rows, tokens) in `shapes`."""
    parts = run.parts
    assert parts is not None
    device = parts.ctx.device
    while True:
        try:
            shapes.clear()  # a retry starts the step again
            return accumulate(parts, batch, run.state.micro_batch, shapes=shapes)
        except Exception as exc:
            if not is_out_of_memory(exc):
                # A compilation or kernel of the fast path failed: continue on transformers' modules (once).
                fell_back = parts.fast.fall_back(exc) if parts.fast is not None else ""
                if not fell_back:
                    raise
                parts.optimizer.zero_grad(set_to_none=True)
                yield run.emit(Log("warning", f"step {step}: {fell_back}"))
                continue
            parts.optimizer.zero_grad(set_to_none=True)
            free_device_memory(device)
            smaller = next_micro_batch(run.state.micro_batch, run.rank_batch)
            if smaller is None:
                raise UserError(f"out of memory even with a micro-batch of 1 on {device.type}: use a smaller model "
                                "or context length") from exc
            yield run.emit(Log("warning", f"out of memory at step {step} with micro-batch {run.state.micro_batch}: "
                               f"retrying with {smaller} x {run.rank_batch // smaller} accumulation (same effective "
                               "batch)"))
            run.state.micro_batch = smaller


def accumulate(parts: Parts, batch: Any, micro: int, *, shapes: list[tuple[int, int]] | None = None
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Forward+backward of one step's batch in micro-batches; gradients sum to the full-batch gradient.

    parts.wrapped (distributed.wrap): computes each loss (through DDP/FSDP when several processes train) and keeps
    gradients local until the last micro-batch, whose backward averages them across processes once. `shapes`, when
    given, receives each micro-batch's (rows, tokens): the length of the sequences trained, for MFU."""
    objective, wrapped, scaler, device = parts.objective, parts.wrapped, parts.scaler, parts.ctx.device
    pieces = objective.split(batch, micro)
    total = sum(len(p) for p in pieces)
    loss_sum: torch.Tensor | None = None
    metric_sums: dict[str, torch.Tensor] = {}
    tokens = 0
    for i, piece in enumerate(pieces):
        weight = len(piece) / total if total else 1.0  # weighted by size: the mean (one empty share: its figures)
        piece = objective.to_device(piece, device)
        last = i == len(pieces) - 1
        with contextlib.nullcontext() if last else wrapped.no_sync():
            with parts.ctx.autocast():  # the forward only: backward runs outside autocast, as torch recommends
                loss, metrics = wrapped.loss(piece)
            scaled = loss * weight
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        detached = loss.detach() * weight
        loss_sum = detached if loss_sum is None else loss_sum + detached
        for name, value in metrics.items():
            v = value.detach() * weight if isinstance(value, torch.Tensor) else value * weight
            metric_sums[name] = metric_sums[name] + v if name in metric_sums else v
        piece_tokens = objective.tokens(piece)
        tokens += piece_tokens
        if shapes is not None:
            shapes.append((len(piece), piece_tokens))
    assert loss_sum is not None
    return loss_sum, metric_sums, tokens


def _evaluate(run: Run) -> Iterator[Event]:
    parts = run.parts
    assert parts is not None
    model, objective = parts.model, parts.objective
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            metrics = objective.evaluate(model, parts.ctx)
        # Sampling reads weights outside the modules' forward, which FSDP's sharded weights do not allow.
        sharded = run.dist is not None and run.dist.fsdp
        samples = objective.samples(model, parts.ctx) if not sharded else []
    finally:
        model.train(was_training)
    if not metrics:
        return
    val = metrics.get("val_loss")
    if val is not None and math.isfinite(val):
        run.state.record_eval(val)
    yield run.emit(EvalResult(step=run.state.step, metrics=metrics))
    for prompt, text in samples:
        yield run.emit(Sample(step=run.state.step, prompt=prompt, text=text))


def _nonfinite(run: Run, step: int, position: list[int], loss_value: float, norm_value: float) -> Iterator[Event]:
    """A non-finite loss or gradient: never applied. Skip the batch, or roll back (policy)."""
    state, parts = run.state, run.parts
    assert parts is not None
    state.nonfinite_count += 1
    batch_desc = f"epoch {position[0]} position {position[1]}" if len(position) == 2 else str(position)
    state.nonfinite_events.append({"step": step, "batch": batch_desc, "loss": repr(loss_value),
                                   "grad_norm": repr(norm_value)})
    what = f"step {step}: non-finite {'loss' if not math.isfinite(loss_value) else 'gradient norm'} " \
           f"(loss {loss_value}, grad norm {norm_value}) on the batch at {batch_desc}"
    if run.spec.nonfinite_policy != "rollback":
        yield run.emit(Log("warning", f"{what}: the step is skipped (nothing was applied)"))
        return
    path, _ = run_folder.find_resumable(run.run_dir)
    if path is None:
        yield run.emit(Log("warning", f"{what}: no checkpoint to roll back to yet; the step is skipped"))
        return
    keep = (state.nonfinite_count, list(state.nonfinite_events), state.lr_scale * ROLLBACK_LR_FACTOR,
            set(parts.source.skipped))
    loaded = ckpt.load_checkpoint(path, verify=False)
    ckpt.load_model_state(parts.model, loaded.model_state)
    run.restore(loaded, sharded=False, truncate_metrics=True)
    run.state.nonfinite_count, run.state.nonfinite_events, run.state.lr_scale, skipped = keep
    parts.source.skipped |= skipped
    parts.source.skip(position)
    yield run.emit(Log("warning", f"{what}: rolled back to {path.name} (step {loaded.step}), learning rate scaled "
                       f"to {run.state.lr_scale:g}x, that batch will be skipped"))
