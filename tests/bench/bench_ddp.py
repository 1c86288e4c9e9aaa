"""Per-step cost of data parallelism on this machine: DDP / FSDP on 2 gloo processes against 1 process doing the
same work (the same rows per process, the same one thread each), so the difference is communication and sync.

    .venv/bin/python tests/bench/bench_ddp.py [--presets tiny mini] [--steps 40]

Scaling efficiency on a 2-core machine says nothing (the two processes share the cores the one process had to
itself); the overhead per step does: what gradients averaging (DDP), gathering/scattering (FSDP) and the loop's
one small all-reduce cost on top of the step.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def step_times(events: list[dict]) -> list[float]:
    steps = [e for e in events if e["type"] == "step"]
    return [b["elapsed_s"] - a["elapsed_s"] for a, b in itertools.pairwise(steps)]


def run(config: dict, folder: Path, name: str, processes: int) -> list[float]:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(config))
    train = ["-m", "desktop_app", "train", "--config", str(path), "--out", str(folder / name), "--json"]
    cmd = [sys.executable, *train] if processes == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}", *train]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return step_times([json.loads(line) for line in proc.stdout.splitlines() if line.strip()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "mini"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rows", type=int, default=8, help="sequences per process per step")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from desktop_app.engine.data.prepare import prepare_dataset
    from desktop_app.engine.devices import cpu_cores
    from desktop_app.engine.specs import DataSpec
    from desktop_app.engine.train.request import config_from_preset

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for _ in prepare_dataset([str(ROOT / "resources" / "sample_corpus")], folder / "ds",
                                 DataSpec(vocab_size=2048, context_length=128)):
            pass
        print(f"CPU cores: {cpu_cores()}; {args.rows} sequences of 128 tokens per process per step, 1 thread per "
              f"process, fp32, median of {args.steps - 6} steps after 5 warm-up steps")
        print("| preset | params | 1 process (same work) | DDP, 2 processes | overhead | FSDP, 2 processes "
              "| overhead |")
        print("|---|---|---|---|---|---|---|")
        for preset in args.presets:
            base, _ = config_from_preset(folder / "ds", preset, steps=args.steps, eval_every=0, save_every=0,
                                         sample_tokens=0, threads=1, precision="fp32", batch_size=args.rows)
            one = run(base.to_dict(), folder, f"{preset}-1", 1)[5:]
            results = {}
            for strategy in ("ddp", "fsdp"):
                config = base.replace(train={**base.train, "batch_size": 2 * args.rows},
                                      distributed={"strategy": strategy}).to_dict()
                results[strategy] = run(config, folder, f"{preset}-{strategy}", 2)[5:]
            t1 = statistics.median(one)
            from desktop_app.engine.model.sizing import count_parameters

            params = count_parameters(base.model_spec()) / 1e6
            cells = []
            for strategy in ("ddp", "fsdp"):
                t = statistics.median(results[strategy])
                cells += [f"{t * 1000:.1f} ms", f"{(t - t1) / t1:+.1%}"]
            print(f"| {preset} | {params:.1f}M | {t1 * 1000:.1f} ms | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
