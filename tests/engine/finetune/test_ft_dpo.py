"""DPO: the loss against a hand computation, reference modes, metrics on disk, and proof that it learns."""

from __future__ import annotations

import math

import pytest
import torch
from ft_helpers import events_of, ft_config, make_base, preference_pairs, write_jsonl

from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.train.loop import train

DPO_METRICS = ("rewards_chosen", "rewards_rejected", "reward_margin", "preference_accuracy")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("dpo")
    return {"base": make_base(root / "base", "llama", width=64, initializer_range=0.3),
            "pairs": write_jsonl(root / "pairs.jsonl", preference_pairs(40, seed=3)), "root": root}


def _hand_logp(model, prompt: list[int], answer: list[int]) -> float:
    """log p(answer | prompt), one token at a time with plain Python sums."""
    ids = torch.tensor([prompt + answer])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    return sum(float(logp[len(prompt) - 1 + k, t]) for k, t in enumerate(answer))


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_dpo_loss_matches_a_hand_computation_on_a_fixed_batch(world, loss_type):
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.finetune.chat_template import as_hf_tokenizer
    from desktop_app.engine.finetune.examples import build_preference_examples
    from desktop_app.engine.objectives.dpo import DPOObjective

    tok = as_hf_tokenizer(world["base"])
    pairs, _ = build_preference_examples([world["pairs"]], tok, 128)
    pairs = pairs[:3]
    policy = AutoModelForCausalLM.from_pretrained(world["base"]).eval()
    reference = AutoModelForCausalLM.from_pretrained(world["base"]).eval()
    with torch.no_grad():  # the policy has moved away from the reference
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05, alpha=1.0) if p.ndim == 2 else None
    beta = 0.3
    objective = DPOObjective()
    objective._train, objective._pad, objective._beta, objective._loss = pairs, tok.pad_token_id, beta, loss_type
    objective._tables = {"train.chosen": torch.tensor([_hand_logp(reference, e.prompt_ids, e.chosen_ids)
                                                        for e in pairs], dtype=torch.float32),
                         "train.rejected": torch.tensor([_hand_logp(reference, e.prompt_ids, e.rejected_ids)
                                                          for e in pairs], dtype=torch.float32)}
    (micro,) = objective.split([0, 1, 2], 3)
    with torch.no_grad():
        loss, metrics = objective.loss(policy, micro)

    expected, chosen_r, rejected_r = [], [], []
    for i, e in enumerate(pairs):
        pc, pr = _hand_logp(policy, e.prompt_ids, e.chosen_ids), _hand_logp(policy, e.prompt_ids, e.rejected_ids)
        rc, rr = float(objective._tables["train.chosen"][i]), float(objective._tables["train.rejected"][i])
        if loss_type == "sigmoid":
            z = beta * ((pc - rc) - (pr - rr))
            expected.append(-math.log(1.0 / (1.0 + math.exp(-z))))
        else:
            nc, nr = len(e.chosen_ids), len(e.rejected_ids)
            h = (pc - rc) / nc - (pr - rr) / nr
            expected.append((h - 1.0 / (2.0 * beta)) ** 2)
        chosen_r.append(beta * (pc - rc))
        rejected_r.append(beta * (pr - rr))
    assert float(loss) == pytest.approx(sum(expected) / 3, rel=1e-4, abs=1e-6)
    assert float(metrics["rewards_chosen"]) == pytest.approx(sum(chosen_r) / 3, rel=1e-4, abs=1e-5)
    assert float(metrics["rewards_rejected"]) == pytest.approx(sum(rejected_r) / 3, rel=1e-4, abs=1e-5)
    assert float(metrics["reward_margin"]) == pytest.approx((sum(chosen_r) - sum(rejected_r)) / 3, rel=1e-4,
                                                            abs=1e-5)
    wins = sum(c > r for c, r in zip(chosen_r, rejected_r, strict=True))
    assert float(metrics["preference_accuracy"]) == pytest.approx(wins / 3)


@pytest.mark.parametrize("adapter", [{}, {"kind": "lora", "rank": 4}])
def test_reference_precomputed_or_live_gives_the_same_run_and_metrics_reach_disk(world, tmp_path, adapter):
    runs = {}
    for mode in ("precompute", "live"):
        config = ft_config(world["base"], [world["pairs"]], objective="dpo", adapter=adapter, steps=6, eval_every=3,
                           options={"reference": mode, "beta": 0.2})
        events = list(train(config, tmp_path / mode))
        assert events[-1].reason == "completed"
        runs[mode] = [v for r in read_metrics(tmp_path / mode) if r["type"] == "step"
                      for v in (r["step"], r["loss"], *(r[k] for k in DPO_METRICS))]
        evals = [r for r in read_metrics(tmp_path / mode) if r["type"] == "eval"]
        assert {"val_loss", "val_reward_margin", "val_preference_accuracy"} <= set(evals[-1])
    assert runs["precompute"] == pytest.approx(runs["live"], rel=1e-5, abs=1e-6)
    assert (tmp_path / "precompute" / "reference_logps.safetensors").is_file()
    step, loss, chosen, rejected = runs["precompute"][:4]
    assert step == 1 and loss == pytest.approx(math.log(2), rel=1e-5)  # policy == reference at step 1: loss log 2
    assert chosen == rejected == 0.0


def _banned_share(model_dir, prompts: list[str], word: str = "bad") -> float:
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(model_dir, device="cpu")
    spec = GenerateSpec(max_new_tokens=8, temperature=1.0, top_k=0, samples=6, seed=7, chat=True)
    texts = [e.text for e in stream_text(loaded, prompts, spec, threads=1) if e.type == "generation"]
    return sum(word in t for t in texts) / len(texts)


def test_dpo_learns_to_prefer_the_chosen_answers_and_avoids_the_banned_word(world, tmp_path):
    # 1. SFT on both answers of every prompt: the model says "good" and "bad" about equally often.
    pairs = preference_pairs(60, seed=11)
    mixed = [{"messages": [{"role": "user", "content": p["prompt"]}, {"role": "assistant", "content": p[k]}]}
             for p in pairs for k in ("chosen", "rejected")]
    sft = list(train(ft_config(world["base"], [write_jsonl(tmp_path / "mixed.jsonl", mixed)], steps=60,
                               batch_size=16, lr=3e-3), tmp_path / "sft"))
    assert sft[-1].reason == "completed"
    prompts = [f"tell me about the {w}" for w in ("cat", "moon", "rock", "lake", "star", "tree")]
    before = _banned_share(tmp_path / "sft", prompts)
    # 2. DPO from the SFT run, with held-out pairs.
    data = write_jsonl(tmp_path / "pairs.jsonl", pairs)
    config = ft_config(tmp_path / "sft", [data], objective="dpo", adapter={"kind": "lora", "rank": 8}, steps=40,
                       batch_size=8, lr=2e-3, eval_every=20, options={"beta": 0.2, "val_fraction": 0.2})
    events = list(train(config, tmp_path / "dpo"))
    assert events[-1].reason == "completed"
    evals = events_of(events, "eval")
    assert evals[-1].metrics["val_preference_accuracy"] > 0.8
    assert evals[-1].metrics["val_reward_margin"] > evals[0].metrics["val_reward_margin"] > 0
    after = _banned_share(tmp_path / "dpo", prompts)
    assert before > 0.2 and after < before / 2, (before, after)
