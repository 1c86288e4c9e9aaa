"""Benchmark: download speed of the app's `pull` (engine/hub/download.py) against a plain
`huggingface_hub.snapshot_download` of the same files from the same local server (issue 37's goal: >= 0.95x).

    .venv/bin/python tests/bench/bench_hub_download.py                       # 1 file of 600 MB, 9 rounds (~1 min)
    .venv/bin/python tests/bench/bench_hub_download.py --files 3             # 3 files of 200 MB (a sharded model)
    .venv/bin/python tests/bench/bench_hub_download.py --out docs/bench/hub_download_DATE.json

The tests' Hub server (tests/hub_server.py) runs in this process and serves one repository of random GGUF files
generated here; each download runs in a child process (imports done before the clock starts) into a fresh Hugging
Face cache, the two sides alternating (neither always first), the previous run's files deleted and synced to disk
before the next starts. Timed from the call to the last byte on disk:
    app:    every event of pull(repo, ["*.gguf"]) (metadata, plan and disk check, download, and the check of every
            file against the Hub's sha256, which snapshot_download does not do)
    plain:  snapshot_download(repo, allow_patterns=["*.gguf"]) (huggingface_hub's defaults: 8 workers)
speed = bytes / seconds; ratio = median app speed / median plain speed, end to end and (ratio_transfer_only) with
the app's clock stopped at its last progress event (every byte in place, before the final check), and for each
position in a round (first, second: a run can slow the one after it). Nothing is asserted (a shared machine is
noisy); the figures are printed and, with --out, written as JSON with the date, machine and CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

REPO = "bench-org/big-model-GGUF"
PATTERNS = ["*.gguf"]


def child(side: str, repo: str) -> None:
    """One timed download in this fresh process (HF_* variables set by the parent); prints a JSON line."""
    from huggingface_hub import snapshot_download

    from desktop_app.engine.hub.download import pull

    start = time.perf_counter()
    transfer = 0.0
    if side == "app":
        finished = None
        for event in pull(repo, PATTERNS):
            if event.type == "download" and event.done == event.total and not transfer:
                transfer = time.perf_counter() - start  # every byte in place; the sha256 check follows
            elif event.type == "downloaded":
                finished = event
        assert finished is not None and finished.verified, finished
        folder = Path(finished.folder)
        folder = folder.parent if folder.is_file() else folder
    else:
        folder = Path(snapshot_download(repo, allow_patterns=PATTERNS))
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in folder.glob("*.gguf"))
    print(json.dumps({"side": side, "seconds": seconds, "transfer_seconds": transfer or seconds, "bytes": size}))


def timed_run(side: str, url: str, work: Path) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=work))  # a fresh cache each run
    env = {**os.environ, "HF_ENDPOINT": url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"),
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "XDG_CONFIG_HOME": str(home / "config")}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "AZR_NETWORK", "HF_TOKEN"):
        env.pop(name, None)
    ran = subprocess.run([sys.executable, __file__, "--child", side], env=env, capture_output=True, text=True,
                         timeout=600)
    if ran.returncode != 0:
        raise SystemExit(f"{side} download failed:\n{ran.stderr[-3000:]}")
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    subprocess.run(["rm", "-rf", str(home)], check=False)
    os.sync()  # the next run starts with nothing of this one still being written back to the disk
    time.sleep(1)
    return result


def serve(mb: float, files: int):
    """The tests' Hub server with one repository of `files` random GGUF files, `mb` MB in all."""
    from hub_server import HubRepo, HubServer

    per_file = int(mb * 1_000_000) // files
    names = [f"big-model-{i + 1:05d}-of-{files:05d}.gguf" for i in range(files)] if files > 1 else \
        ["big-model-Q8_0.gguf"]
    repo = HubRepo(REPO, {name: os.urandom(per_file) for name in names}, gguf={}, tags=["gguf", "text-generation"],
                   parameters=per_file * files)
    server = HubServer([repo]).start()
    return server, per_file * files


def summarize(runs: list[dict], total: int) -> dict[str, float]:
    """Median speeds (MB/s) and their ratios: end to end (the app's sha256 check included) and to the last byte."""
    for r in runs:
        assert r["bytes"] == total, r

    def speeds(side: str, key: str, position: str = "") -> list[float]:
        return [r["bytes"] / r[key] / 1e6 for r in runs if r["side"] == side and position in ("", r["position"])]

    median = statistics.median
    app, app_transfer, plain = speeds("app", "seconds"), speeds("app", "transfer_seconds"), speeds("plain", "seconds")
    return {"app_mb_per_s_median": median(app), "app_transfer_mb_per_s_median": median(app_transfer),
            "plain_mb_per_s_median": median(plain), "ratio": median(app) / median(plain),
            "ratio_transfer_only": median(app_transfer) / median(plain),
            "ratio_by_position": {p: median(speeds("app", "seconds", p)) / median(speeds("plain", "seconds", p))
                                  for p in ("first", "second")},
            "app_mb_per_s_all": [round(x, 1) for x in app], "plain_mb_per_s_all": [round(x, 1) for x in plain]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=600, help="total size of the files, MB (default 600)")
    parser.add_argument("--files", type=int, default=1, help="how many files share it (default 1)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of one app and one plain download (default 9)")
    parser.add_argument("--out", default="", help="write the raw figures as JSON here")
    parser.add_argument("--child", choices=("app", "plain"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, REPO)
        return
    server, total = serve(args.mb, args.files)
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
            for round_index in range(args.rounds):
                order = ("app", "plain") if round_index % 2 == 0 else ("plain", "app")
                for position, side in zip(("first", "second"), order, strict=True):
                    result = timed_run(side, server.url, Path(tmp))
                    runs.append({"round": round_index, "position": position, **result})
                    print(f"round {round_index + 1} {side:5s}: {result['seconds']:6.2f} s, "
                          f"{result['bytes'] / result['seconds'] / 1e6:7.1f} MB/s (last byte at "
                          f"{result['transfer_seconds']:.2f} s)", flush=True)
    finally:
        server.stop()
    figures = summarize(runs, total)
    print(f"\napp {figures['app_mb_per_s_median']:.1f} MB/s with its sha256 check "
          f"({figures['app_transfer_mb_per_s_median']:.1f} MB/s to the last byte), plain snapshot_download "
          f"{figures['plain_mb_per_s_median']:.1f} MB/s (medians): ratio {figures['ratio']:.3f} end to end, "
          f"{figures['ratio_transfer_only']:.3f} to the last byte (goal >= 0.95); by position in a round: "
          + ", ".join(f"{p} {r:.3f}" for p, r in figures["ratio_by_position"].items()))
    if args.out:
        write_record(args, runs, figures, total)


def write_record(args: argparse.Namespace, runs: list[dict], figures: dict, total: int) -> None:
    import huggingface_hub

    from desktop_app.engine.devices import cpu_name

    record = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
              "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "huggingface_hub": huggingface_hub.__version__},
              "setup": {"server": "tests/hub_server.py (local, same session)", "files": args.files, "bytes": total,
                        "rounds": args.rounds, "patterns": PATTERNS, "fresh_cache_each_run": True},
              "figures": figures, "runs": runs}
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
