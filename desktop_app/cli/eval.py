"""`eval`: measure one or more models (runs, checkpoints, exports, Hugging Face folders) side by side.

    eval MODEL [MODEL ...] [--world auto|mini|python] [--qa FILE.jsonl] [--text FILES_OR_DATASET ...]
         [--benchmark NAMES [--limit N] [--fewshot K] [--benchmark-dir DIR]]
         [--samples K] [--batch N] [--threads N] [--json]

Held-out tasks of a task world (greedy pass@1 per type with a 95% interval; pass@K sampled with --samples K),
questions and answers through the chat template (--qa), perplexity and bits per byte on text (--text), standard
benchmarks of lm-evaluation-harness (--benchmark arc_easy,hellaswag: the harness's metrics with their standard
errors, shown "value ± stderr"; a fine-tune is compared with its base model when that is in the table, else every
model with the first). With no
evaluation named, what fits the model (engine/evaluate/defaults.py): perplexity and bits per byte on a pretraining
run's own validation split, the held-out tasks of a self-play run's world, a chat model's task world. Answers of a
chat model count when its reply contains the expected one (--qa-match exact to ask for more); the output says
which. Every model meets the same tasks; the results are kept in each run's (or export's) evaluations.json. --json
prints one JSON object per model: {"model", "name", "kind", "step", "solve_rate/TYPE", "solve_rate/TYPE/ci95",
"pass@K/TYPE", "qa_accuracy", "qa_match", "bits_per_byte", "perplexity", "bench/TASK/METRIC",
"bench/TASK/METRIC/stderr", "bench/TASK/items", "bench/TASK/fewshot", "benchmark_harness", ...}, only for what was
asked, and "compared_with" + "difference" {figure: value minus that model's} for every model but the reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from desktop_app.cli.reporting import StopSignals
from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.baselines import differences
from desktop_app.engine.evaluate.defaults import default_measures
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.events import Controls

TYPES = ("deduction", "abduction", "induction")
MATCH_WORDS = {"contains": "the reply contains an expected answer",
               "exact": "the reply's answer equals an expected one"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help="runs, checkpoints, exports, Hugging Face folders, GGUF files or Hub ids pulled earlier "
                        "(ORG/NAME, or ORG/NAME:QUANT for one GGUF file); all meet the same tasks")
    parser.add_argument("--world", choices=("auto", "mini", "python", "none"), default=None,
                        help="held-out tasks of this task world (default, when nothing else is asked: a self-play "
                             "run's world, a chat model's; auto = python for a chat model, mini otherwise; none = "
                             "skip)")
    parser.add_argument("--types", default="", metavar="T1,T2",
                        help="task types (default: deduction,abduction,induction)")
    parser.add_argument("--per-type", type=int, default=0, metavar="N",
                        help="held-out tasks per type (default: the world's, 400 mini / 100 python)")
    parser.add_argument("--heldout-seed", type=int, default=None, metavar="S",
                        help="seed of the held-out set (default 9002: not the set self-play picks its best "
                             "checkpoint on)")
    parser.add_argument("--world-options", default="", metavar="JSON", help="task world options, e.g. '{\"depth\": 2}'")
    parser.add_argument("--samples", type=int, default=0, metavar="K",
                        help="also sample K answers per task and report pass@K (default: greedy pass@1 only)")
    parser.add_argument("--temperature", type=float, default=None, help="temperature of the pass@K samples (0.8)")
    parser.add_argument("--qa", default="", metavar="FILE.jsonl",
                        help="questions and answers ({\"question\", \"answer\"} per line), asked through the chat "
                             "template")
    parser.add_argument("--qa-match", choices=("auto", "exact", "contains"), default=None,
                        help="qa_accuracy counts replies that contain the answer, or exact answers (default: "
                             "contains for a chat model, exact otherwise)")
    parser.add_argument("--text", nargs="+", default=[], metavar="FILES_OR_DATASET",
                        help="text files, folders or a prepared dataset: perplexity and bits per byte (default, "
                             "when nothing else is asked: a pretraining run's own validation split)")
    parser.add_argument("--max-text-bytes", type=int, default=None, metavar="N",
                        help="score the first N bytes of the text, the same for every model (default 400,000)")
    parser.add_argument("--benchmark", default="", metavar="NAMES",
                        help="standard benchmarks of lm-evaluation-harness, comma separated (e.g. "
                             "arc_easy,hellaswag,mmlu; or tasks of --benchmark-dir); needs the [benchmarks] extra "
                             "and the data fetched once: `benchmarks fetch NAMES`")
    parser.add_argument("--limit", type=int, default=0, metavar="N",
                        help="score only the first N items of each benchmark task (quicker, noisier; not comparable "
                             "with published figures)")
    parser.add_argument("--fewshot", type=int, default=-1, metavar="K",
                        help="worked examples before each benchmark item (default: each task's own setting)")
    parser.add_argument("--benchmark-dir", default="", metavar="DIR",
                        help="a folder of your own task YAML files in the harness's format, found by name")
    parser.add_argument("--prompt-style", choices=("auto", "plain", "chat"), default="auto",
                        help="how tasks are asked: plain text or the chat template (default auto)")
    parser.add_argument("--max-new-tokens", type=int, default=0, metavar="N",
                        help="longest answer (default 40 plain, 160 chat)")
    parser.add_argument("--batch", type=int, default=None, metavar="N",
                        help="prompts decoded together (default: automatic, about 100 on a CPU)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="CPU threads (default: automatic, all cores unless the machine is busy)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    parser.add_argument("--no-save", action="store_true", help="do not add the results to the models' folders")
    parser.add_argument("--json", action="store_true", help="one JSON object per model on stdout")


def chosen_measures(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The evaluations asked for, or (none named) those that fit the models, and the reason in words ("" when
    asked): EvalSpec fields."""

    fitting = default_measures(args.models, qa=args.qa)
    match = args.qa_match or fitting.fields["qa_match"]
    if args.world is not None or args.qa or args.text or benchmark_names(args):
        return {"world": args.world or "none", "qa": args.qa, "text": list(args.text), "qa_match": match}, ""
    if fitting.fields["world"] == "none" and not fitting.fields["text"]:
        raise UserError(f"nothing to evaluate: {fitting.note}; give --text FILES (perplexity and bits per byte), "
                        "--qa FILE.jsonl or --world mini|python")
    return {**fitting.fields, "qa_match": match}, fitting.note


