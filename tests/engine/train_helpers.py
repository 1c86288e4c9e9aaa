"""Fixtures for training tests: a tiny dataset folder in the TokenStore layout and tiny run configs.

The dataset is written directly (tokenizer trained with our tokenization module, ids written as the
token store expects), so training tests do not depend on the ingest pipeline.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.objectives.causal_lm import CausalLMObjective
from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec

SENTENCES = [
    "the cat sat on the mat.", "a dog ran in the park.", "birds sing in the morning.",
    "the sun is warm today.", "we read a book at night.", "rain falls on the roof.",
    "the river runs to the sea.", "children play in the yard.",
]


def corpus(n_docs: int = 60, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(SENTENCES) for _ in range(rng.randint(3, 8))) for _ in range(n_docs)]


def make_dataset(folder: Path, *, context: int = 32, n_docs: int = 60, vocab_size: int = 300,
                 val_fraction: float = 0.2, seed: int = 0) -> Path:
    """A prepared dataset folder (manifest.json, tokenizer.json, train.bin, val.bin, *.docs.npy)."""
    from desktop_app.engine.data.tokenization import eos_id, save_tokenizer, train_tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    docs = corpus(n_docs, seed)
    tok = train_tokenizer(docs, "byte-bpe", vocab_size, min_frequency=2)
    save_tokenizer(tok, folder / "tokenizer.json")
    eos = eos_id(tok)
    n_val = max(1, int(len(docs) * val_fraction))
    splits = {"train": docs[n_val:], "val": docs[:n_val]}
    dtype = np.uint16
    info: dict[str, Any] = {}
    for split, texts in splits.items():
        ids: list[int] = []
        lengths = []
        for text in texts:
            piece = [*tok.encode(text, add_special_tokens=False).ids, eos]
            ids += piece
            lengths.append(len(piece))
        np.asarray(ids, dtype=dtype).tofile(folder / f"{split}.bin")
        np.save(folder / f"{split}.docs.npy", np.asarray(lengths, dtype=np.int64), allow_pickle=False)
        info[split] = {"documents": len(texts), "tokens": len(ids),
                       "bytes": sum(len(t.encode("utf-8")) for t in texts)}
    manifest = {
        "format_version": 1, "dtype": "uint16",
        "tokenizer": {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "eos_id": eos},
        "chunking": {"context_length": context, "overlap": 0},
        "splits": info,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return folder


def tiny_model(vocab: int, context: int = 32, **changes: Any) -> ModelSpec:
    return ModelSpec("llama", vocab, 32, 1, 2, 2, 64, context).replace(**changes)


def tiny_config(dataset: Path, *, seed: int = 1, model: dict[str, Any] | None = None, **train: Any) -> RunConfig:
    from desktop_app.engine.data.token_store import TokenStore

    store = TokenStore(dataset)
    spec = tiny_model(store.vocab_size, store.context_length, **(model or {}))
    defaults = {"steps": 10, "batch_size": 8, "lr": 3e-3, "warmup_steps": 2, "eval_every": 0, "save_every": 0,
                "sample_tokens": 0, "threads": 1, "log_every": 1,
                "precision": "fp32"}  # fp32: the loop logic under test must not depend on the CPU kind
    defaults.update(train)
    return RunConfig(model=spec.to_dict(), dataset=str(dataset), train=TrainSpec(**defaults).to_dict(), seed=seed)


def run_all(events_iter: Any) -> list[Any]:
    return list(events_iter)


def step_losses(events: list[Any]) -> dict[int, float]:
    return {e.step: e.metrics["loss"] for e in events if e.type == "step"}


def metrics_losses(run_dir: Path) -> dict[int, float]:
    from desktop_app.engine.run_folder import read_metrics

    return {r["step"]: r["loss"] for r in read_metrics(run_dir) if r["type"] == "step"}


def final_weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    from desktop_app.engine.run_folder import list_committed

    return load_file(str(list_committed(run_dir)[-1] / "model.safetensors"))


class PoisonedObjective(CausalLMObjective):
    """Returns NaN for the listed loss() calls (counted across micro-batches)."""

    def __init__(self, bad_calls: set[int] | None = None, always: bool = False):
        super().__init__()
        self.calls = 0
        self.bad_calls = bad_calls or set()
        self.always = always

    def loss(self, model, micro):
        loss, metrics = super().loss(model, micro)
        self.calls += 1
        if self.always or self.calls in self.bad_calls:
            loss = loss * float("nan")
        return loss, metrics
