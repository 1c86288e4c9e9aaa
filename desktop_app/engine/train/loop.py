"""The one training loop. Objectives (causal LM, SFT, DPO; self-play later) plug into it.

`train(config, run_dir, controls)` is a generator of events (see events.py). Every yield is a
progress report and a cancel point; the GUI iterates it in a worker thread, the CLI with a progress
bar. The loop owns optimisation, precision, accumulation, clipping, failure handling, controls,
metrics and checkpoints; the objective owns batches, loss and evaluation (objectives/base.py).

Cost notes (why the hot path looks the way it does): per optimizer step there is exactly one
device->host sync (loss and grad norm read together, needed anyway to keep non-finite values away
from the optimizer); per micro-step none. Metrics lines are written only on logged steps.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from desktop_app.engine import run_folder
from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.devices import (
    apply_threads,
    choose_precision,
    choose_threads,
    cpu_cores,
    free_device_memory,
    is_out_of_memory,
    measure_matmul_peak,
    resolve_device,
)
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import (
    CheckpointSaved,
    Controls,
    EvalResult,
    Event,
    Finished,
    Log,
    Progress,
    Sample,
    Started,
    StepMetrics,
)
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.run_folder import RUN_FILE, MetricsWriter
from desktop_app.engine.specs import AdapterSpec, DistributedSpec, ModelSpec, RunConfig, TrainSpec, method_options
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train import distributed as dist_mod
from desktop_app.engine.train.cpu_alloc import restore_allocator, tune_allocator
from desktop_app.engine.train.distributed import DistContext, PeerLostError
from desktop_app.engine.train.optim import (
    build_optimizer,
    lr_at,
    optimizer_state_from_flat,
    optimizer_state_to_flat,
    resolve_optimizer,
    set_lr,
)

TRAINER_STATE_VERSION = 1
ROLLBACK_LR_FACTOR = 0.5


# --- config helpers (also used by the CLI and the GUI) --------------------------------------------------

def config_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Readable differences between two run configs, one line per changed leaf ("train.lr: 0.001 -> 0.002")."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<unset>"), new.get(key, "<unset>")
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            lines += config_diff(a, b, name + ".")
        elif a != b:
            lines.append(f"{name}: {json.dumps(a)} -> {json.dumps(b)}")
    return lines


def _canonical(config_dict: dict[str, Any]) -> dict[str, Any]:
    """Fill RunConfig/TrainSpec/ModelSpec/adapter/option defaults so {} and an explicit default compare equal
    (and a run.json written before a field existed matches one that has it at its default)."""
    out = dict(config_dict)
    with contextlib.suppress(Exception):
        out = RunConfig.from_dict(out).to_dict()
    with contextlib.suppress(Exception):
        out["train"] = TrainSpec.from_dict(out.get("train", {})).to_dict()
    if out.get("model"):
        with contextlib.suppress(Exception):
            out["model"] = ModelSpec.from_dict(out["model"]).to_dict()
    with contextlib.suppress(Exception):
        out["adapter"] = AdapterSpec.from_dict(out.get("adapter", {})).to_dict()
    with contextlib.suppress(Exception):
        out["distributed"] = DistributedSpec.from_dict(out.get("distributed", {})).to_dict()
    with contextlib.suppress(Exception):
        options = method_options(out.get("objective", "causal_lm"), out.get("method_options", {}))
        if options is not None:
            out["method_options"] = options.to_dict()
    return out


def adapt_model_to_dataset(spec: ModelSpec, store: TokenStore) -> tuple[ModelSpec, list[str]]:
    """Fit a (preset) spec to a dataset: vocab_size = the tokenizer's, context_length = the dataset's.

    Returns the adapted spec and one note per change, so callers can say what they did.
    """
    notes = []
    if spec.vocab_size != store.vocab_size:
        notes.append(f"vocab_size set to {store.vocab_size} (the dataset's tokenizer) instead of {spec.vocab_size}")
        spec = spec.replace(vocab_size=store.vocab_size)
    if spec.context_length != store.context_length:
        notes.append(f"context_length set to {store.context_length} (the dataset's windows) instead of "
                     f"{spec.context_length}")
        spec = spec.replace(context_length=store.context_length)
    return spec, notes


def config_from_preset(dataset: str | Path, preset_name: str, *, seed: int = 1337,
                       **train_overrides: Any) -> tuple[RunConfig, list[str]]:
    """A RunConfig training preset `preset_name` on `dataset`, adapted to its tokenizer and context."""
    from desktop_app.engine.presets import preset

    store = TokenStore(dataset)
    spec, notes = adapt_model_to_dataset(preset(preset_name), store)
    train_spec = TrainSpec(**{k: v for k, v in train_overrides.items() if v is not None})
    config = RunConfig(model=spec.to_dict(), dataset=str(Path(dataset).resolve()), train=train_spec.to_dict(),
                       seed=seed)
    config.check()
    return config, [f"preset {preset_name}: {n}" for n in notes]


def next_micro_batch(micro: int, batch: int) -> int | None:
    """After an out-of-memory error: the next smaller micro-batch that divides the batch (None: at 1 already).

    Halving keeps the effective batch (micro x accumulation = batch) and so the training maths.
    """
    m = micro // 2
    while m >= 1 and batch % m:
        m -= 1
    return m if 1 <= m < micro else None


# --- RNG state without pickle ---------------------------------------------------------------------------

def capture_rng(device: torch.device) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state()}
    if device.type == "cuda":
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda_{i}"] = state
    version, internal, gauss = random.getstate()
    np_state = np.random.get_state()
    meta = {
        "python": [version, list(internal), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }
    return tensors, meta


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict[str, Any], device: torch.device) -> None:
    if "torch_cpu" in tensors:
        torch.set_rng_state(tensors["torch_cpu"])
    if device.type == "cuda":
        states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda_"))]
        if states and len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)
    if meta.get("python"):
        version, internal, gauss = meta["python"]
        random.setstate((version, tuple(internal), gauss))
    if meta.get("numpy"):
        name, keys, pos, has_gauss, cached = meta["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# --- the loop -------------------------------------------------------------------------------------------

class _Run:
    """State of one train() call; methods are the loop's pieces (kept small so the loop reads top-down)."""

    def __init__(self, config: RunConfig, run_dir: Path, controls: Controls, objective: Any, interactive: bool):
        self.config = config
        self.run_dir = run_dir
        self.controls = controls
        self.objective = objective
        self.interactive = interactive
        self.spec: TrainSpec = config.train_spec()
        self.metrics: MetricsWriter | None = None  # process 0 writes metrics.jsonl
        self.step = 0
        self.lr_scale = 1.0
        self.tokens_seen = 0
        self.elapsed_before = 0.0
        self.best_val: float | None = None
        self.last_val: float | None = None
        self.evals_since_best = 0
        self.nonfinite_count = 0
        self.nonfinite_events: list[dict[str, Any]] = []
        self.ckpt_val: dict[int, float | None] = {}
        self.last_saved_step = -1
        self.last_checkpoint: Path | None = None
        self.micro = self.spec.micro_batch
        self.rank_batch = self.spec.batch_size
        self.flushed_denormals = False
        self.tuned_allocator = False
        self.dist: DistContext | None = None  # several processes (torchrun); None in one process
        self.finished_cleanly = False
        # One process reads its Controls directly; several act on the flags all of them agreed on at the last
        # step's sync (a signal reaching one rank between syncs must not make it leave the others).
        self.synced = {"stop": False, "save_now": False, "pause": False}

    @property
    def is_main(self) -> bool:
        return self.dist is None or self.dist.is_main

    def flag(self, name: str) -> bool:
        return self.synced[name] if self.dist is not None else getattr(self.controls, name).is_set()

    # events go to metrics.jsonl (flushed) before they reach the caller, so history survives a crash
    def emit(self, event: Event) -> Event:
        if self.metrics is not None and not isinstance(event, Progress):
            problem = self.metrics.write(event.to_dict())
            if problem:
                return Log("warning", problem)
        return event