def benchmark_names(args: argparse.Namespace) -> list[str]:
    """--benchmark's names (a comma list; spaces and empty names dropped)."""
    return [n.strip() for n in args.benchmark.split(",") if n.strip()]


def spec_from_args(args: argparse.Namespace, measures: dict[str, Any] | None = None) -> Any:
    """The EvalSpec of the arguments; `measures`: chosen_measures' fields (read from the models when None)."""

    data: dict[str, Any] = {"prompt_style": args.prompt_style, "device": args.device, "samples": args.samples,
                            "per_type": args.per_type, "max_new_tokens": args.max_new_tokens,
                            **(measures if measures is not None else chosen_measures(args)[0])}
    if benchmark_names(args):
        data.update(benchmarks=benchmark_names(args), benchmark_limit=args.limit, benchmark_fewshot=args.fewshot,
                    benchmark_dir=args.benchmark_dir)
    elif args.limit or args.fewshot != -1 or args.benchmark_dir:
        raise UserError("--limit, --fewshot and --benchmark-dir go with --benchmark NAMES: name the benchmarks")
    if args.types:
        data["task_types"] = [t.strip() for t in args.types.split(",") if t.strip()]
    if args.world_options:
        try:
            data["world_options"] = json.loads(args.world_options)
        except json.JSONDecodeError as exc:
            raise UserError(f"--world-options must be JSON ({exc.msg}), got {args.world_options!r}") from None
    for key, value in (("heldout_seed", args.heldout_seed), ("temperature", args.temperature),
                       ("max_text_bytes", args.max_text_bytes), ("batch", args.batch),
                       ("threads", args.threads)):
        if value is not None:
            data[key] = value
    return EvalSpec.from_dict(data).check()


