"""The Get-a-model view and the Library say per family what works (chat, LoRA, QLoRA, GGUF export), in the engine's
words from its family table: a known family (qwen2, gemma2) by the names people know it by, an unknown one (gpt_neox,
falcon) with why GGUF export is not offered, a repository of GGUF files as a GGUF model (dequantized to fine-tune)."""

from __future__ import annotations

import json

import pytest

from desktop_app.engine.model.families import no_gguf_reason, not_in_converter
from desktop_app.ui.widgets.get_model_view import GetModelView

QWEN, NEOX, GGUF_REPO = "tiny-org/qwen2-tiny", "tiny-org/pythia-tiny", "tiny-org/tiny-chat-GGUF"
WAIT = 120_000  # ms: two cores shared by several test sessions


def hub_idle(ctx) -> bool:
    return not any(k.startswith("hub-") for k in ctx.runner.running_kinds())


@pytest.fixture
def view(window, hub_server, qtbot):
    """The Get-a-model view, opened from the Library (its first search done)."""
    window.tabs.setCurrentWidget(window.library_tab)
    window.library_tab.get_model_btn.click()
    found = window.findChild(GetModelView)
    qtbot.waitUntil(lambda: hub_idle(window.ctx), timeout=WAIT)
    return found


def open_repo(view, qtbot, repo: str) -> str:
    """Choose `repo` in the results; its facts once its details and every file set's verdicts are in."""
    row = view.result_row(repo)
    assert row >= 0, [m.repo_id for m in view.results]
    view.results_table.selectRow(row)
    qtbot.waitUntil(lambda: view.details is not None and view.details.repo_id == repo
                    and len(view.fits) == len(view.details.file_sets), timeout=WAIT)
    return view.facts.text()


def shape(model_type: str, architecture: str) -> bytes:
    """A config.json with the shape the memory estimate reads (no weights are stored: the repository is size-only)."""
    return json.dumps({"architectures": [architecture], "model_type": model_type, "hidden_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                       "intermediate_size": 128, "vocab_size": 320, "max_position_embeddings": 512}).encode()


def test_get_a_model_says_what_works_for_each_family(view, hub_server, qtbot):
    for repo, model_type, architecture in ((QWEN, "qwen2", "Qwen2ForCausalLM"),
                                           (NEOX, "gpt_neox", "GPTNeoXForCausalLM")):
        hub_server.add_repo(repo, {"config.json": shape(model_type, architecture)},
                            virtual={"model.safetensors": 1_000_000}, tags=["transformers", "safetensors"],
                            parameters=500_000)
    assert view.search("tiny")
    qtbot.waitUntil(lambda: hub_idle(view.ctx), timeout=WAIT)
    page = open_repo(view, qtbot, QWEN)
    assert "Qwen2, Qwen2.5 (qwen2)" in page
    assert "Works here</td><td colspan='3'>chat, LoRA, QLoRA, GGUF export for llama.cpp and Ollama<" in page
    page = open_repo(view, qtbot, NEOX)
    assert "Family</td><td colspan='3'>GPTNeoXForCausalLM · gpt_neox<" in page
    assert ("Works here</td><td colspan='3'>chat, LoRA, QLoRA; GGUF export: not for this family (this is a "
            "&#x27;gpt_neox&#x27; model, which llama.cpp&#x27;s converter does not know here") in page
    page = open_repo(view, qtbot, GGUF_REPO)  # GGUF files only: a GGUF model already, fine-tuned dequantized
    assert "Llama 2, Llama 3.x, SmolLM2, TinyLlama (llama)" in page
    assert ("Works here</td><td colspan='3'>chat, LoRA, QLoRA (dequantized to fine-tune), GGUF export of the "
            "fine-tuned model<") in page
    page = open_repo(view, qtbot, "tiny-org/remote-code")  # custom code, never run here: nothing, and below is why
    assert "Works here</td><td colspan='3'>nothing (why is below)<" in page and "This app cannot use it" in page
    assert not view.ctx.errors, view.ctx.errors


def test_the_library_says_what_works_for_each_family_and_gguf_export_gives_the_engines_reason(window, qtbot):
    lib = window.library_tab
    models = window.ctx.workspace.folder("models")
    for model_type in ("gemma2", "falcon"):
        (models / model_type).mkdir()
        (models / model_type / "config.json").write_text(json.dumps({"model_type": model_type,
                                                                     "num_hidden_layers": 2}))
    lib.refresh()
    assert lib.select(str(models / "gemma2"))
    details = lib.details.toPlainText()
    assert "Model family\nGemma 2 (gemma2)" in details
    assert "Works here\nchat, LoRA, QLoRA, GGUF export for llama.cpp and Ollama" in details
    assert lib.select(str(models / "falcon"))
    details = lib.details.toPlainText()
    assert "Model family\nfalcon" in details
    assert (f"Works here\nchat, LoRA, QLoRA; GGUF export: not for this family ({not_in_converter('falcon')}: export "
            "it as a Hugging Face folder or zip instead)") in details
    # GGUF export refuses it with the engine's sentence, before any weight is read
    assert lib.export_selected("gguf")
    qtbot.waitUntil(lambda: not lib.exporting(), timeout=WAIT)
    assert [m for m, _ in window.ctx.errors] == [f"{models / 'falcon'}: {no_gguf_reason('falcon')}"]
