"""Vocabularies of models trained from scratch are padded to a multiple of 64 (fast GPU matmuls); the tokenizer keeps
its real size, and the exports stay exact: the Hugging Face folder and the GGUF file load in transformers and
generate the very tokens the app generates."""

from __future__ import annotations

import pytest
import torch
from train_helpers import make_dataset

from desktop_app.engine.data.token_store import TokenStore
from desktop_app.engine.events import Finished
from desktop_app.engine.export.hf import export_model
from desktop_app.engine.model.architecture import padded_vocab
from desktop_app.engine.presets import PRESETS
from desktop_app.engine.train.loop import train
from desktop_app.engine.train.request import config_from_preset

PROMPT = "the cat sat"


def test_padded_vocab_rounds_up_to_64():
    assert [padded_vocab(n) for n in (1, 64, 65, 300, 50257, 32000)] == [64, 64, 128, 320, 50304, 32000]
    assert all(spec.vocab_size % 64 == 0 for _, spec in PRESETS.values())


@pytest.fixture(scope="module")
def padded_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("padded")
    dataset = make_dataset(root / "ds", n_docs=120)
    config, _ = config_from_preset(dataset, "tiny", seed=0, steps=60, batch_size=8, lr=3e-3, warmup_steps=5,
                                       eval_every=0, save_every=0, sample_tokens=0, threads=1, precision="fp32")
    assert TokenStore(dataset).vocab_size == 300 and config.model_spec().vocab_size == 320
    events = list(train(config, root / "run"))
    assert isinstance(events[-1], Finished) and events[-1].reason == "completed"
    return root / "run"


def _our_greedy(run_dir, n: int = 12) -> list[int]:
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(run_dir, device="cpu")
    assert loaded.model.config.vocab_size == 320 and len(loaded.tokenizer) == 300
    stats = [e for e in stream_text(loaded, PROMPT, GenerateSpec(max_new_tokens=n, temperature=0.0))
             if e.type == "generation"]
    return list(stats[0].token_ids)


def _transformers_greedy(model, tokenizer, n: int = 12) -> list[int]:
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def test_hf_and_gguf_exports_of_a_padded_model_generate_the_same_tokens(padded_run, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ours = _our_greedy(padded_run)
    assert ours and all(t < 300 for t in ours)  # the padding rows are never a target, so never chosen here

    hf = tmp_path / "hf"
    assert list(export_model(padded_run, "hf", hf))[-1].reason == "completed"
    tokenizer = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf)
    assert model.config.vocab_size == 320 and len(tokenizer) == 300
    assert _transformers_greedy(model, tokenizer)[:len(ours)] == ours

    gguf_file = tmp_path / "model.gguf"
    assert list(export_model(padded_run, "gguf", gguf_file, gguf_type="f32"))[-1].reason == "completed"
    from_gguf = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf_file.name)
    assert from_gguf.config.vocab_size == 320
    assert _transformers_greedy(from_gguf, tokenizer)[:len(ours)] == ours


def test_padded_ids_are_never_generated_even_when_their_logits_lead(padded_run):
    """A padded row no tokenizer token has is never chosen: greedy, sampled, beams, rollouts and the static path's
    device sampler all stop at the tokenizer's size, even when those rows' logits are the largest."""
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.generate.device_sampling import DeviceSampling, SamplingSettings
    from desktop_app.engine.generate.sampling import Sampler
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.selfplay.rollout import sample_completions
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(padded_run, device="cpu")
    head = loaded.model.get_output_embeddings().weight
    with torch.no_grad():  # make the padded rows win every step: only the tokenizer's limit keeps them out
        head[300:] = head[:300].abs().max() * 50
    specs = [GenerateSpec(max_new_tokens=8, temperature=0.0), GenerateSpec(max_new_tokens=8, temperature=1.0, seed=3),
             GenerateSpec(max_new_tokens=8, temperature=0.0, num_beams=3)]
    for spec in specs:
        stats = [e for e in stream_text(loaded, PROMPT, spec) if e.type == "generation"]
        assert stats and all(0 <= t < 300 for s in stats for t in s.token_ids), spec
    prompt = loaded.tokenizer(PROMPT)["input_ids"]
    rolled = sample_completions(loaded.model, [prompt], samples=3, max_new_tokens=6, seed=1, tokens=300)
    assert all(t < 300 for ids in rolled for t in ids)
    unlimited = sample_completions(loaded.model, [prompt], samples=1, max_new_tokens=2, temperature=0.0)
    assert unlimited[0][0] >= 300  # the check above means something: without the limit a padded id wins

    logits = torch.zeros(2, 320)
    logits[:, 310] = 100.0
    assert (Sampler(SamplingSettings(temperature=0.0, tokens=300), vocab_size=320)(logits) < 300).all()
    device_sampling = DeviceSampling(2, 320, torch.device("cpu"))
    for settings in (SamplingSettings(tokens=300), SamplingSettings(temperature=1.0, tokens=300)):
        device_sampling.start(settings, seed=0, prompts=[[1], [2]])
        device_sampling.draw(2)
        assert (device_sampling.pick(logits.clone()) < 300).all()
