"""Helpers for the UI tests: a tiny corpus, dataset and trained run built from specs (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

from desktop_app.engine.specs import DataSpec, ModelSpec, RunConfig, TrainSpec

TINY = ModelSpec(family="llama", vocab_size=320, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                 context_length=32)


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = ("the cat sat on the mat and the dog ran to the park where a bird sang a song about the sun "
            "and the moon while children played with a red ball near the old tree")
    words = text.split()
    docs = [" ".join(words[(i * 5 + k) % len(words)] for k in range(20 + i % 11)) + "." for i in range(80)]
    path = folder / "corpus.txt"
    path.write_text("\n\n".join(docs), encoding="utf-8")
    return path


def prepare(folder: Path, out: Path) -> Path:
    from desktop_app.engine.data.prepare import prepare_dataset

    events = list(prepare_dataset([write_corpus(folder)], out,
                                  DataSpec(vocab_size=320, context_length=32, overlap=0, val_fraction=0.1)))
    assert events[-1].reason == "completed", events[-1]
    return out


def train_run(dataset: Path, run_dir: Path, steps: int = 6, save_every: int = 3) -> Path:
    from desktop_app.engine.train.loop import train

    config = RunConfig(model=TINY.to_dict(), dataset=str(dataset),
                       train=TrainSpec(steps=steps, batch_size=4, eval_every=3, eval_batches=1, save_every=save_every,
                                       warmup_steps=1, sample_tokens=4).to_dict())
    events = list(train(config, run_dir))
    assert events[-1].reason == "completed", events[-1]
    return run_dir


def ollama_store(root: Path, data: bytes, name: str = "tiny") -> Path:
    """An Ollama model store under `root` holding the GGUF `data` as model `name:latest`; returns its blob."""
    import hashlib
    import json

    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True)
    blob = root / "blobs" / f"sha256-{digest}"
    blob.write_bytes(data)
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": f"sha256:{digest}"}]}))
    return blob
