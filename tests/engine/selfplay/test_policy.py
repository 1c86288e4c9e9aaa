"""The policy's completion log-probs over packed rows equal each episode computed alone (values, entropies and
gradients), for llama and gpt2; how rows are packed into lines."""

from __future__ import annotations

import random

import pytest
import torch

from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.selfplay import policy
from desktop_app.engine.selfplay.policy import Episode, completion_logps, pack_lines
from desktop_app.engine.specs import ModelSpec

SPECS = {"llama": ModelSpec("llama", 64, 32, 2, 4, 2, 80, 96, init_std=0.1),
         "gpt2": ModelSpec("gpt2", 64, 32, 2, 4, 4, 80, 96, init_std=0.1)}


def test_rows_pack_into_lines_longest_first_and_each_once() -> None:
    lengths = [30, 10, 70, 25, 5, 120, 40]
    lines = pack_lines(lengths, 100)
    assert sorted(i for line in lines for i in line) == list(range(len(lengths)))
    assert [5] in lines  # longer than a line: a line of its own
    assert all(sum(lengths[i] for i in line) <= 100 for line in lines if line != [5])
    assert lines[0] == [5] and lines[1][0] == 2  # first fit, longest first
    assert len(lines) == 3  # 120 | 70 + 30 | 40 + 25 + 10 + 5


def _episodes(seed: int) -> list[Episode]:
    rng = random.Random(seed)
    return [Episode([rng.randrange(1, 64) for _ in range(rng.randrange(1, 30))],
                    [rng.randrange(1, 64) for _ in range(rng.randrange(0, 12))], rng.choice([1.0, -1.0]), "solver",
                    "deduction") for _ in range(9)]


def _alone(model: torch.nn.Module, episodes: list[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each episode through the model on its own: no padding, no packing."""
    width = max(len(e.completion) for e in episodes)
    logps, entropy = torch.zeros(len(episodes), width), torch.zeros(len(episodes), width)
    for i, e in enumerate(episodes):
        p, c = len(e.prompt), len(e.completion)
        if not c:
            continue
        logits = model(input_ids=torch.tensor([e.prompt + e.completion]), use_cache=False).logits[0, p - 1: p + c - 1]
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        logps[i, :c] = log_probs.gather(1, torch.tensor(e.completion)[:, None])[:, 0]
        entropy[i, :c] = -(log_probs.exp() * log_probs).sum(-1).detach()
    return logps, entropy


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_packed_log_probs_equal_each_episode_alone(family: str, monkeypatch) -> None:
    monkeypatch.setattr(policy, "PACKED_LINE", 48)  # several lines, several episodes in most of them
    model = build_model(SPECS[family], seed=0).train()
    episodes = _episodes(3)
    assert any(not e.completion for e in episodes)
    (packed, entropy), mask = completion_logps(model, episodes, with_entropy=True)
    expected, expected_entropy = _alone(model, episodes)
    assert mask.tolist() == [[1.0] * len(e.completion) + [0.0] * (mask.shape[1] - len(e.completion))
                             for e in episodes]
    torch.testing.assert_close(packed, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy, expected_entropy, rtol=1e-5, atol=1e-5)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(0))
    grads = []
    for logps in (packed, expected):
        model.zero_grad()
        (logps * weights * mask).sum().backward(retain_graph=True)
        grads.append([p.grad.clone() for p in model.parameters()])
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