def train(config: RunConfig, run_dir: str | Path, controls: Controls | None = None, *, resume: bool = False,
          accept_config_change: bool = False, objective: Any = None, interactive: bool = False) -> Iterator[Event]:
    """Train (or resume) the run described by `config` in `run_dir`, yielding events.

    resume: continue from the newest committed checkpoint that verifies (newer damaged ones are
    reported and skipped). A config different from the checkpoint's is refused with a diff unless
    `accept_config_change`. `objective` overrides the config's objective (tests, future methods);
    `interactive` tells the thread policy that a window shares the CPU. Setup problems raise
    UserError; problems during training end with Finished(reason="failed").
    """
    controls = controls or Controls()
    run_dir = Path(run_dir)
    config.check()
    previous_threads = torch.get_num_threads()
    run = _Run(config, run_dir, controls, objective, interactive)
    try:
        yield from _train(run, resume, accept_config_change)
    finally:
        if run.metrics is not None:
            run.metrics.close()
        apply_threads(previous_threads)
        if run.flushed_denormals:
            torch.set_flush_denormal(False)  # the process default (torch has no getter to save it)
        if run.tuned_allocator:
            restore_allocator()
        if run.dist is not None:
            run.dist.close(clean=run.finished_cleanly)


def _train(run: _Run, resume: bool, accept_config_change: bool) -> Iterator[Event]:
    config, run_dir, spec = run.config, run.run_dir, run.spec
    pending: list[Event] = []  # setup notes, emitted once metrics.jsonl is open

    # Several processes (torchrun): join them first, on this process's own GPU.
    device = resolve_device(spec.device)
    if dist_mod.launched_world_size() > 1:
        device = _rank_device(device)
        run.dist = DistContext.start(config.distributed_spec(), device)
        _check_distributed(run.dist, config, spec)
        pending.append(Log("info", run.dist.describe()))

    # 0. The base model (fine-tuning, or pretraining continued from a model): where its weights are and their
    # checksum. run.json records both, so the run is reproducible and refuses to resume on a changed base.
    base_info = None
    if config.base_model:
        config, base_info = _resolve_base(run, resume)

    # 1. Which checkpoint (if any) we continue from, and whether the config may change.
    loaded: ckpt.LoadedCheckpoint | None = None
    if resume:
        path, problems = run_folder.find_resumable(run_dir)
        for p in problems:
            pending.append(Log("warning", f"{p}; falling back to an earlier checkpoint"))
        if path is None:
            if not (run_dir / RUN_FILE).exists():
                raise UserError(f"{run_dir} is not a training run (no {RUN_FILE}); nothing to resume")
            pending.append(Log("warning", "no complete checkpoint to resume from: starting this run from step 0"))
        else:
            loaded = ckpt.load_checkpoint(path, verify=False)  # verified just above
            _check_same_base(loaded.run_config, config)
            diff = config_diff(_canonical(loaded.run_config), _canonical(config.to_dict()))
            moved = [d for d in diff if d.startswith("distributed.")]  # how many processes, DDP or FSDP: free
            if moved:
                pending.append(Log("info", "continuing with other distributed settings: " + "; ".join(moved)))
            diff = [d for d in diff if d not in moved]
            if diff:
                model_changed = [d for d in diff if d.startswith(("model.", "base_model", "objective", "adapter."))]
                if model_changed:
                    raise UserError("cannot resume: the model differs from the checkpoint's ("
                                    + "; ".join(model_changed) + "). Start a new run to train another model.")
                if not accept_config_change:
                    raise UserError("the run config differs from the one the checkpoint was trained with:\n  "
                                    + "\n  ".join(diff) + "\nresume with --accept-config-change to continue "
                                    "with the new settings")
                pending.append(Log("warning", "continuing with a changed config: " + "; ".join(diff)))
    elif run_folder.list_committed(run_dir):
        raise UserError(f"{run_dir} already holds checkpoints of a run: resume it (train --resume {run_dir}) "
                        "or choose a new output folder")

    # 2. run.json, and metrics.jsonl cut back to what the checkpoint had seen (consistent replayed history).
    if run.is_main:  # only process 0 writes the run folder
        run.metrics = _open_run_folder(run_dir, config, loaded)

    # 3. Threads, precision (the device was chosen above). Processes on one machine share its cores.
    local = run.dist.local_world if run.dist is not None else 1
    threads, why_threads = choose_threads(spec.threads, interactive=run.interactive, cores=max(1, cpu_cores() // local))
    apply_threads(threads)
    precision = choose_precision(device, spec.precision)
    shared = f" ({local} processes share this machine's cores)" if local > 1 and device.type == "cpu" else ""
    pending.append(Log("info", f"device {device.type}; {why_threads}{shared}"))
    if device.type == "cpu":
        pending.extend(_thread_warnings(spec.threads, threads, loaded))
        # Many epochs over little data drive gradients and Adam's second moments into denormal floats,
        # which x86 computes far slower (seen in the benchmark: a 12M model trained ~12 times on one batch
        # slowed down ~6x until denormals were flushed). Flushing them to zero costs nothing in accuracy.
        # Reset in train()'s finally.
        run.flushed_denormals = bool(torch.set_flush_denormal(True))
        # Reuse warm heap memory for each step's large tensors instead of fresh mmaps (see cpu_alloc);
        # undone in train()'s finally.
        run.tuned_allocator = tune_allocator()
        if run.tuned_allocator:
            pending.append(Log("info", "CPU allocator tuned for training: large buffers are reused between steps"))
    pending.append(Log("warning" if precision.warning else "info", f"precision {precision.name}: {precision.reason}"))

    # 4. Data, tokenizer, model (a fresh one, or a base with chat tokens ensured and adapters applied).
    store = TokenStore(config.dataset) if config.dataset else None
    prepared = _prepare_model(config, base_info, store, device, spec)
    model, model_spec, tokenizer = prepared.model, prepared.model_spec, prepared.tokenizer
    pending.extend(Log("info", note) for note in prepared.notes)
    if loaded is not None:
        if loaded.adapter != prepared.adapter:
            raise UserError(f"cannot resume: the checkpoint {loaded.path.name} holds "
                            f"{'an adapter' if loaded.adapter else 'a full model'} but the run config asks for "
                            f"{'an adapter' if prepared.adapter else 'full fine-tuning'}")
        ckpt.load_model_state(model, loaded.model_state)
    if not prepared.quantized:  # a 4-bit model is placed by its loader (bitsandbytes weights cannot move)
        model.to(device)
    if spec.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        pending.append(Log("info", "gradient checkpointing on: less memory, ~30% more compute"))
    model.train()
    if run.dist is not None and run.dist.fsdp:  # shard after loading, quantizing and adapters; before the optimizer
        pending.extend(Log("info", note) for note in
                       dist_mod.shard_fsdp(model, run.dist, device, autocast_dtype=precision.autocast_dtype))
    forward_model: Any = model
    if spec.compile:
        pending.append(Log("info", "compiling the model with torch.compile (the first steps are slow)"))
        forward_model = torch.compile(model)

    objective = run.objective
    if objective is None:
        from desktop_app.engine.objectives import make_objective

        objective = make_objective(config.objective)
    wrapped = dist_mod.wrap(model, forward_model, objective.loss, run.dist, device)
    pending.extend(Log("info", note) for note in wrapped.notes)

    optimizer_kind, optimizer_why = resolve_optimizer(spec.optimizer, device, quantized=prepared.quantized)
    if run.dist is not None and run.dist.fsdp and optimizer_kind != "adamw":  # auto on a 4-bit base (checked above)
        optimizer_kind, optimizer_why = "adamw", "AdamW (8-bit AdamW cannot update FSDP's sharded parameters)"
    if loaded is not None:
        check_optimizer_state(loaded.optimizer_tensors, optimizer_kind)
    if optimizer_kind != "adamw":
        pending.append(Log("info", f"optimizer: {optimizer_why}"))
    optimizer = build_optimizer(model, spec, device, kind=optimizer_kind)
    scaler = torch.amp.GradScaler(device.type) if precision.use_grad_scaler else None

    if precision.autocast_dtype is not None:
        def autocast() -> Any:
            return torch.autocast(device.type, dtype=precision.autocast_dtype)
    else:
        def autocast() -> Any:
            return contextlib.nullcontext()

    ctx = TrainContext(run_dir=run_dir, dataset_dir=Path(config.dataset) if config.dataset else None, store=store,
                       train_spec=spec, model_spec=model_spec, seed=config.seed, device=device, autocast=autocast,
                       tokenizer=tokenizer, config=config,
                       extras={"resumed": loaded is not None, "base": base_info,
                               "load_reference": prepared.load_reference, "adapter": prepared.adapter})
    objective.setup(ctx, model)
    pending.extend(getattr(objective, "notes", []) or [])
    source = objective.batch_source(ctx)
    if run.dist is not None and hasattr(source, "set_shard"):
        source.set_shard(run.dist.rank, run.dist.world)  # reads only this process's rows of each batch
    run.rank_batch = spec.batch_size // (run.dist.world if run.dist is not None else 1)

    # MFU reference: the measured matmul peak of this machine (cached per process; before seeding, and
    # with its own generator, so it cannot disturb the training RNG).
    flops_per_token = _flops_per_token(model, model_spec)
    if prepared.adapter:
        flops_per_token *= 2.0 / 3.0  # frozen base: no weight gradients (forward 2N + input gradients 2N)
    # A GPU reaches its peak only on large matmuls (a 1024-wide probe under-reads an H100 several-fold).
    peak = measure_matmul_peak(device, precision.autocast_dtype or torch.float32,
                               size=8192 if device.type == "cuda" else 1024) if device.type != "mps" else 0.0

    # 5. Seed, then overwrite with the checkpoint's exact state when resuming.
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    np.random.seed(config.seed % (2**32))
    if loaded is not None:
        _apply_loaded(run, loaded, optimizer, scaler, source, device, objective=objective, model=model)
        run.last_checkpoint = loaded.path
        pending.append(Log("info", f"resumed from {loaded.path.name} (step {loaded.step})"))
    elif run.is_main:
        _remember_checkpoint_vals(run)
    run.micro = min(run.micro, run.rank_batch)  # a step's rows per process (the whole batch in one process)
    if spec.auto_micro_batch:
        run.micro, why = _auto_micro_batch(run, model, model_spec, wrapped, objective, source, ctx, store,
                                           precision.name, optimizer)
        pending.append(Log("info", why))

    yield run.emit(Started(world_size=run.dist.world if run.dist is not None else 1,
                           strategy=run.dist.spec.strategy if run.dist is not None else "single",
                           device=str(device), start_step=run.step))
    for event in pending:
        yield run.emit(event)

    yield from _loop(run, model, wrapped, optimizer, scaler, objective, source, ctx, autocast,
                     flops_per_token, peak, prepared.write_tokenizer, model_spec)


def _loop(run: _Run, model: Any, wrapped: Any, optimizer: torch.optim.Optimizer, scaler: Any,
          objective: Any, source: Any, ctx: TrainContext, autocast: Callable[[], Any], flops_per_token: float,
          peak: float, write_tokenizer: Callable[[Path], None] | None,
          model_spec: ModelSpec | None) -> Iterator[Event]:
    spec, controls, device, dist = run.spec, run.controls, ctx.device, run.dist
    params = [p for p in model.parameters() if p.requires_grad]
    clip = spec.grad_clip if spec.grad_clip > 0 else float("inf")
    session_start = time.perf_counter()
    session_steps = 0
    paused_s = 0.0
    log_t0, log_tokens = time.perf_counter(), 0
    start_step = run.step
    # FSDP: every process takes part in each forward (evaluation too); DDP: process 0 evaluates alone.
    evaluates = run.is_main or (dist is not None and dist.fsdp)

    def save(reason: str) -> Iterator[Event]:
        problem = ""
        path: Path | None = None
        try:
            path = _save(run, model, optimizer, scaler, source, objective, device, write_tokenizer, model_spec,
                         elapsed=run.elapsed_before + time.perf_counter() - session_start - paused_s)
        except run_folder.CheckpointError as exc:
            problem = str(exc)
        if dist is not None and not dist.agree(not problem, "saving a checkpoint"):
            problem = problem or "process 0 could not save the checkpoint (its message says why)"
        if problem:
            raise _SaveFailed(problem)
        if path is not None:
            best = _best_step(run) == run.step
            yield run.emit(CheckpointSaved(step=run.step, path=str(path), best=best))

    try:
        while run.step < spec.steps:
            if run.flag("pause") and not run.flag("stop"):
                yield run.emit(Log("info", f"paused at step {run.step}"))
                t = time.perf_counter()
                _wait_while_paused(run)
                paused_s += time.perf_counter() - t
                if not run.flag("stop"):
                    yield run.emit(Log("info", "resumed"))
            if run.flag("stop"):
                break

            step = run.step + 1
            batch, position = source.take(spec.batch_size)
            batch = _my_rows(run, objective, source, batch)
            optimizer.zero_grad(set_to_none=True)
            # --- forward/backward over micro-batches (retried smaller on out-of-memory) ---
            while True:
                try:
                    loss_sum, metric_sums, step_tokens = _accumulate(
                        objective, wrapped, batch, run.micro, device, autocast, scaler)
                    break
                except Exception as exc:
                    if not is_out_of_memory(exc):
                        raise
                    optimizer.zero_grad(set_to_none=True)
                    free_device_memory(device)
                    smaller = next_micro_batch(run.micro, run.rank_batch)
                    if smaller is None:
                        raise UserError(f"out of memory even with a micro-batch of 1 on {device.type}: use a "
                                        "smaller model or context length") from exc
                    yield run.emit(Log("warning", f"out of memory at step {step} with micro-batch {run.micro}: "
                                       f"retrying with {smaller} x {run.rank_batch // smaller} accumulation "
                                       "(same effective batch)"))
                    run.micro = smaller
            if scaler is not None:
                scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, clip)
            if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor; the global norm is its full value
                grad_norm = grad_norm.full_tensor()
            if dist is None:
                loss_value, norm_value = torch.stack([loss_sum.float(),
                                                      grad_norm.float().to(loss_sum.device)]).tolist()
            else:
                loss_value, norm_value, metric_sums, step_tokens = _sync_step(run, loss_sum, grad_norm, metric_sums,
                                                                              step_tokens)

            if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
                optimizer.zero_grad(set_to_none=True)
                if scaler is not None and math.isfinite(loss_value):
                    scaler.update()  # fp16 overflow: normal loss-scale calibration, not a bad batch
                    run.step = step
                    continue
                for event in _nonfinite(run, step, position, loss_value, norm_value, model, optimizer, scaler,
                                        source, device, objective):
                    yield event
                if run.nonfinite_count >= spec.max_nonfinite:
                    report = "; ".join(f"step {e['step']} batch {e['batch']}" for e in run.nonfinite_events)
                    message = (f"stopped after {run.nonfinite_count} non-finite steps ({report}). Try a lower "
                               "learning rate, a longer warm-up or fp32.")
                    yield run.emit(Log("error", message))
                    yield run.emit(Finished("failed", step=run.step, message=message, result=_result(run)))
                    run.finished_cleanly = True
                    return
                continue

            lr = lr_at(step, spec, run.lr_scale)
            set_lr(optimizer, lr)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            run.step = step
            session_steps += 1
            run.tokens_seen += step_tokens
            log_tokens += step_tokens

            if step % spec.log_every == 0 or step == spec.steps:
                now = time.perf_counter()
                dt = max(now - log_t0, 1e-9)
                tps = log_tokens / dt
                elapsed_session = now - session_start - paused_s
                elapsed = run.elapsed_before + elapsed_session
                eta = elapsed_session / max(1, step - start_step) * (spec.steps - step)
                metrics = {"loss": loss_value, "lr": lr, "grad_norm": norm_value, "tokens_per_s": tps,
                           "mfu": flops_per_token * tps / peak if peak else 0.0, "tokens": run.tokens_seen,
                           "epoch": getattr(source, "epoch_progress", 0.0), "progress": step / spec.steps}
                for name, value in metric_sums.items():
                    metrics[name] = float(value)
                log_t0, log_tokens = time.perf_counter(), 0
                yield run.emit(StepMetrics(step=step, total_steps=spec.steps, metrics=metrics,
                                           elapsed_s=elapsed, eta_s=eta))

            early_stop = False
            if spec.eval_every and (step % spec.eval_every == 0 or step == spec.steps):
                t_eval = time.perf_counter()
                if evaluates:
                    for event in _evaluate(run, model, objective, ctx):
                        yield event
                early_stop = bool(spec.early_stopping_patience and run.evals_since_best >= spec.early_stopping_patience)
                if dist is not None:  # process 0's verdict (it holds the validation history)
                    early_stop = dist.from_main([float(early_stop)])[0] > 0
                log_t0 += time.perf_counter() - t_eval  # ...but not in tokens/s

            wants_save = (spec.save_every and step % spec.save_every == 0) or run.flag("save_now") \
                or run.flag("stop") or early_stop or step == spec.steps
            if wants_save:
                controls.save_now.clear()
                run.synced["save_now"] = False
                t_save = time.perf_counter()
                yield from save("step")
                log_t0 += time.perf_counter() - t_save
            if early_stop:
                best = f"best {run.best_val:.4f}" if run.best_val is not None else "process 0 holds the history"
                message = f"validation loss has not improved for {spec.early_stopping_patience} evaluations ({best})"
                yield run.emit(Log("info", f"early stopping: {message}"))
                yield run.emit(Finished("early_stopped", step=step, message=message, result=_result(run)))
                run.finished_cleanly = True
                return
        # loop left: completed, or stopped between steps
        if run.step != run.last_saved_step and run.step > 0:
            yield from save("final")
        if run.step >= spec.steps:
            yield run.emit(Finished("completed", step=run.step, message=f"trained {run.step} steps",
                                    result=_result(run)))
        else:
            yield run.emit(Finished("stopped", step=run.step, message=f"stopped at step {run.step}",
                                    result=_result(run)))
        run.finished_cleanly = True
    except _SaveFailed as exc:
        message = f"{exc}. Training stopped; free some space or choose another folder, then resume."
        yield run.emit(Log("error", message))
        yield run.emit(Finished("failed", step=run.step, message=message, result=_result(run)))
        run.finished_cleanly = True
    except Exception as exc:
        if dist is None or not (isinstance(exc, PeerLostError) or dist_mod.is_communication_error(exc)):
            raise
        if not isinstance(exc, PeerLostError):  # raised inside DDP's backward or an FSDP gather
            exc = PeerLostError(dist_mod.lost_peer_message(dist.rank, f"training step {run.step + 1}", exc))
        where = f" ({run.last_checkpoint.name})" if run.last_checkpoint is not None else " (none yet)"
        message = str(exc).replace("The last committed checkpoint", f"The last committed checkpoint{where}", 1)
        yield run.emit(Log("error", message))
        yield run.emit(Finished("failed", step=run.step, message=message, result=_result(run)))


# --- several processes (torchrun) ------------------------------------------------------------------------

def _auto_micro_batch(run: _Run, model: Any, model_spec: ModelSpec | None, wrapped: Any, objective: Any,
                      source: Any, ctx: TrainContext, store: TokenStore | None, precision: str,
                      optimizer: torch.optim.Optimizer) -> tuple[int, str]:
    """TrainSpec.auto_micro_batch: searched on CUDA (a trial step per candidate), a memory model elsewhere."""
    from desktop_app.engine.train import auto_batch

    device, dist = ctx.device, run.dist
    if device.type != "cuda":
        import psutil

        from desktop_app.engine.generate.prompts import context_length

        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        fixed, per_row = auto_batch.estimate_cpu_bytes(
            model_spec, model, seq_len=store.context_length if store is not None else (context_length(model) or 1024),
            precision=precision, trainable_share=trainable / max(1, total),
            shards=dist.world if dist is not None and dist.fsdp else 1)
        return auto_batch.cpu_micro_batch(run.rank_batch, fixed_bytes=fixed, bytes_per_row=per_row,
                                          available_bytes=psutil.virtual_memory().available,
                                          processes=dist.local_world if dist is not None else 1)
    if run.config.is_rl:
        return run.micro, "auto micro-batch: not searched for rollout methods (their batches are made by the model)"
    state = source.state_dict()
    batch, _ = source.take(run.spec.batch_size)
    batch = _my_rows(run, objective, source, batch)
    source.load_state_dict(state)  # the trial steps must not move the data order

    def try_micro(m: int) -> bool:
        ok = True
        try:
            with torch.random.fork_rng(devices=[device]), wrapped.no_sync(), ctx.autocast():
                piece = objective.to_device(objective.split(batch, m)[0], device)
                wrapped.loss(piece)[0].backward()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            ok = False
        finally:
            optimizer.zero_grad(set_to_none=True)
            free_device_memory(device)
        return dist.agree(ok, "searching the micro-batch") if dist is not None else ok

    return auto_batch.search_micro_batch(run.rank_batch, try_micro)


def check_optimizer_state(tensors: dict[str, torch.Tensor], kind: str) -> None:
    """A checkpoint's optimizer state must be of the optimizer that resumes it (8-bit AdamW keeps other tensors
    than AdamW; loading one into the other would fail later or train on garbage)."""
    eight_bit = any(".state1" in k or "__bnb_optimizer_quant_state__" in k for k in tensors)
    if eight_bit and kind == "adamw":
        raise UserError("cannot resume: the checkpoint holds 8-bit AdamW state but this run now uses AdamW (FSDP "
                        "trains with AdamW): resume it in one process or with distributed.strategy ddp")
    if not eight_bit and kind != "adamw" and any(k.endswith(".exp_avg") for k in tensors):
        raise UserError("cannot resume: the checkpoint holds AdamW state but this run now uses 8-bit AdamW: set "
                        "optimizer to adamw to continue it")


def _rank_device(device: torch.device) -> torch.device:
    """This process's GPU under torchrun (cuda:LOCAL_RANK); the CPU stays the CPU."""
    if device.type != "cuda":
        return device
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        raise UserError(f"process {local} on this machine has no GPU of its own ({torch.cuda.device_count()} "
                        "visible): start at most one process per GPU (--nproc_per_node)")
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def _check_distributed(dist: DistContext | None, config: RunConfig, spec: TrainSpec) -> None:
    if dist is None:
        return
    if config.is_rl:
        raise UserError(f"{config.objective} generates its own episodes in one process; run it without torchrun")
    if spec.batch_size % dist.world:
        raise UserError(f"batch_size {spec.batch_size} cannot be split over {dist.world} processes: use a multiple of "
                        f"{dist.world} (each process trains batch_size / {dist.world} sequences of every step)")
    if dist.fsdp and spec.optimizer in ("adamw8bit", "paged_adamw8bit"):
        raise UserError(f"optimizer {spec.optimizer} (bitsandbytes) cannot update FSDP's sharded parameters: set "
                        "optimizer to adamw or auto, or use distributed.strategy ddp")
    if dist.fsdp and spec.nonfinite_policy == "rollback":
        raise UserError("nonfinite_policy rollback reloads a checkpoint into the model mid-run, which FSDP's "
                        "sharded model does not support here: use skip, or distributed.strategy ddp")


def _my_rows(run: _Run, objective: Any, source: Any, batch: Any) -> Any:
    """This process's share of a step's batch (rows rank*B/N .. (rank+1)*B/N of the global order).

    An objective whose loss is normalised over the whole step (SFT: by its loss-bearing tokens) shards the batch
    itself (`shard(batch, rank, world)`), keeping what it needs of the whole; other batches are row-sliced."""
    dist = run.dist
    if dist is None or getattr(source, "shard", None) is not None:
        return batch  # one process, or a source that read only this process's rows
    if hasattr(objective, "shard"):
        return objective.shard(batch, dist.rank, dist.world)
    if isinstance(batch, (list, tuple, torch.Tensor)) and len(batch) == run.spec.batch_size:
        return batch[dist.rank * run.rank_batch:(dist.rank + 1) * run.rank_batch]
    raise UserError(f"the {run.config.objective} method cannot split its batches over several processes")


def _sync_step(run: _Run, loss_sum: torch.Tensor, grad_norm: torch.Tensor, metric_sums: dict[str, Any],
               tokens: int) -> tuple[float, float, dict[str, float], int]:
    """One all-reduce per step: the mean loss and metrics over processes, the tokens of all of them, and the
    control flags (any process's stop / save now / pause reaches all). The gradient norm is the same everywhere
    (gradients are averaged before it is taken)."""
    assert run.dist is not None
    names = sorted(metric_sums)
    flags = [float(getattr(run.controls, f).is_set()) for f in ("stop", "save_now", "pause")]
    values = [float(loss_sum), *(float(metric_sums[n]) for n in names), float(tokens), *flags]
    total = run.dist.sum(values)
    world = run.dist.world
    loss = total[0] / world
    metrics = {n: total[1 + i] / world for i, n in enumerate(names)}
    stop, save_now, pause = (v > 0 for v in total[-3:])
    _set_synced(run, stop=stop, save_now=save_now, pause=pause)
    return loss, float(grad_norm), metrics, int(total[1 + len(names)])


def _set_synced(run: _Run, *, stop: bool, save_now: bool, pause: bool) -> None:
    run.synced.update(stop=stop, save_now=save_now, pause=pause)
    if stop:
        run.controls.stop.set()  # so this process's own checks (and its caller) see it too
    if save_now:
        run.controls.save_now.set()


def _wait_while_paused(run: _Run, poll_s: float = 0.25) -> None:
    """Pause: one process waits on its flags; several ask each other every poll_s until none is paused."""
    if run.dist is None:
        run.controls.wait_while_paused()
        return
    while True:
        stop, pause = run.dist.sum([float(run.controls.stop.is_set()), float(run.controls.pause.is_set())],
                                   "waiting out a pause")
        if stop or not pause:
            run.synced["pause"] = False
            if stop:
                _set_synced(run, stop=True, save_now=run.synced["save_now"], pause=False)
            return
        run.controls.stop.wait(poll_s)


class _SaveFailed(Exception):
    pass


def _open_run_folder(run_dir: Path, config: RunConfig, loaded: ckpt.LoadedCheckpoint | None) -> MetricsWriter:
    """Write run.json, cut metrics.jsonl back to the checkpoint's offset (or start it afresh) and open it."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        ckpt.sweep_staging(run_dir)
        config.save(run_dir / RUN_FILE)
        keep = int(loaded.trainer_state.get("metrics_offset", 0)) if loaded is not None else None
        return MetricsWriter(run_dir, keep_bytes=keep)
    except OSError as exc:
        raise UserError(f"cannot write the run folder {run_dir}: {exc.strerror or exc}; choose a folder you can "
                        "write to (with free space)") from None


def _accumulate(objective: Any, wrapped: dist_mod.Wrapped, batch: Any, micro: int, device: torch.device,
                autocast: Callable[[], Any], scaler: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Forward+backward of one step's batch in micro-batches; gradients sum to the full-batch gradient.

    wrapped (distributed.wrap): computes each loss (through DDP/FSDP when several processes train) and keeps
    gradients local until the last micro-batch, whose backward averages them across processes once."""
    pieces = objective.split(batch, micro)
    total = sum(len(p) for p in pieces)
    loss_sum: torch.Tensor | None = None
    metric_sums: dict[str, torch.Tensor] = {}
    tokens = 0
    for i, piece in enumerate(pieces):
        weight = len(piece) / total  # mean of means = global mean when pieces are weighted by size
        piece = objective.to_device(piece, device)
        last = i == len(pieces) - 1
        with contextlib.nullcontext() if last else wrapped.no_sync():
            with autocast():  # the forward only: backward runs outside autocast, as torch recommends
                loss, metrics = wrapped.loss(piece)
            scaled = loss * weight
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
        detached = loss.detach() * weight
        loss_sum = detached if loss_sum is None else loss_sum + detached
        for name, value in metrics.items():
            v = value.detach() * weight if isinstance(value, torch.Tensor) else value * weight
            metric_sums[name] = metric_sums[name] + v if name in metric_sums else v
        tokens += objective.tokens(piece)
    assert loss_sum is not None
    return loss_sum, metric_sums, tokens


def _evaluate(run: _Run, model: Any, objective: Any, ctx: TrainContext) -> Iterator[Event]:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            metrics = objective.evaluate(model, ctx)
        # Sampling reads weights outside the modules' forward, which FSDP's sharded weights do not allow.
        samples = objective.samples(model, ctx) if hasattr(objective, "samples") and not (
            run.dist is not None and run.dist.fsdp) else []
    finally:
        model.train(was_training)
    if not metrics:
        return
    val = metrics.get("val_loss")
    if val is not None and math.isfinite(val):
        run.last_val = val
        if run.best_val is None or val < run.best_val:
            run.best_val = val
            run.evals_since_best = 0
        else:
            run.evals_since_best += 1
    yield run.emit(EvalResult(step=run.step, metrics=metrics))
    for prompt, text in samples:
        yield run.emit(Sample(step=run.step, prompt=prompt, text=text))


def _nonfinite(run: _Run, step: int, position: list[int], loss_value: float, norm_value: float, model: Any,
               optimizer: torch.optim.Optimizer, scaler: Any, source: Any, device: torch.device,
               objective: Any = None) -> Iterator[Event]:
    """A non-finite loss or gradient: never applied. Skip the batch, or roll back (policy)."""
    run.nonfinite_count += 1
    batch_desc = f"epoch {position[0]} position {position[1]}" if len(position) == 2 else str(position)
    run.nonfinite_events.append({"step": step, "batch": batch_desc, "loss": repr(loss_value),
                                 "grad_norm": repr(norm_value)})
    what = f"step {step}: non-finite {'loss' if not math.isfinite(loss_value) else 'gradient norm'} " \
           f"(loss {loss_value}, grad norm {norm_value}) on the batch at {batch_desc}"
    if run.spec.nonfinite_policy == "rollback":
        path, _ = run_folder.find_resumable(run.run_dir)
        if path is not None:
            keep = (run.nonfinite_count, list(run.nonfinite_events), run.lr_scale * ROLLBACK_LR_FACTOR,
                    set(getattr(source, "skipped", set())))
            loaded = ckpt.load_checkpoint(path, verify=False)
            ckpt.load_model_state(model, loaded.model_state)
            _apply_loaded(run, loaded, optimizer, scaler, source, device, truncate_metrics=True, objective=objective)
            run.nonfinite_count, run.nonfinite_events, run.lr_scale, skipped = keep
            if hasattr(source, "skipped"):
                source.skipped |= skipped
            source.skip(position)
            yield run.emit(Log("warning", f"{what}: rolled back to {path.name} (step {loaded.step}), learning "
                               f"rate scaled to {run.lr_scale:g}x, that batch will be skipped"))
            return
        yield run.emit(Log("warning", f"{what}: no checkpoint to roll back to yet; the step is skipped"))
        return
    yield run.emit(Log("warning", f"{what}: the step is skipped (nothing was applied)"))


def _apply_loaded(run: _Run, loaded: ckpt.LoadedCheckpoint, optimizer: torch.optim.Optimizer, scaler: Any,
                  source: Any, device: torch.device, truncate_metrics: bool = False, objective: Any = None,
                  model: Any = None) -> None:
    state = loaded.trainer_state
    optimizer_state = optimizer_state_from_flat(loaded.optimizer_tensors, loaded.optimizer_meta)
    if model is not None and dist_mod.is_fsdp(model):
        dist_mod.load_optimizer_state(model, optimizer, optimizer_state)  # each process keeps its shard
    else:
        optimizer.load_state_dict(optimizer_state)
    if scaler is not None and state.get("grad_scaler"):
        scaler.load_state_dict(state["grad_scaler"])
    source.load_state_dict(state["data"])
    if objective is not None and state.get("objective") is not None and hasattr(objective, "load_state_dict"):
        objective.load_state_dict(state["objective"])
    restore_rng(loaded.rng_tensors, state.get("rng", {}), device)
    run.step = int(state["step"])
    run.lr_scale = float(state.get("lr_scale", 1.0))
    run.tokens_seen = int(state.get("tokens_seen", 0))
    run.elapsed_before = float(state.get("elapsed_s", 0.0))
    run.best_val = state.get("best_val_loss")
    run.last_val = state.get("last_val_loss")
    run.evals_since_best = int(state.get("evals_since_best", 0))
    run.nonfinite_count = int(state.get("nonfinite_count", 0))
    run.nonfinite_events = list(state.get("nonfinite_events", []))
    run.micro = int(state.get("micro_batch", run.spec.micro_batch))
    if run.micro > run.spec.batch_size or run.spec.batch_size % run.micro:
        run.micro = run.spec.micro_batch  # batch size changed on resume (accepted config change)
    run.last_saved_step = run.step
    if truncate_metrics and run.metrics is not None:
        run.metrics.truncate(int(state.get("metrics_offset", 0)))
    _remember_checkpoint_vals(run)


def _remember_checkpoint_vals(run: _Run) -> None:
    """Validation loss of each committed checkpoint (to keep the best one through retention)."""
    run.ckpt_val = {}
    for path in run_folder.list_committed(run.run_dir):
        run.ckpt_val[run_folder.step_of(path)] = run_folder.trainer_state(path).get("last_val_loss")


def _best_step(run: _Run) -> int | None:
    scored = [(v, s) for s, v in run.ckpt_val.items() if v is not None and math.isfinite(v)]
    return min(scored)[1] if scored else None


def _save(run: _Run, model: Any, optimizer: torch.optim.Optimizer, scaler: Any, source: Any, objective: Any,
          device: torch.device, write_tokenizer: Callable[[Path], None] | None, model_spec: ModelSpec | None,
          elapsed: float) -> Path | None:
    sharded = dist_mod.is_fsdp(model)
    # FSDP: every process hands its shards to process 0 (collectives: all of them call this), which writes.
    full_model = dist_mod.gathered_model_state(model) if sharded else None
    full_optimizer = dist_mod.gathered_optimizer_state(model, optimizer) if sharded else None
    if not run.is_main:
        run.last_saved_step = run.step
        return None
    metrics_offset = run.metrics.offset() if run.metrics is not None else 0
    rng_tensors, rng_meta = capture_rng(device)
    opt_tensors, opt_meta = optimizer_state_to_flat(full_optimizer if sharded else optimizer)
    state = {
        "format_version": TRAINER_STATE_VERSION, "step": run.step, "total_steps": run.spec.steps,
        "lr_scale": run.lr_scale, "schedule": {"name": run.spec.schedule, "step": run.step},
        "tokens_seen": run.tokens_seen, "elapsed_s": elapsed, "data": source.state_dict(),
        "metrics_offset": metrics_offset, "best_val_loss": run.best_val, "last_val_loss": run.last_val,
        "evals_since_best": run.evals_since_best, "nonfinite_count": run.nonfinite_count,
        "nonfinite_events": run.nonfinite_events, "micro_batch": run.micro,
        "grad_scaler": scaler.state_dict() if scaler is not None else None, "rng": rng_meta,
        "threads": torch.get_num_threads(), "device": device.type,
        "objective": objective.state_dict() if hasattr(objective, "state_dict") else None,
    }
    payload = ckpt.CheckpointPayload(
        step=run.step, model=model, optimizer_tensors=opt_tensors, optimizer_meta=opt_meta, trainer_state=state,
        run_config=run.config.to_dict(), model_spec=model_spec.to_dict() if model_spec else None,
        rng_tensors=rng_tensors, write_tokenizer=write_tokenizer, model_state=full_model)
    path = ckpt.save_checkpoint(run.run_dir, payload)
    run.last_saved_step = run.step
    run.last_checkpoint = path
    run.ckpt_val[run.step] = run.last_val
    best = _best_step(run)
    removed = ckpt.apply_retention(run.run_dir, run.spec.keep_last, {best} if best is not None else set())
    for p in removed:
        run.ckpt_val.pop(run_folder.step_of(p), None)
    return path


def _result(run: _Run) -> dict[str, Any]:
    best = _best_step(run)
    return {"run_dir": str(run.run_dir), "step": run.step, "tokens": run.tokens_seen,
            "checkpoint": str(run.last_checkpoint) if run.last_checkpoint else "",
            "best_val_loss": run.best_val, "best_checkpoint": str(
                run_folder.checkpoints_dir(run.run_dir) / run_folder.checkpoint_name(best)) if best is not None else "",
            "nonfinite_steps": run.nonfinite_count}


# --- setup helpers --------------------------------------------------------------------------------------

def _thread_warnings(requested: int, chosen: int, loaded: ckpt.LoadedCheckpoint | None) -> list[Event]:
    out: list[Event] = []
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not on Windows
        load = 0.0
    if requested == 0 and chosen > 1 and load > chosen:
        # Measured on 2 cores: 2 threads next to another busy process ran at 0.2-1.0x the speed of 1.
        out.append(Log("warning", f"the machine is busy (load {load:.1f} on {chosen} threads): if training is "
                       "slow, set threads to 1"))
    before = loaded.trainer_state.get("threads") if loaded is not None else None
    if before and before != chosen:
        out.append(Log("warning", f"this run was trained with {before} CPU thread(s) and continues with {chosen}: "
                       "results stay valid but are no longer bit-identical to an uninterrupted run"))
    return out


def _store_tokenizer_writer(store: TokenStore) -> Callable[[Path], None]:
    def write_tokenizer(folder: Path) -> None:
        # tokenizer.json + tokenizer_config.json (special tokens, chat template): the checkpoint is a
        # complete HF folder. A failure here fails the save loudly, like any other file of it.
        from desktop_app.engine.data.tokenization import hf_tokenizer

        hf_tokenizer(store.tokenizer_path, model_max_length=store.context_length).save_pretrained(str(folder))

    return write_tokenizer


def _hf_tokenizer_writer(tokenizer: Any, context_length: int | None) -> Callable[[Path], None]:
    def write_tokenizer(folder: Path) -> None:
        from desktop_app.engine.data.tokenization import save_hf_tokenizer

        save_hf_tokenizer(tokenizer, folder, context_length)

    return write_tokenizer


def _resolve_base(run: _Run, resume: bool) -> tuple[RunConfig, Any]:
    """Resolve run.config.base_model to the folder holding its weights, checksum them, and record both in the
    config (run.config is replaced). A base that changed since the config recorded it is refused."""
    from desktop_app.engine.model.folders import resolve_base, weights_sha256

    config = run.config
    try:
        info = resolve_base(config.base_model)
    except UserError as exc:
        if resume:
            raise UserError(f"cannot resume: the base model of this run cannot be used ({exc})") from None
        raise
    sha = weights_sha256(info)
    if config.base_model_sha256 and config.base_model_sha256 != sha:
        what = "cannot resume" if resume else "refusing to start"
        raise UserError(f"{what}: the base model {info.folder} has changed since this run was set up (its weights' "
                        f"checksum was {config.base_model_sha256[:12]}..., now {sha[:12]}...). Restore the original "
                        "base model, or start a new run on the new one")
    config = config.replace(base_model=str(info.folder), base_model_sha256=sha)
    run.config = config
    return config, info


def _check_same_base(recorded: dict[str, Any], config: RunConfig) -> None:
    """Resume: the checkpoint's base (path and checksum) must be the one the run now loads."""
    old_sha = recorded.get("base_model_sha256") or ""
    if old_sha and config.base_model_sha256 and old_sha != config.base_model_sha256:
        raise UserError(f"cannot resume: the base model {config.base_model} has changed since this run started (its "
                        f"weights' checksum was {old_sha[:12]}..., now {config.base_model_sha256[:12]}...). Restore "
                        "the original base model, or start a new run on the new one")


class _Prepared:
    """The model a run trains and what goes with it (see _prepare_model)."""

    def __init__(self, model: Any, model_spec: ModelSpec | None, tokenizer: Any,
                 write_tokenizer: Callable[[Path], None] | None, notes: list[str], *, adapter: bool = False,
                 quantized: bool = False, load_reference: Callable[[], Any] | None = None):
        self.model, self.model_spec, self.tokenizer = model, model_spec, tokenizer
        self.write_tokenizer, self.notes = write_tokenizer, notes
        self.adapter, self.quantized, self.load_reference = adapter, quantized, load_reference


def _prepare_model(config: RunConfig, base_info: Any, store: TokenStore | None, device: torch.device,
                   spec: TrainSpec) -> _Prepared:
    """A fresh model from the spec, or the base model: for fine-tuning methods with its own (transformers)
    tokenizer, chat tokens ensured (embeddings grown when added) and LoRA/QLoRA adapters applied; for
    pretraining continued from a base, the dataset's tokenizer."""
    if base_info is None:
        assert store is not None  # validated: pretraining needs a dataset
        tokenizer = _load_dataset_tokenizer(store)
        model, model_spec = _build_model(config, store, tokenizer)
        return _Prepared(model, model_spec, tokenizer, _store_tokenizer_writer(store), [])

    from desktop_app.engine.finetune.base_model import load_base

    adapter = config.adapter_spec()
    base = load_base(base_info, device, quantize=adapter if adapter.kind == "qlora" else None)
    model = base.model
    params = sum(p.numel() for p in model.parameters())
    notes = [f"base model {base_info.name} ({base_info.model_type}, {params / 1e6:.2f}M parameters"
             f"{' as stored' if base.quantized else ''}) from {base_info.folder}", *base.notes]
    new_ids: list[int] = []
    if config.is_finetune:
        from desktop_app.engine.finetune.chat_template import as_hf_tokenizer, ensure_chat_tokens

        tokenizer = as_hf_tokenizer(base.tokenizer)
        before = len(tokenizer)
        notes += ensure_chat_tokens(tokenizer, model)
        new_ids = list(range(before, len(tokenizer)))
        from desktop_app.engine.generate.prompts import context_length

        write_tokenizer = _hf_tokenizer_writer(tokenizer, context_length(model))
    elif config.is_rl and store is None:  # rollouts speak the base's own tokenizer (no chat tokens added)
        from desktop_app.engine.finetune.chat_template import as_hf_tokenizer
        from desktop_app.engine.generate.prompts import context_length

        tokenizer = as_hf_tokenizer(base.tokenizer)
        write_tokenizer = _hf_tokenizer_writer(tokenizer, context_length(model))
    else:  # continued pretraining from a base: the dataset was prepared with the base's tokenizer
        assert store is not None
        tokenizer = _load_dataset_tokenizer(store)
        vocab = int(getattr(model.config, "vocab_size", 0))
        if vocab < store.vocab_size:
            raise UserError(f"base model {base_info.folder} knows {vocab} tokens but the dataset's tokenizer has "
                            f"{store.vocab_size}: prepare the dataset with the base model's tokenizer")
        write_tokenizer = _store_tokenizer_writer(store)
    model_spec = None
    with contextlib.suppress(Exception):
        from desktop_app.engine.model.architecture import spec_from_hf_config

        model_spec = spec_from_hf_config(model.config)
    if adapter.kind != "none":
        from desktop_app.engine.finetune.adapters import apply_adapter

        model, adapter_notes = apply_adapter(model, adapter, seed=config.seed, new_token_ids=new_ids,
                                             quantized=base.quantized,
                                             gradient_checkpointing=spec.gradient_checkpointing)
        notes += adapter_notes

    def load_reference() -> Any:
        """A second, frozen copy of the base prepared the same way (full-model DPO's reference)."""
        ref = load_base(base_info, device)
        if config.is_finetune:
            from desktop_app.engine.finetune.chat_template import as_hf_tokenizer, ensure_chat_tokens

            ensure_chat_tokens(as_hf_tokenizer(ref.tokenizer), ref.model)
        ref.model.eval().requires_grad_(False)
        return ref.model

    return _Prepared(model, model_spec, tokenizer, write_tokenizer, notes, adapter=adapter.kind != "none",
                     quantized=base.quantized, load_reference=load_reference)


def _load_dataset_tokenizer(store: TokenStore) -> Any:
    if not store.tokenizer_path.exists():
        return None
    try:
        from desktop_app.engine.data.tokenization import load_tokenizer

        return load_tokenizer(store.tokenizer_path)
    except ImportError:  # pragma: no cover - tokenization.py is part of the app
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(store.tokenizer_path))


