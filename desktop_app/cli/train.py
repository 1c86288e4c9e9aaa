"""`train`: train a model headless, fine-tune one, run a multi-stage pipeline, or resume any of them.

    python -m desktop_app train --dataset DATASET_DIR --preset tiny --out RUN_DIR [--steps N] ...
    python -m desktop_app train --method sft|lora|qlora|dpo --base MODEL --data FILE.jsonl [--data MORE.jsonl]
                                [--adapter lora|qlora] [--lora-rank R] [--lora-alpha A] [--option K=V ...]
                                --out RUN_DIR [--steps N] [--batch-size B] ...
    python -m desktop_app train --config run.json --out RUN_DIR
    python -m desktop_app train --pipeline pipeline.json --out PIPELINE_DIR
    python -m desktop_app train --resume RUN_DIR|PIPELINE_DIR [--accept-config-change]

MODEL is a run folder (its newest good checkpoint), a checkpoint, an export, a local Hugging Face folder, a GGUF file
or a Hub id pulled earlier (ORG/NAME; a GGUF repository's file as ORG/NAME:Q4_K_M or with --file '*Q4_K_M.gguf').
--method lora / qlora are SFT with LoRA / QLoRA adapters; --adapter puts adapters under dpo (or sft) too.

Before a new run starts, its settings are checked against this machine (engine/train/preflight.py): warnings (a
warm-up as long as the run, an empty validation set, another method's learning rate) are printed first; a run that
cannot work here (memory far beyond what is free) is refused with the reason, unless --force.

Ctrl+C (or SIGTERM) stops gracefully (finish the step, save, exit); a second Ctrl+C exits at once (the last
committed checkpoint stays intact). SIGUSR1 saves a checkpoint now, SIGUSR2 pauses / resumes (POSIX). A save the
disk refuses (full, read-only) pauses the run: free some space, then SIGUSR1 retries it, Ctrl+C stops without it. With
--json, every event is one JSON object per line on stdout; otherwise a progress bar runs on stderr.

--track tensorboard,mlflow,wandb (or none) also tracks the run in those libraries (docs/tracking.md); TensorBoard is on
by default where it is installed.

Several processes: `torchrun --standalone --nproc_per_node N -m desktop_app train --config run.json --out RUN`
(any of the forms above). Process 0 prints what one process would; the others print only their errors, on stderr,
as "[process K] ...". A signal sent to any process reaches all of them at the next step.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from desktop_app.cli.command_line import add_train_flags
from desktop_app.cli.model_file import add_file_argument, chosen_model
from desktop_app.cli.models import pull_base
from desktop_app.cli.reporting import SignalScope, StopSignals, consume, consume_quietly
from desktop_app.engine.column_roles import parse_columns
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Log
from desktop_app.engine.method_options import TASKS_FROM, parse_option
from desktop_app.engine.methods import FINETUNE_METHODS
from desktop_app.engine.model.folders import resolve_base
from desktop_app.engine.model.hub_cache import NotCached
from desktop_app.engine.pipeline_folder import is_pipeline_dir
from desktop_app.engine.run_commands import TRAIN_FLAGS
from desktop_app.engine.session import PipelineRun, ResumeRun, open_session
from desktop_app.engine.specs import load_json
from desktop_app.engine.train.request import RunRequest

if TYPE_CHECKING:
    from desktop_app.engine.events import Controls, Event
    from desktop_app.engine.session import What
    from desktop_app.engine.train.preflight import Finding


def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="RUN_JSON", help="run config (run.json) to train")
    src.add_argument("--dataset", metavar="DATASET_DIR", help="prepared dataset folder (with --preset)")
    src.add_argument("--resume", metavar="RUN_DIR", help="continue a run (or pipeline) from its newest committed "
                     "checkpoint")
    src.add_argument("--base", metavar="MODEL", help="fine-tune this model (with --method and --data): a run folder, "
                     "checkpoint, export, local Hugging Face folder, GGUF file (Ollama, LM Studio) or a Hub id "
                     "pulled earlier (ORG/NAME, or ORG/NAME:QUANT for one GGUF file); it is never "
                     "modified")
    src.add_argument("--pipeline", metavar="PIPELINE_JSON", help="run a multi-stage pipeline (e.g. pretrain -> sft -> "
                     "dpo) into --out; each stage starts from the previous one")
    parser.add_argument("--preset", help="model preset for --dataset (default: tiny); its vocab "
                        "size and context length are adapted to the dataset")
    add_train_flags(parser)
    parser.add_argument("--seed", type=int, help="seed of init, data order and dropout")
    parser.add_argument("--method", choices=FINETUNE_METHODS, help="fine-tuning method (with --base): sft (every "
                        "weight), lora / qlora (SFT with LoRA adapters; qlora on a 4-bit base), dpo (preference "
                        "pairs), grpo (prompts + reward functions), selfplay (Absolute Zero on a task world)")
    parser.add_argument("--data", action="extend", nargs="+", metavar="FILE", help="fine-tuning data (JSONL): chat, "
                        "ShareGPT or Alpaca records for sft/lora/qlora, prompt/chosen/rejected pairs for dpo; repeat "
                        "for several files")
    parser.add_argument("--columns", metavar="ROLE=COLUMN,...", help="which columns of table data (CSV, Parquet, a "
                        "datasets folder) hold what, e.g. instruction=q,output=a or prompt=p,chosen=good,rejected=bad "
                        "(default: guessed from common names); saved in run.json")
    parser.add_argument("--adapter", choices=("none", "lora", "qlora"), help="adapters for --method sft or dpo "
                        "(default none = full fine-tuning)")
    parser.add_argument("--lora-rank", type=int, help="LoRA rank r (default 8)")
    parser.add_argument("--lora-alpha", type=float, help="LoRA alpha (default 16)")
    parser.add_argument("--lora-dropout", type=float, help="dropout on the adapters' input (default 0)")
    parser.add_argument("--target-modules", metavar="NAMES", help="comma-separated layer names for adapters "
                        "(default: every linear projection of the model's family)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="method option, e.g. loss_on=all, packing=true, max_len=512, beta=0.1, loss=ipo, "
                        "val_fraction=0.1, val_data=a.jsonl,b.jsonl; repeat for several")
    parser.add_argument("--world", choices=("auto", "mini", "python"),
                        help="task world of --method selfplay (default auto: python for a chat model, else mini)")
    parser.add_argument("--tasks-from", choices=TASKS_FROM, help="--method selfplay: where the first tasks come from "
                        "(generator: the world's generated tasks, the default; minimal: the identity program alone, "
                        "as Absolute Zero starts; simplest: the generator's shortest programs)")
    parser.add_argument("--reward-file", metavar="FILE.py", help="--method grpo: your reward(prompt, completion) -> "
                        "float (your own code, run in this process)")
    parser.add_argument("--allow-download", action="store_true", help="--base may be a Hugging Face Hub id "
                        "(organisation/name): fetch it once into the Hugging Face cache (needs a connection); the run "
                        "records the local folder")
    add_file_argument(parser, "--base", default=None)
    parser.add_argument("--out", metavar="RUN_DIR", help="run folder to create (required unless --resume)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per event on stdout")
    parser.add_argument("--accept-config-change", action="store_true",
                        help="with --resume: continue although run.json differs from the checkpoint's config")
    parser.add_argument("--force", action="store_true", help="start a new run although the check before it says it "
                        "cannot work on this machine (e.g. its memory estimate is far beyond what is free)")


_FINETUNE_FLAGS = ("method", "data", "columns", "adapter", "lora_rank", "lora_alpha", "lora_dropout", "target_modules",
                   "world", "reward_file", "file")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainSpec fields given as flags (engine/run_commands.TRAIN_FLAGS: the window builds commands from it too)."""
    return {field: getattr(args, field) for field in TRAIN_FLAGS if getattr(args, field) is not None}