def run(args: argparse.Namespace) -> int:
    from desktop_app.engine.evaluate.runner import evaluate_models  # lazy: torch

    measures, why = chosen_measures(args)
    spec = spec_from_args(args, measures)
    if why:  # none named: say what was chosen, once the spec is known to be good
        print(f"no evaluation named: {why}", file=sys.stderr, flush=True)
    controls = Controls()
    rows: list[dict[str, Any]] = []
    reason = "failed"
    with StopSignals(controls):
        for event in evaluate_models(args.models, spec, controls, save=not args.no_save):
            if event.type == "model_evaluated":
                row = {"model": event.model, "name": event.name, "kind": event.kind, "step": event.step,
                       **event.metrics, "seconds": round(event.seconds, 2)}
                rows.append(row)
                if args.json:
                    print(json.dumps(with_difference(row, rows), allow_nan=True), flush=True)
                else:
                    print(f"{event.name}: evaluated in {event.seconds:.1f} s"
                          + (f" (kept in {event.saved})" if event.saved else ""), file=sys.stderr, flush=True)
            elif event.type == "progress" and not args.json:
                print(f"\r{event.stage}: {int(event.done)}/{int(event.total)} {event.unit} {event.message}"[:150]
                      .ljust(150), end="", file=sys.stderr, flush=True)
            elif event.type == "log" and event.level != "info":
                print(f"\n[{event.level}] {event.message}", file=sys.stderr, flush=True)
            elif event.type == "finished":
                reason = event.reason
                if not args.json:
                    print(f"\r{event.message}".ljust(150), file=sys.stderr, flush=True)
    if not args.json and rows:
        print(table(rows))
        matched = sorted({str(r["qa_match"]) for r in rows if r.get("qa_match")})
        if matched:
            print(f"qa_accuracy: {' / '.join(matched)} match ({MATCH_WORDS.get(matched[0], '')})"
                  if len(matched) == 1 else f"qa_accuracy: {' / '.join(matched)} match")
    return 0 if reason == "completed" else 1


def with_difference(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A JSON row with "compared_with" (the model it is compared with: its base when in the table, else the first)
    and "difference" {figure: value minus that model's}; the reference row as it is."""

    found = differences(rows).get(str(row["model"]))
    return row if found is None else {**row, "compared_with": found[0], "difference": found[1]}


def _cell(key: str, value: Any, row: dict[str, Any]) -> str:
    """One figure as the table shows it: a benchmark's "value ± stderr", a rate with its 95% interval."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    text = f"{value:.4g}" if key in ("perplexity", "bits_per_byte") else f"{value:.3f}"
    interval, stderr = row.get(f"{key}/ci95"), row.get(f"{key}/stderr")
    if isinstance(interval, list) and len(interval) == 2:
        text += f" ({interval[0]:.2f}-{interval[1]:.2f})"
    if isinstance(stderr, float):
        text += f" ± {stderr:.3f}"
    return text


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        for key, value in row.items():
            counted = key.startswith("heldout_in_training/")  # held-out programs the run trained on: 0 when clean
            if (isinstance(value, float) or counted) and key not in columns and key not in ("seconds",) \
                    and not key.startswith("tasks/") and not key.endswith("/stderr"):
                columns.append(key)
    return columns


def table(rows: list[dict[str, Any]]) -> str:
    """The models side by side: one row each, a column per figure that any of them has; with benchmarks, under each
    model compared with another (its base when that is in the table, else the first model) a "Δ vs NAME" row of
    differences."""

    columns = _columns(rows)
    names = {str(r["model"]): str(r["name"]) for r in rows}
    compared = differences(rows) if any(c.startswith("bench/") for c in columns) else {}
    cells = [["model", *columns]]
    for row in rows:
        cells.append([str(row["name"]), *(_cell(key, row.get(key), row) for key in columns)])
        if str(row["model"]) in compared:
            reference, delta = compared[str(row["model"])]
            cells.append([f"  Δ vs {names.get(reference, reference)}",
                          *(f"{delta[key]:+.3f}" if key in delta else "" for key in columns)])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells)
