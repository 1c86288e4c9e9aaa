"""The Get-a-model view and the Library say per family what works (chat, LoRA, QLoRA, GGUF out), from the engine's
family table; a family the table does not know says why GGUF is not offered."""

from __future__ import annotations

import json

from desktop_app.engine.hub.details import FileSet, RepoDetails
from desktop_app.ui.tabs.library_details import folder_details_html
from desktop_app.ui.widgets.get_model_view import facts_html


def details(model_type: str) -> RepoDetails:
    return RepoDetails(repo_id=f"org/{model_type}-tiny", revision="abc", parameters=500_000_000,
                       file_sets=(FileSet("Safetensors", "safetensors", ("model.safetensors",), 1_000_000_000,
                                          ("*.safetensors",)),),
                       license="apache-2.0", gated=False, has_chat_template=True, last_modified="2026-11-01",
                       model_type=model_type, architecture="", context_length=32768, problem="")


def test_get_a_model_names_the_family_and_what_works_for_it():
    page = facts_html(details("qwen2"))
    assert "Qwen2, Qwen2.5 (qwen2)" in page and "What works" in page
    assert "chat, LoRA, QLoRA, GGUF out (llama.cpp, Ollama)" in page
    other = facts_html(details("gpt_neox"))
    assert "GGUF out: not for this family (export it as a Hugging Face folder)" in other and "chat, LoRA" in other


def test_the_library_names_the_family_and_what_works_for_it(tmp_path):
    for model_type, expected in (("gemma2", "Gemma 2 (gemma2)"), ("falcon", "falcon")):
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type, "num_hidden_layers": 2}))
        page = folder_details_html(folder)
        assert expected in page and "What works" in page
        assert ("GGUF out (llama.cpp, Ollama)" in page) == (model_type == "gemma2")