def build_request(args: argparse.Namespace) -> tuple[What, Path | None]:
    """What the flags ask the engine's session for (a new run, a resume, a pipeline) and its folder; UserError on
    flags that do not go together. Nothing is planned here: the session plans, fits, defaults and checks."""

    _check_flag_combinations(args)
    if args.pipeline or (args.resume and _is_pipeline(args.resume)):
        return _pipeline_request(args)
    if args.resume:
        if args.out and Path(args.out).resolve() != Path(args.resume).resolve():
            raise UserError("--out cannot be used with --resume (a run resumes in its own folder)")
        if _overrides(args) or args.seed is not None:
            raise UserError("with --resume, edit RUN_DIR/run.json to change settings (then add "
                            "--accept-config-change); flags like --steps are not accepted")
        return ResumeRun(args.resume, accept_change=args.accept_config_change), None
    if not args.out:
        raise UserError("--out RUN_DIR is required: the folder that will hold run.json, metrics and checkpoints")
    if args.base:
        return finetune_request(args), Path(args.out)
    return run_request(args), Path(args.out)


def _pipeline_request(args: argparse.Namespace) -> tuple[What, Path | None]:
    if args.preset or args.base or _overrides(args) or args.seed is not None or args.accept_config_change:
        raise UserError("a pipeline takes its settings from the pipeline file; only --out and --json go with it")
    if args.resume:
        if args.out and Path(args.out).resolve() != Path(args.resume).resolve():
            raise UserError("--out cannot be used with --resume (a pipeline resumes in its own folder)")
        return ResumeRun(args.resume), None
    if not args.out:
        raise UserError("--out DIR is required: the folder that will hold the pipeline's stages")
    return PipelineRun(Path(args.pipeline)), Path(args.out)