def _special_ids(tokenizer: Any) -> dict[str, int | None]:
    if tokenizer is None:
        return {}
    try:
        from desktop_app.engine.data.tokenization import special_tokens_of

        names = special_tokens_of(tokenizer)
    except Exception:
        return {}
    ids = {}
    for role in ("pad", "bos", "eos"):
        name = names.get(role)
        ids[f"{role}_token_id"] = tokenizer.token_to_id(name) if name else None
    return ids


def _build_model(config: RunConfig, store: TokenStore, tokenizer: Any) -> tuple[Any, ModelSpec | None]:
    spec = config.model_spec()
    if spec.vocab_size < store.vocab_size:
        raise UserError(f"the model's vocab_size {spec.vocab_size} is smaller than the dataset tokenizer's "
                        f"{store.vocab_size} tokens: set vocab_size to {store.vocab_size}")
    if spec.context_length < store.context_length:
        raise UserError(f"the model's context_length {spec.context_length} is shorter than the dataset's windows "
                        f"of {store.context_length} tokens: set context_length to {store.context_length} or "
                        "prepare the dataset with a shorter context")
    from desktop_app.engine.model.architecture import build_model

    return build_model(spec, seed=config.seed, **_special_ids(tokenizer)), spec


def _flops_per_token(model: Any, spec: ModelSpec | None) -> float:
    if spec is not None:
        from desktop_app.engine.model.sizing import flops_per_token

        return float(flops_per_token(spec))
    return 6.0 * sum(p.numel() for p in model.parameters() if p.dtype.is_floating_point)
