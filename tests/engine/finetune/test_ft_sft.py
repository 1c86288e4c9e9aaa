"""Full SFT, LoRA and QLoRA: learning, the loss maths, packing, data verdicts, PEFT format, merge and export,
generation from an unmerged adapter run, added chat tokens, NaN and early stopping."""

from __future__ import annotations

import json

import pytest
import torch
from ft_helpers import (
    events_of,
    file_hashes,
    ft_config,
    make_base,
    make_tokenizer,
    newest,
    preference_pairs,
    repeat_chats,
    write_jsonl,
)

from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.train.loop import train


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    return {
        "base": make_base(root / "base", "llama", width=64),
        "chats": write_jsonl(root / "chats.jsonl", repeat_chats(48, seed=1)),
        "root": root,
    }


def _exact_match(model_dir, held) -> float:
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(model_dir, device="cpu")
    prompts = [r["messages"][0]["content"] for r in held]
    texts = {}
    for event in stream_text(loaded, prompts, GenerateSpec(max_new_tokens=6, temperature=0.0, chat=True), threads=1):
        if event.type == "generation":
            texts[event.sample] = event.text.strip()
    return sum(texts[i] == r["messages"][1]["content"] for i, r in enumerate(held)) / len(held)


def test_sft_learns_the_task_exact_match_on_held_out_prompts_rises(tmp_path):
    # "repeat A B" -> "A B" on 400 generated records; 30 other records are never trained on.
    base = make_base(tmp_path / "base", "llama", width=64, layers=2)
    data = write_jsonl(tmp_path / "train.jsonl", repeat_chats(400, seed=1))
    held = repeat_chats(30, seed=99)
    before = _exact_match(base, held)
    config = ft_config(base, [data], steps=200, batch_size=16, lr=3e-3, warmup_steps=10, eval_every=100,
                       options={"val_fraction": 0.05})
    events = list(train(config, tmp_path / "run"))
    assert events[-1].reason == "completed"
    evals = [e.metrics["val_loss"] for e in events_of(events, "eval")]
    assert evals[-1] < evals[0] * 0.6  # held-out assistant loss falls
    after = _exact_match(tmp_path / "run", held)
    assert before <= 0.1 and after >= before + 0.4, (before, after)


def test_loss_is_the_token_mean_of_the_batch_whatever_the_micro_batch(world, tmp_path):
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.finetune.chat_template import as_hf_tokenizer
    from desktop_app.engine.finetune.examples import build_sft_examples

    first = {}
    for micro in (1, 2, 4):
        config = ft_config(world["base"], [world["chats"]], steps=1, batch_size=4, micro_batch_size=micro,
                           options={"val_fraction": 0.0})
        events = list(train(config, tmp_path / f"m{micro}"))
        first[micro] = events_of(events, "step")[0].metrics["loss"]
    assert first[1] == pytest.approx(first[4], rel=1e-5) and first[2] == pytest.approx(first[4], rel=1e-5)

    # ...and equals a hand computation: HF's own shifted cross-entropy over the assistant tokens of the 4
    # examples the seeded batch source picks first.
    from desktop_app.engine.data.batches import IndexBatchSource

    tok = as_hf_tokenizer(world["base"])
    examples, _ = build_sft_examples([world["chats"]], tok, 128)
    batch, _ = IndexBatchSource(len(examples), seed=1).take(4)
    model = AutoModelForCausalLM.from_pretrained(world["base"]).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in batch:
            ids = torch.tensor([examples[i].input_ids])
            labels = torch.tensor([examples[i].labels])
            n = int((labels[0, 1:] != -100).sum())
            total += float(model(input_ids=ids, labels=labels).loss) * n
            count += n
    assert first[4] == pytest.approx(total / count, rel=1e-5)


def test_packing_never_lets_examples_attend_to_each_other(world):
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.finetune.chat_template import as_hf_tokenizer
    from desktop_app.engine.finetune.examples import build_sft_examples, pack_examples
    from desktop_app.engine.objectives.sft import collate, masked_ce_sum

    for family in ("llama", "gpt2"):
        base = make_base(world["root"] / f"pack-{family}", family)
        tok = as_hf_tokenizer(base)
        examples, _ = build_sft_examples([world["chats"]], tok, 128)
        model = AutoModelForCausalLM.from_pretrained(base).eval()
        packed = pack_examples(examples[:6], 128, tok.pad_token_id)
        assert len(packed) < 6  # several examples share a window
        rows = [(r["input_ids"], r["labels"], r["position_ids"]) for r in packed]
        # packing drops each example's first label; compute the unpacked reference the same way
        singles = [(e.input_ids, [-100, *e.labels[1:]], None) for e in examples[:6]]
        with torch.no_grad():
            packed_sum, packed_n = masked_ce_sum(model, collate(rows, tok.pad_token_id))
            single = [masked_ce_sum(model, collate([r], tok.pad_token_id)) for r in singles]
        assert packed_n == sum(n for _, n in single)
        assert float(packed_sum) == pytest.approx(sum(float(s) for s, _ in single), rel=1e-5)


