"""Benchmark: where a self-play step's time goes, and rollout speed against transformers' generate().

    .venv/bin/python tests/bench/bench_selfplay.py --base DEMO/pretrain [--steps 40]

BASE is a model trained on the mini world (e.g. the `pretrain` run of `selfplay-demo`). Prints:
  * the share of a step spent generating rollouts, checking answers (task world / executor) and in the
    update (forward + backward + optimizer), over `--steps` steps of the real loop (one thread);
  * rollout tokens/s of our batched sampler (KV cache, lean runner) against `model.generate()` with the
    same prompts, samples per prompt, length and sampling settings, same thread count.
Goals (issue 13): rollouts >= 1.5x generate(); the executor never more than 20% of a step.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import torch

    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.objectives.selfplay import SelfPlayObjective
    from desktop_app.engine.recipes.selfplay_demo import DEMO_SELFPLAY
    from desktop_app.engine.selfplay.rollout import TextCodec, sample_completions
    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.tasks import get_world
    from desktop_app.engine.train.loop import train

    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)

    # 1. shares of a step
    objective = SelfPlayObjective({**DEMO_SELFPLAY, "heldout_per_type": 8})
    rounds: list[float] = []
    play = objective.play_round

    def timed(index: int):
        t0 = time.perf_counter()
        batch = play(index)
        rounds.append(time.perf_counter() - t0)
        return batch

    objective.play_round = timed
    spec = TrainSpec(steps=args.steps, batch_size=64, micro_batch_size=32, lr=2e-4, eval_every=0, save_every=0,
                     sample_tokens=0, log_every=1, threads=1)
    stats = []
    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig(base_model=args.base, objective="selfplay", train=spec.to_dict(), seed=0)
        last = None
        for event in train(config, Path(tmp) / "run", objective=objective):
            if event.type == "step":
                if last is not None:
                    stats.append((event.elapsed_s - last, event.metrics["check_share"]))
                last = event.elapsed_s
    step_time = sum(s for s, _ in stats[5:]) / len(stats[5:])
    round_time = sum(rounds[6:]) / len(rounds[6:])
    check = sum(c for _, c in stats[5:]) / len(stats[5:]) * round_time
    print(f"self-play step: {step_time * 1e3:.0f} ms = generation {(round_time - check) / step_time:.0%}, "
          f"checking {check / step_time:.0%}, update {(step_time - round_time) / step_time:.0%}")

    # 2. rollouts against generate()
    loaded = load_model(args.base, device="cpu")
    model, text = loaded.model, TextCodec(loaded.tokenizer)
    world = get_world("mini", **DEMO_SELFPLAY["world_options"])
    tasks = world.generate("deduction", 16, 5)
    prompts = [text.encode(world.solve_prompt(t)) for t in tasks]
    samples, new = 4, 24
    eos = loaded.tokenizer.eos_token_id

    def ours() -> int:
        out = sample_completions(model, prompts, samples=samples, max_new_tokens=new, temperature=1.0, seed=1,
                                 stop_ids=set(), pad_id=0)
        return sum(len(o) for o in out)

    pad = loaded.tokenizer.pad_token_id if loaded.tokenizer.pad_token_id is not None else 0
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (longest - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])

    def theirs() -> int:
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                 num_return_sequences=samples, max_new_tokens=new, min_new_tokens=new,
                                 pad_token_id=pad, eos_token_id=eos)
        return (out.shape[1] - longest) * out.shape[0]

    for fn in (ours, theirs):
        fn()
    rates = {}
    for name, fn in (("ours", ours), ("generate()", theirs)):
        best = 0.0
        for _ in range(3):
            t0 = time.perf_counter()
            tokens = fn()
            best = max(best, tokens / (time.perf_counter() - t0))
        rates[name] = best
    print(f"rollouts, {len(prompts)} prompts x {samples} samples x {new} tokens, 1 thread: ours "
          f"{rates['ours']:,.0f} tokens/s, generate() {rates['generate()']:,.0f} tokens/s, "
          f"{rates['ours'] / rates['generate()']:.2f}x")


if __name__ == "__main__":
    main()