def _check_flag_combinations(args: argparse.Namespace) -> None:
    """Flags that only go with others, named in the words of the command line."""

    if args.preset and not args.dataset:
        raise UserError("--preset goes with --dataset; a run config or a resumed run already has its model")
    finetune_flags = [f"--{f.replace('_', '-')}" for f in _FINETUNE_FLAGS if getattr(args, f) not in (None, [])]
    if args.option:
        finetune_flags.append("--option")
    if getattr(args, "allow_download", False) and not args.base:
        raise UserError("--allow-download goes with --base ORGANISATION/NAME (a Hugging Face Hub model to fine-tune)")
    if finetune_flags and not args.base:
        raise UserError(f"{', '.join(finetune_flags)} go with --base MODEL (fine-tuning); a run config, pipeline or "
                        "resumed run already says how it trains")


def run_request(args: argparse.Namespace) -> RunRequest:
    """The engine's request for `--config run.json` or `--dataset DIR [--preset P]` (the flags translated, nothing
    decided: the engine fits, defaults and checks)."""

    if args.config:
        config_path = Path(args.config)
        return RunRequest(config=load_json(config_path), config_folder=str(config_path.parent),
                          train=_overrides(args), seed=args.seed)
    return RunRequest(dataset=args.dataset, preset=args.preset or "tiny", train=_overrides(args), seed=args.seed)


def finetune_request(args: argparse.Namespace) -> RunRequest:
    """The request of `train --method ... --base MODEL --data FILE...` (UserError on bad flags)."""

    if not args.method:
        raise UserError("--base needs --method: sft, lora, qlora, dpo, grpo or selfplay")
    if args.method == "selfplay" and args.data:
        raise UserError("--method selfplay makes its own tasks: it takes no --data")
    if not args.data and args.method != "selfplay":
        what = "prompt files" if args.method == "grpo" else "FILE.jsonl"
        raise UserError(f"--method {args.method} needs --data {what} (repeat --data for several files)")
    for flag, value in (("--world", args.world), ("--tasks-from", args.tasks_from)):
        if value and args.method != "selfplay":
            raise UserError(f"{flag} goes with --method selfplay")
    if args.reward_file and args.method != "grpo":
        raise UserError("--reward-file goes with --method grpo")
    objective = args.method if args.method in ("dpo", "grpo", "selfplay") else "sft"
    options: dict[str, Any] = dict(parse_option(objective, assignment) for assignment in args.option)
    if args.world:
        options["world"] = args.world
    if args.tasks_from:
        options["tasks_from"] = args.tasks_from
    if args.reward_file:
        options["reward_file"] = args.reward_file
    columns = parse_columns(args.columns) if args.columns else {}
    return RunRequest(objective=objective, base_model=_base_folder(args), data=list(args.data or []),
                      columns=columns, adapter=_adapter(args), method_options=options, train=_overrides(args),
                      seed=args.seed)


def _adapter(args: argparse.Namespace) -> dict[str, Any]:
    """The adapter flags as an AdapterSpec dict (--method lora / qlora imply theirs)."""

    implied = {"lora": "lora", "qlora": "qlora"}.get(args.method)
    if implied and args.adapter not in (None, implied):
        raise UserError(f"--method {args.method} trains {implied} adapters; --adapter {args.adapter} contradicts it "
                        f"(use --method sft --adapter {args.adapter})")
    kind = implied or args.adapter or "none"
    lora_flags = {"rank": args.lora_rank, "alpha": args.lora_alpha, "dropout": args.lora_dropout}
    if args.target_modules:
        lora_flags["target_modules"] = [t.strip() for t in args.target_modules.split(",") if t.strip()]
    given = {k: v for k, v in lora_flags.items() if v is not None}
    if given and kind == "none":
        raise UserError("--lora-* and --target-modules need adapters: use --method lora or qlora, or --adapter")
    return {"kind": kind, **given}