def test_every_bad_record_is_reported_with_its_line(world, tmp_path):
    data = tmp_path / "mixed.jsonl"
    good = [json.dumps(r) for r in repeat_chats(6)]
    data.write_text("\n".join([good[0], "{not json", good[1],
                               json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                        {"role": "assistant", "content": ""}]}),
                               *good[2:]]) + "\n", encoding="utf-8")
    events = list(train(ft_config(world["base"], [data], steps=1, batch_size=2), tmp_path / "run"))
    logs = [e.message for e in events_of(events, "log")]
    assert any(f"{data}:2: error" in m for m in logs), logs
    assert any(f"{data}:4:" in m for m in logs), logs
    recorded = [json.loads(line) for line in (tmp_path / "run" / "data_verdicts.jsonl").read_text().splitlines()]
    assert {(r["line"], r["status"]) for r in recorded if r["line"]} >= {(2, "error")}
    assert events[-1].reason == "completed"


def test_lora_changes_only_the_adapter_saves_peft_format_merges_exactly_and_generates(world, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.export.hf import export_model
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    base = world["base"]
    before = file_hashes(base)
    original = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(base).state_dict().items()}
    run = tmp_path / "run"
    config = ft_config(base, [world["chats"]], steps=12, adapter={"kind": "lora", "rank": 4, "alpha": 8},
                       eval_every=6, sample_tokens=4)
    captured = {}

    # keep a handle on the trained PeftModel: the loop's model is the one the objective sees
    from desktop_app.engine.objectives.sft import SFTObjective

    class Spy(SFTObjective):
        def setup(self, ctx, model):
            captured["model"] = model
            super().setup(ctx, model)

    events = list(train(config, run, objective=Spy()))
    assert events[-1].reason == "completed"
    losses = [e.metrics["loss"] for e in events_of(events, "step")]
    assert losses[-1] < losses[0]
    # base tensors bit-identical in memory after training, the base folder untouched
    trained_base = {k.replace(".base_layer", ""): v for k, v in captured["model"].get_base_model().state_dict().items()
                    if "lora_" not in k}
    assert trained_base.keys() == original.keys()
    for name, tensor in original.items():
        assert torch.equal(trained_base[name], tensor), name
    assert file_hashes(base) == before
    assert events_of(events, "sample")  # samples at each evaluation, through the chat template

    # PEFT's own format, loaded by real peft
    folder = newest(run)
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in folder.iterdir()}
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), folder).eval()
    ids = torch.tensor([[5, 17, 33, 80, 120, 9]])
    with torch.no_grad():
        reference = peft_model(input_ids=ids).logits

    # merge and export: a plain HF folder whose logits equal base + adapter
    out = tmp_path / "merged"
    result = list(export_model(run, "hf", out, merge=True))
    assert result[-1].reason == "completed"
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, reference, atol=1e-5)
    assert not any(p.name.startswith("adapter_") for p in out.iterdir())
    # the zip and GGUF exports work on the merged model; without --merge an adapter run is refused clearly
    assert list(export_model(run, "zip", tmp_path / "m.zip", merge=True))[-1].reason == "completed"
    assert list(export_model(run, "gguf", tmp_path / "m.gguf", merge=True, gguf_type="f32"))[-1].reason == \
        "completed"
    from desktop_app.engine.errors import UserError

    with pytest.raises(UserError, match="--merge"):
        list(export_model(run, "hf", tmp_path / "nomerge"))

    # generation straight from the unmerged adapter run (merged in memory), same greedy text as the export
    spec = GenerateSpec(max_new_tokens=5, temperature=0.0, chat=True)
    texts = []
    for source in (run, out):
        loaded = load_model(source, device="cpu")
        texts.append([e.token_ids for e in stream_text(loaded, "repeat cat dog", spec, threads=1)
                      if e.type == "generation"])
    assert texts[0] == texts[1]


