"""What a front end picks for the person when they have not: the model to generate with (the newest finished run)
and the seed of each reply (a new one every time, so asking again gives another reply; the one used is shown and
can be set to get that reply back). Qt-free; the Generate tab renders these choices.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

from desktop_app.engine.run_folder import METRICS_FILE, last_record, list_committed
from desktop_app.engine.specs import GenerateSpec

# Seeds drawn for a reply stay short: a person reads one off the screen and types it back.
SEED_LIMIT = 1_000_000
ENDED_WELL = ("completed", "stopped", "early_stopped")  # a run that ended with a model worth using
SEED_SOURCE: random.Random = random.SystemRandom()  # where drawn seeds come from (tests put a seeded one here)


def uses_seed(spec: GenerateSpec) -> bool:
    """Whether the seed changes what `spec` generates: sampling does, greedy decoding and beam search do not."""
    return spec.num_beams <= 1 and spec.temperature > 0


def draw_seed(avoid: int | None = None, rng: random.Random | None = None) -> int:
    """A fresh seed in 1..SEED_LIMIT-1, never `avoid` (the last one: asking again must draw again)."""
    rng = rng or SEED_SOURCE
    while True:
        seed = rng.randrange(1, SEED_LIMIT)
        if seed != avoid:
            return seed


def reply_spec(spec: GenerateSpec, *, new_seed: bool, rng: random.Random | None = None) -> GenerateSpec:
    """The settings one reply is generated with: a freshly drawn seed when `new_seed` and the seed matters, else
    `spec` as it is (a seed the person set reproduces its reply exactly)."""
    if not new_seed or not uses_seed(spec):
        return spec
    return spec.replace(seed=draw_seed(avoid=spec.seed, rng=rng))


def finished_at(run: str | Path) -> float | None:
    """When a run ended well (its metrics file's time: the "finished" record is written last), or None for one
    still training, one that failed or crashed, or one with no checkpoint to load."""
    folder = Path(run)
    record = last_record(folder)
    if not record or record.get("type") != "finished" or record.get("reason") not in ENDED_WELL:
        return None
    if not list_committed(folder):
        return None
    try:
        return (folder / METRICS_FILE).stat().st_mtime
    except OSError:
        return None


def newest_finished_run(runs: Iterable[str | Path]) -> Path | None:
    """Of `runs`, the one that finished last (see `finished_at`); None when none has finished."""
    ended = [(t, Path(r)) for r in runs if (t := finished_at(r)) is not None]
    return max(ended, key=lambda pair: pair[0])[1] if ended else None
