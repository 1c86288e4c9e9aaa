"""What works per family, in the one line the Get-a-model view and the Library show (model/families.works_here):
known families by the table, an unknown one with why GGUF export is not offered, a GGUF file as what it is."""

from __future__ import annotations

import pytest

from desktop_app.engine.model.families import FAMILIES, gguf_loadable, no_gguf_reason, not_in_converter, works_here


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_family_in_the_table_does_it_all(model_type):
    assert works_here(model_type) == "chat, LoRA, QLoRA, GGUF export for llama.cpp and Ollama"


def test_an_unknown_family_chats_and_tunes_and_says_why_not_gguf():
    assert works_here("gpt_neox") == (
        "chat, LoRA, QLoRA; GGUF export: not for this family (this is a 'gpt_neox' model, which llama.cpp's "
        "converter does not know here: export it as a Hugging Face folder or zip instead)")
    assert not_in_converter("falcon") in no_gguf_reason("falcon") and "--format hf" in no_gguf_reason("falcon")
    assert "config names no model type" in works_here(None)


def test_a_gguf_file_is_dequantized_to_fine_tune_and_read_only_where_the_app_reads_its_architecture():
    assert works_here("gemma3", gguf_file=True) == (
        "chat, LoRA, QLoRA (dequantized to fine-tune), GGUF export of the fine-tuned model")
    assert gguf_loadable("llama") and gguf_loadable("mistral") and not gguf_loadable("gemma")
    assert "GGUF export of the fine-tuned model: not for this family" in works_here("starcoder2", gguf_file=True)
    assert works_here("falcon", gguf_file=True).startswith("nothing: this app reads GGUF files of llama, qwen2")