def test_a_tokenizer_without_chat_tokens_gets_them_and_lora_trains_their_rows(tmp_path, world):
    from transformers import AutoModelForCausalLM

    base = make_base(tmp_path / "old", "llama", tokenizer=make_tokenizer(chat_tokens=False))
    rows = AutoModelForCausalLM.from_pretrained(base).get_input_embeddings().weight.shape[0]
    events = list(train(ft_config(base, [world["chats"]], steps=6, adapter={"kind": "lora"}), tmp_path / "run"))
    assert events[-1].reason == "completed"
    logs = " ".join(e.message for e in events_of(events, "log"))
    assert "<|im_start|>" in logs and f"from {rows} to {rows + 2} rows" in logs and "row(s) train too" in logs
    from desktop_app.engine.model.loading import load_model

    loaded = load_model(tmp_path / "run", device="cpu")
    assert loaded.model.get_input_embeddings().weight.shape[0] == rows + 2
    assert "<|im_start|>" in loaded.tokenizer.get_vocab() and loaded.tokenizer.chat_template


def test_qlora_trains_a_4bit_base_with_8bit_adamw_on_cpu(world, tmp_path):
    import bitsandbytes as bnb

    from desktop_app.engine.objectives.sft import SFTObjective

    captured = {}

    class Spy(SFTObjective):
        def setup(self, ctx, model):
            captured["model"] = model
            super().setup(ctx, model)

    # rank 64 x width 64: each adapter matrix has 4,096 values, where bitsandbytes switches to 8-bit moments
    config = ft_config(world["base"], [world["chats"]], steps=10, lr=1e-2, adapter={"kind": "qlora", "rank": 64},
                       eval_every=5, save_every=5)
    events = list(train(config, tmp_path / "run", objective=Spy()))
    assert events[-1].reason == "completed"
    logs = " ".join(e.message for e in events_of(events, "log"))
    assert "4 bits (nf4, double quantization)" in logs and "8-bit AdamW" in logs
    layer = captured["model"].get_base_model().model.layers[0].self_attn.q_proj.base_layer
    assert isinstance(layer, bnb.nn.Linear4bit) and layer.weight.quant_state.nested  # NF4 + double quant
    evals = [e.metrics["val_loss"] for e in events_of(events, "eval")]
    assert evals[-1] < evals[0]
    opt = json.loads((newest(tmp_path / "run") / "optimizer.json").read_text())
    assert "t_beta3" in opt["param_groups"][0]  # bitsandbytes' AdamW8bit state, saved without pickle
    from safetensors.torch import load_file

    state = load_file(str(newest(tmp_path / "run") / "optimizer.safetensors"))
    moments = [t for k, t in state.items() if k.endswith(".state1")]
    assert any(t.dtype == torch.uint8 for t in moments)  # 8-bit moments (small matrices keep 32-bit ones)


def test_lora_and_full_both_learn_the_same_data(tmp_path):
    # A base with weights of a trained model's scale (a random init of std 0.02 gives a 1-layer model
    # logits too flat for low-rank updates to matter within a few steps).
    base = make_base(tmp_path / "base", "llama", width=64, initializer_range=0.3)
    data = write_jsonl(tmp_path / "chats.jsonl", [
        {"messages": [{"role": "user", "content": p["prompt"]}, {"role": "assistant", "content": p["chosen"]}]}
        for p in preference_pairs(48, seed=1)])
    before = file_hashes(base)
    for name, adapter, lr in (("full", {}, 3e-3), ("lora", {"kind": "lora", "rank": 8}, 3e-2)):
        events = list(train(ft_config(base, [data], steps=30, batch_size=8, lr=lr, adapter=adapter, eval_every=30),
                            tmp_path / name))
        start = events_of(events, "step")[0].metrics["loss"]  # the base's loss on the first batch
        final = events_of(events, "eval")[-1].metrics["val_loss"]
        assert final < 0.5 * start, (name, start, final)
    assert file_hashes(base) == before


def test_nonfinite_steps_are_skipped_and_early_stopping_works(world, tmp_path):
    from desktop_app.engine.objectives.sft import SFTObjective

    class Poisoned(SFTObjective):
        calls = 0

        def loss(self, model, micro):
            loss, metrics = super().loss(model, micro)
            Poisoned.calls += 1
            return (loss * float("nan") if Poisoned.calls == 3 else loss), metrics

    events = list(train(ft_config(world["base"], [world["chats"]], steps=5), tmp_path / "nan", objective=Poisoned()))
    assert events[-1].reason == "completed"
    assert next(e.message for e in events_of(events, "log") if "non-finite" in e.message).startswith("step 3:")
    assert [e.step for e in events_of(events, "step")] == [1, 2, 3, 4, 5]  # the bad batch was skipped, not applied

    # a learning rate far too high makes held-out loss rise: patience 1 stops the run early, saved
    events = list(train(ft_config(world["base"], [world["chats"]], steps=40, lr=0.5, eval_every=2,
                                  early_stopping_patience=1, warmup_steps=0), tmp_path / "early"))
    assert events[-1].reason == "early_stopped", events[-1]
    assert events_of(events, "checkpoint")
    assert read_metrics(tmp_path / "early")[-1]["reason"] == "early_stopped"
