"""Tiny run folders for the comparison tests, written through the engine's own writers (RunConfig.save,
MetricsWriter, the events' to_dict): the files a real run leaves, made in milliseconds."""

from __future__ import annotations

from pathlib import Path

from desktop_app.engine.events import EvalResult, Finished, Started, StepMetrics
from desktop_app.engine.run_folder import RUN_FILE, MetricsWriter
from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec


def write_run(folder: Path, *, lr: float, steps: int = 6, seed: int = 1, losses: list[float] | None = None) -> Path:
    """A finished pretraining run: a loss curve that falls faster with a larger lr, evaluations every 3 steps."""
    folder.mkdir(parents=True, exist_ok=True)
    train = TrainSpec(steps=steps, batch_size=8, lr=lr, eval_every=3).to_dict()
    RunConfig(model=ModelSpec("llama", 300, 32, 1, 2, 2, 64, 32).to_dict(), dataset=str(folder.parent / "data"),
              train=train, seed=seed).save(folder / RUN_FILE)
    losses = losses or [5.0 - lr * 100 * s for s in range(1, steps + 1)]
    writer = MetricsWriter(folder)
    writer.write(Started().to_dict())
    for step, loss in enumerate(losses, start=1):
        writer.write(StepMetrics(step, steps, {"loss": loss, "lr": lr, "tokens_per_s": 1000.0 + step}).to_dict())
        if step % 3 == 0:
            writer.write(EvalResult(step, {"val_loss": loss + 0.5}).to_dict())
    writer.write(Finished("completed", steps).to_dict())
    writer.close()
    return folder
