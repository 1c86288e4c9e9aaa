"""The terminal equivalent of a run config: the `train` command lines every front end shows (the window's Show CLI
command, the docs), built from the same flag table `train` parses (cli/command_line.py reads TRAIN_FLAGS from
here), so the two cannot drift apart. Stdlib only: the window imports it.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from desktop_app.engine.column_roles import format_columns
from desktop_app.engine.method_options import METHOD_OPTIONS
from desktop_app.engine.methods import Method, method_of
from desktop_app.engine.paths import cli_exe
from desktop_app.engine.specs import AdapterSpec, DistributedSpec, RunConfig, SpecError, TrainSpec

# TrainSpec fields `train` sets with flags of their own: field -> flag.
TRAIN_FLAGS: dict[str, str] = {
    "steps": "--steps", "batch_size": "--batch-size", "micro_batch_size": "--micro-batch-size", "lr": "--lr",
    "save_every": "--save-every", "eval_every": "--eval-every", "threads": "--threads", "device": "--device",
    "optimizer": "--optimizer", "kernels": "--kernels", "trackers": "--track"}
# AdapterSpec fields with flags of their own.
ADAPTER_FLAGS: dict[str, str] = {"rank": "--lora-rank", "alpha": "--lora-alpha", "dropout": "--lora-dropout",
                                 "target_modules": "--target-modules"}


def flag_value(value: Any) -> str:
    """A value as `train`'s flags read it back (exactly: floats keep every digit)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def method_command(config: RunConfig, method: Method, exe: str, out: str = "my-run") -> tuple[str, list[str]]:
    """(the `train --method ...` command line, settings its flags cannot express) for a fine-tuning config."""
    q = shlex.quote
    parts = [exe, "train", "--method", method.key, "--base", q(config.base_model) if config.base_model else "MODEL"]
    for path in config.data:
        parts += ["--data", q(path)]
    if config.columns:
        parts += ["--columns", q(format_columns(config.columns))]
    train, defaults = config.train, TrainSpec().to_dict()
    for name, flag in TRAIN_FLAGS.items():
        # lr always: the CLI's default for a method is the method's own (methods.py), not TrainSpec's
        if name in train and (name in ("steps", "batch_size", "lr") or train[name] != defaults.get(name)):
            parts += [flag, q(flag_value(train[name]) or "none")]  # an empty list: --track none
    uncovered = [f"train.{k}={flag_value(v)}" for k, v in train.items()
                 if k not in TRAIN_FLAGS and v != defaults.get(k)]
    options = dict(config.method_options)
    cls = METHOD_OPTIONS.get(method.objective)
    option_defaults = cls().to_dict() if cls is not None else {}
    if method.key == "selfplay":
        parts += ["--world", q(str(options.pop("world", option_defaults.get("world", "mini"))))]
    if method.objective == "grpo" and options.get("reward_file"):
        parts += ["--reward-file", q(str(options.pop("reward_file")))]
    for key, value in options.items():
        if key in option_defaults and value == option_defaults[key]:
            continue
        parts += ["--option", q(f"{key}={flag_value(value)}")]
    adapter = dict(config.adapter)
    kind = adapter.pop("kind", "none")
    if method.adapter is None and kind != "none":
        parts += ["--adapter", kind]
    adapter_defaults = AdapterSpec().to_dict()
    for key, value in adapter.items():
        if value == adapter_defaults.get(key):
            continue
        if key in ADAPTER_FLAGS:
            parts += [ADAPTER_FLAGS[key], q(flag_value(value))]
        else:
            uncovered.append(f"adapter.{key}={flag_value(value)}")
    uncovered += [f"distributed.{k}={flag_value(v)}" for k, v in config.distributed.items()]
    if config.seed != RunConfig().seed:
        parts += ["--seed", str(config.seed)]
    parts += ["--out", q(out)]
    return " ".join(parts), uncovered


def run_commands(config: RunConfig, run_dir: Path | None = None) -> str:
    """The terminal equivalent of a run: `train --method ...` for the fine-tuning methods, `train --config` for every
    run, and how to reproduce or continue `run_dir` when it has a run.json."""
    exe, q = cli_exe(), shlex.quote
    lines = []
    method = method_of(config)
    if method.finetune:
        command, uncovered = method_command(config, method, exe)
        lines.append(command)
        if uncovered:
            lines.append("# not expressible as flags (they are in run.json below): " + ", ".join(uncovered))
        lines.append("# exactly this config (save the JSON below as run.json):")
    lines.append(f"{exe} train --config run.json --out my-run")
    if run_dir is not None and (run_dir / "run.json").exists():
        again = q(str(run_dir.with_name(run_dir.name + "-cli")))
        lines += [f"# reproduce run {run_dir.name}:",
                  f"{exe} train --config {q(str(run_dir / 'run.json'))} --out {again}",
                  f"# or continue this run:\n{exe} train --resume {q(str(run_dir))}"]
    return "\n".join(lines)


def pipeline_commands(pipeline_dir: Path | None = None) -> str:
    """`train --pipeline pipeline.json`, and how to continue `pipeline_dir` when it holds one."""
    exe = cli_exe()
    lines = [f"{exe} train --pipeline pipeline.json --out my-pipeline"]
    if pipeline_dir is not None and (pipeline_dir / "pipeline.json").is_file():
        lines += [f"# continue pipeline {pipeline_dir.name} (completed stages are skipped, the interrupted one "
                  "resumes):", f"{exe} train --resume {shlex.quote(str(pipeline_dir))}"]
    return "\n".join(lines)


def torchrun_command(config: RunConfig, run_json: str = "run.json", out: str = "my-run") -> str:
    """The torchrun lines for a config: one machine, and the template for several (DDP/FSDP from `distributed`)."""
    q = shlex.quote
    try:
        dist = config.distributed_spec()
    except SpecError:
        dist = DistributedSpec()
    n = max(dist.nproc_per_node, 2)  # a one-process config still shows the command for two
    per_machine = dist.nproc_per_node  # on several machines, one process each is a run on several processes already
    # torchrun starts Python itself; a frozen app is an executable, which torchrun runs with --no-python.
    target = f"--no-python {q(sys.executable)}" if getattr(sys, "frozen", False) else "-m desktop_app"
    verb = f"{target} train --config {q(run_json)} --out {q(out)}"
    return "\n".join([
        f"# on {n} processes of this machine (distributed.nproc_per_node; {dist.strategy.upper()}):",
        f"torchrun --standalone --nproc_per_node {n} {verb} --json",
        "# on M machines: run this on each one, R = its rank 0..M-1, HOST:PORT = machine 0's address:",
        f"torchrun --nnodes M --node_rank R --rdzv_backend c10d --rdzv_endpoint HOST:PORT --nproc_per_node "
        f"{per_machine} {verb}",
    ])
