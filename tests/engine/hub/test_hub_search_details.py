"""Search and repository details against the local Hub with the real client: sorting, size and format filters,
file sets with their sizes, licence, gating, chat template, parameters, and why a repository cannot be used."""

from __future__ import annotations

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.hub.details import SAFETENSORS_LABEL, quantization, repo_details
from desktop_app.engine.hub.errors import RepoMissing
from desktop_app.engine.hub.search import FORMATS, SIZES, SORTS, search_models


def ids(found) -> list[str]:
    return [m.repo_id for m in found]


def test_search_sorts_by_downloads_recency_and_likes(hub_server):
    assert ids(search_models("chat"))[:3] == ["big-org/Llama-70B-chat", "mid-org/chat-7B", "tiny-org/tiny-chat"]
    assert ids(search_models("chat", sort="recent"))[0] == "tiny-org/tiny-chat-GGUF"
    assert ids(search_models("chat", sort="likes"))[0] == "big-org/Llama-70B-chat"
    assert "tiny-org/tiny-embedder" not in ids(search_models("tiny"))  # not a text generator
    first = search_models("tiny-chat")[0]
    assert first.repo_id == "tiny-org/tiny-chat" and first.downloads == 500 and first.likes == 7
    assert first.parameters == hub_server.repos["tiny-org/tiny-chat"].parameters
    assert first.last_modified.startswith("2025-03-01") and not first.gated and not first.has_gguf
    assert first.pipeline_tag == "text-generation"


def test_search_filters_by_size_and_format(hub_server):
    assert ids(search_models("", size="over 8B")) == ["big-org/Llama-70B-chat"]
    assert ids(search_models("", size="3B-8B")) == ["mid-org/chat-7B"]
    assert ids(search_models("", size="1B-3B")) == ["small-org/chat-2B"]
    assert "big-org/Llama-70B-chat" not in ids(search_models("", size="under 1B"))
    gguf = search_models("", file_format="gguf")
    assert ids(gguf) == ["tiny-org/tiny-chat-GGUF"] and gguf[0].has_gguf
    assert "tiny-org/tiny-chat-GGUF" not in ids(search_models("", file_format="safetensors"))
    assert search_models("", limit=2) and len(search_models("", limit=2)) == 2
    assert search_models("tiny-org/gated")[0].gated


@pytest.mark.parametrize("bad", [{"sort": "best"}, {"size": "huge"}, {"file_format": "onnx"}, {"limit": 0}])
def test_search_refuses_unknown_choices_before_any_request(hub_server, bad):
    with pytest.raises(UserError, match="must be"):
        search_models("tiny", **bad)
    assert hub_server.requests == []
    assert "downloads" in SORTS and "any" in SIZES and "gguf" in FORMATS


def test_details_of_a_safetensors_repository(hub_server):
    repo = hub_server.repos["tiny-org/tiny-chat"]
    details = repo_details("tiny-org/tiny-chat")
    assert details.revision == repo.sha and details.parameters == repo.parameters
    assert details.license == "apache-2.0" and not details.gated and details.has_chat_template is True
    assert details.model_type == "llama" and details.architecture == "LlamaForCausalLM"
    assert details.context_length == 128 and details.problem is None
    assert details.last_modified.startswith("2025-03-01")
    [only] = details.file_sets
    assert only.label == SAFETENSORS_LABEL and only.kind == "safetensors"
    assert "model.safetensors" in only.files and "tokenizer.json" in only.files and "README.md" not in only.files
    assert only.size == sum(len(repo.files[f]) for f in only.files)


def test_details_of_a_gguf_repository_list_each_quantization(hub_server):
    repo = hub_server.repos["tiny-org/tiny-chat-GGUF"]
    details = repo_details("tiny-org/tiny-chat-GGUF")
    assert [s.label for s in details.file_sets] == ["Q8_0", "F16"]  # smallest first
    for file_set in details.file_sets:
        assert file_set.kind == "gguf" and len(file_set.files) == 1
        assert file_set.size == len(repo.files[file_set.files[0]])
    assert details.parameters == repo.parameters and details.context_length == 128 and details.problem is None


def test_gated_remote_code_and_weightless_repositories_say_so(hub_server):
    gated = repo_details("tiny-org/gated")
    assert gated.gated and gated.license == "llama3.2" and gated.problem is None
    remote = repo_details("tiny-org/remote-code")
    assert "trust_remote_code" in remote.problem and "never runs" in remote.problem
    hub_server.add_repo("tiny-org/pickles", {"config.json": b'{"model_type": "llama"}', "pytorch_model.bin": b"x"})
    assert "pickle" in repo_details("tiny-org/pickles").problem
    with pytest.raises(RepoMissing, match="no model tiny-org/nothing on the Hugging Face Hub: check the name"):
        repo_details("tiny-org/nothing")


@pytest.mark.parametrize("name, label", [
    ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"), ("qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"),
    ("x-Q4_K_M-00001-of-00002.gguf", "Q4_K_M"), ("model-IQ2_XXS.gguf", "IQ2_XXS"), ("gemma-2b-it-bf16.gguf", "BF16"),
    ("smollm2-135m-instruct.gguf", "smollm2-135m-instruct")])
def test_quantization_names_are_read_from_file_names(name, label):
    assert quantization(name) == label


def test_a_repository_whose_listing_gives_no_size_is_sized_from_its_config(hub_server):
    """No safetensors metadata on the Hub (older uploads): the parameter count comes from config.json's shapes,
    within a few percent of the real count, never "unknown" (issue 51 item 8)."""
    repo = hub_server.repos["tiny-org/tiny-chat"]
    hub_server.add_repo("tiny-org/no-metadata", dict(repo.files), parameters=0)
    details = repo_details("tiny-org/no-metadata")
    assert details.parameters > 0 and abs(details.parameters - repo.parameters) <= 0.05 * repo.parameters, (
        details.parameters, repo.parameters)
