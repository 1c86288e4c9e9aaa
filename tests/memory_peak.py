"""A training run's measured peak memory beside the app's estimate of it (run as a child process by
tests/engine/test_memory_estimate.py: each measurement needs a fresh process).

    python tests/memory_peak.py ADAPTER MICRO_BATCH   ->  one JSON line: measured and estimated bytes

The run: full SFT ("none") or LoRA ("lora") of a small llama on chats of known length, 2 steps of a batch of 8 at
`MICRO_BATCH` per pass, fp32 on 1 thread, through train() itself. Measured: the process's peak resident memory
during train() (Linux VmHWM, reset just before) above what it held before, with every library the run uses
already imported and the model folder written. Estimated: memory_plan.memory_plan of the same run config (the
data's longest example, as the Train tab shows it).
"""

from __future__ import annotations

import gc
import json
import random
import sys
import tempfile
from pathlib import Path

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def world(root: Path) -> tuple[Path, Path]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer

    rng = random.Random(0)
    tok = hf_tokenizer(train_tokenizer([" ".join(rng.choice(WORDS) for _ in range(200)) for _ in range(50)],
                                       "byte-bpe", 512, min_frequency=2))
    config = LlamaConfig(vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
                         num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    base = root / "base"
    LlamaForCausalLM(config).save_pretrained(base, safe_serialization=True)
    tok.save_pretrained(base)
    data = root / "chats.jsonl"
    with data.open("w", encoding="utf-8") as fh:
        for _ in range(32):
            fh.write(json.dumps({"messages": [{"role": "user", "content": " ".join(rng.choices(WORDS, k=12))},
                                              {"role": "assistant", "content": " ".join(rng.choices(WORDS, k=150))}]})
                     + "\n")
    return base, data


def measure(adapter: str, micro: int) -> dict[str, float]:
    import peft  # noqa: F401  (everything the run imports, imported before the baseline)
    import torch

    import desktop_app.engine.finetune.adapters
    import desktop_app.engine.objectives.sft  # noqa: F401
    from desktop_app.engine.specs import RunConfig
    from desktop_app.engine.train.loop import train
    from desktop_app.engine.train.memory_plan import memory_plan

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        base, data = world(Path(tmp))
        config = RunConfig.from_dict({
            "objective": "sft", "base_model": str(base), "data": [str(data)],
            "adapter": {"kind": adapter} if adapter != "none" else {},
            "train": {"steps": 2, "batch_size": 8, "micro_batch_size": micro, "eval_every": 0, "save_every": 0,
                      "precision": "fp32", "threads": 1, "trackers": [], "sample_tokens": 0, "lr": 1e-4}})
        plan = memory_plan(config, config.train_spec(), False)
        gc.collect()
        before = status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
        for event in train(config, Path(tmp) / "run"):
            if event.type == "finished" and event.reason != "completed":
                raise SystemExit(f"the run ended {event.reason}: {event.message}")
        return {"measured": status("VmHWM") - before, "estimated": plan.total(), "seq_len": plan.shape.seq_len,
                "length": plan.length}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
