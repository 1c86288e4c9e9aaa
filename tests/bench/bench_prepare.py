"""Benchmark: dataset preparation throughput vs raw `tokenizers` encode_batch, and peak memory.

    .venv/bin/python tests/bench/bench_prepare.py --mb 200      # the issue's ~200 MB corpus
    .venv/bin/python tests/bench/bench_prepare.py --mb 20       # quicker
    .venv/bin/python tests/bench/bench_prepare.py --mb 50 --single-line   # one 50 MB line

The corpus is generated into a temporary folder with the sample-corpus grammar (different seeds per
file). One tokenizer (byte-level BPE, trained on the embedded sample corpus) is used by both sides:
    raw:      every file read whole into memory, split into the same documents, encode_batch on
              ~1 MB batches (only the encode calls are timed: the strictest baseline)
    prepare:  prepare_dataset(..., tokenizer_file=...) end to end in a child process: scan +
              sha256 + decode + encode + write streams + manifest (wall time, peak RSS of the child)
Figures are printed; nothing is asserted (timings on a shared machine are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def make_corpus(folder: Path, mb: float, files: int, single_line: bool) -> int:
    from desktop_app.engine.data.sample_corpus import generate

    target = int(mb * 1_000_000)
    per_file = target // files
    total = 0
    seed = 1
    for i in range(files):
        path = folder / f"part{i:02d}.txt"
        written = 0
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            while written < per_file:
                for text in generate(seed).values():
                    if single_line:
                        text = text.replace("\n", " ")
                    text = text[: per_file - written]
                    fh.write(text)
                    written += len(text)
                    if written >= per_file:
                        break
                    if not single_line:
                        fh.write("\n\n")
                        written += 2
                seed += 1
        total += path.stat().st_size
    return total


def _cpu() -> float:
    """CPU seconds of this process, all threads (steadier than wall time on a busy machine)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_prepare(args: argparse.Namespace) -> None:
    from desktop_app.engine.data.prepare import prepare_dataset
    from desktop_app.engine.events import Finished
    from desktop_app.engine.specs import DataSpec

    spec = DataSpec(tokenizer_file=args.tokenizer, context_length=256) if args.tokenizer else \
        DataSpec(vocab_size=args.vocab, context_length=256)
    start = time.perf_counter()
    cpu0 = _cpu()
    result = {}
    for event in prepare_dataset([args.corpus], args.out, spec):
        if isinstance(event, Finished):
            result = {"reason": event.reason, "tokens": sum(event.result["tokens"].values()),
                      "message": event.message}
    result["seconds"] = time.perf_counter() - start
    result["cpu_seconds"] = _cpu() - cpu0
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def raw_baseline(corpus: Path, tokenizer: Path) -> dict[str, float]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    timings = {"encode_batch": 0.0, "encode_batch_fast": 0.0}
    cpu = dict.fromkeys(timings, 0.0)
    tokens = 0
    for path in sorted(corpus.glob("*.txt")):
        docs = [d for d in path.read_text(encoding="utf-8").split("\n\n") if d.strip()]
        # Same batching as the pipeline: ~1 MB of text per call.
        batches, batch, size = [], [], 0
        # Like the pipeline, never hand the tokenizer a giant string: cut long documents in pieces.
        pieces = (d[i:i + (1 << 18)] for d in docs for i in range(0, len(d), 1 << 18))
        for d in pieces:
            batch.append(d)
            size += len(d)
            if size >= 1 << 20:
                batches.append(batch)
                batch, size = [], 0
        if batch:
            batches.append(batch)
        for name in timings:
            fn = getattr(tok, name)
            t0, c0 = time.perf_counter(), _cpu()
            for b in batches:
                out = fn(b, add_special_tokens=False)
                if name == "encode_batch":
                    tokens += sum(len(e.ids) for e in out)
            timings[name] += time.perf_counter() - t0
            cpu[name] += _cpu() - c0
    return {**timings, "tokens": tokens, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="corpus size in MB (default 200)")
    parser.add_argument("--files", type=int, default=8, help="number of corpus files")
    parser.add_argument("--single-line", action="store_true", help="one file, no newlines at all")
    parser.add_argument("--train", action="store_true", help="also time prepare with tokenizer training")
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_prepare(args)
        return

    from desktop_app.engine.data.sample_corpus import sample_corpus_files
    from desktop_app.engine.data.tokenization import save_tokenizer, train_tokenizer

    with tempfile.TemporaryDirectory(prefix="bench_prepare_") as tmp_str:
        tmp = Path(tmp_str)
        corpus = tmp / "corpus"
        corpus.mkdir()
        t0 = time.perf_counter()
        nbytes = make_corpus(corpus, args.mb, 1 if args.single_line else args.files, args.single_line)
        print(f"corpus: {nbytes / 1e6:.1f} MB in {len(list(corpus.iterdir()))} file(s), "
              f"generated in {time.perf_counter() - t0:.1f} s")
        texts = (p.read_text(encoding="utf-8") for p in sample_corpus_files())
        tok_path = save_tokenizer(train_tokenizer(texts, "byte-bpe", vocab_size=args.vocab), tmp / "tok")

        raw = raw_baseline(corpus, tok_path)
        mb = nbytes / 1e6
        print(f"raw encode_batch:      {mb / raw['encode_batch']:7.2f} MB/s ({raw['encode_batch']:.1f} s wall, "
              f"{raw['cpu']['encode_batch']:.1f} s CPU, {raw['tokens']:,} tokens)")
        print(f"raw encode_batch_fast: {mb / raw['encode_batch_fast']:7.2f} MB/s ({raw['encode_batch_fast']:.1f} s "
              f"wall, {raw['cpu']['encode_batch_fast']:.1f} s CPU)")

        runs = [("prepare (given tokenizer)", str(tok_path))]
        if args.train:
            runs.append(("prepare (trains tokenizer)", ""))
        for label, tok_arg in runs:
            out = tmp / f"ds{len(tok_arg)}"
            cmd = [sys.executable, __file__, "--child", "--corpus", str(corpus), "--out", str(out),
                   "--tokenizer", tok_arg, "--vocab", str(args.vocab)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
            if proc.returncode:
                print(proc.stderr)
                raise SystemExit(f"{label} failed")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            rate = mb / res["seconds"]
            print(f"{label}: {rate:7.2f} MB/s ({res['seconds']:.1f} s wall, {res['cpu_seconds']:.1f} s CPU, "
                  f"{res['tokens']:,} tokens incl. EOS, {res['reason']}), peak RSS {res['peak_rss_mb']:.0f} MB")
            if tok_arg:
                print(f"  throughput ratio vs raw encode_batch: {raw['encode_batch'] / res['seconds']:.2f}x wall, "
                      f"{raw['cpu']['encode_batch'] / res['cpu_seconds']:.2f}x CPU (goal >= 0.8x); vs "
                      f"encode_batch_fast: {raw['encode_batch_fast'] / res['seconds']:.2f}x wall, "
                      f"{raw['cpu']['encode_batch_fast'] / res['cpu_seconds']:.2f}x CPU")
        print(f"cores: {os.cpu_count()} (shared machine: timings are noisy)")


if __name__ == "__main__":
    main()