def _base_folder(args: argparse.Namespace) -> str:
    """--base as the engine opens it: a local path as it is; a Hub id pulled earlier as its cached copy, offline (with
    --file, the cached GGUF file the pattern picks); with --allow-download (the user's explicit choice) a Hub model
    not in the cache is fetched first, as `models pull` fetches it (the network setting, a bar on stderr, resume,
    checksums)."""

    if Path(args.base).expanduser().exists() and not args.file:
        return str(Path(args.base).expanduser())
    try:
        base = chosen_model(args.base, args.file)
        resolve_base(base)  # says what is wrong: not in the cache (with the pull command), a missing folder
        return base
    except NotCached:
        if not getattr(args, "allow_download", False):
            raise

    return pull_base(args.base, args.file, as_json=args.json)


def run(args: argparse.Namespace) -> int:
    from desktop_app.engine.train.distributed import launched_world_size  # lazy: torch

    what, run_dir = build_request(args)
    session = open_session(what, run_dir)
    # process 0 says what the check found; every other process trains what process 0 accepted
    errors = [] if isinstance(what, ResumeRun) or _other_process() else session.errors()
    if errors and not args.force:
        raise UserError("this run cannot work on this machine: " + " ".join(errors) + " (--force starts it anyway)")
    findings = [] if _other_process() else session.findings
    controls = Controls(answers_faults=launched_world_size() <= 1)
    with StopSignals(controls), BlockedSave(controls) as blocked:
        events = blocked.events(_findings_first(findings, session.events(controls)))
        code = consume_quietly(events) if _other_process() else consume(events, session.notes, as_json=args.json)
    if launched_world_size() > 1:
        _leave_now(code)
    return code


def _findings_first(findings: list[Finding], events: Iterator[Event]) -> Iterator[Event]:
    """The run's events after one log line per finding (a warning, or an error started anyway with --force)."""

    for finding in findings:
        yield Log(finding.level, f"check before start: {finding.message}")
    yield from events


def _leave_now(code: int) -> None:
    """End a torchrun process right after its run: the process group is already closed and every file written, but
    C++ destructors of torch's communication threads at interpreter exit sometimes abort the process ("terminate
    called without an active exception", exit -6, seen under load), which torchrun reports as a failed run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _other_process() -> bool:
    """A process torchrun started besides process 0: it trains, process 0 reports."""
    from desktop_app.engine.train.distributed import launched_rank, launched_world_size  # lazy: torch

    return launched_world_size() > 1 and launched_rank() != 0


def _is_pipeline(path: str) -> bool:
    return is_pipeline_dir(path)


class BlockedSave(SignalScope):
    """A save the disk refused pauses the run (engine/train/saving.py): the CLI says so and how to go on, and while
    it waits SIGUSR1 retries the save (instead of asking for one) and Ctrl+C stops without it. Otherwise both go on
    to the handlers it replaced (StopSignals')."""

    def __init__(self, controls: Controls) -> None:
        self.controls, self.blocked_at = controls, -1

    def handlers(self) -> dict[str, Any]:
        return {"SIGUSR1": self._on_usr1, "SIGINT": self._on_interrupt}

    def _on_usr1(self, signum: int, frame: Any) -> None:
        if self.blocked_at >= 0:
            self.controls.retry.set()
            print("retrying the save", file=sys.stderr, flush=True)
        else:
            self._pass_on(signum, frame)

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        if self.blocked_at >= 0 and not self.controls.stop.is_set():
            self.controls.stop.set()
            print(f"\nstopping without the step {self.blocked_at} checkpoint (Ctrl+C again to quit at once)",
                  file=sys.stderr, flush=True)
        else:
            self._pass_on(signum, frame)

    def _pass_on(self, signum: int, frame: Any) -> None:
        handler = self.old.get(signum)
        if callable(handler):
            handler(signum, frame)

    def events(self, events: Iterator[Event]) -> Iterator[Event]:
        """The run's events, a blocked save said as two lines (the fault; how to go on)."""

        for event in events:
            if event.type != "save_blocked":
                self.blocked_at = -1
                yield event
                continue
            self.blocked_at = event.step
            yield Log("warning", event.message)
            yield Log("warning", f"paused at step {event.step}: free some space, then `kill -USR1 {os.getpid()}` "
                                 "to retry, or Ctrl+C to stop")
