"""lm-evaluation-harness as a client of our server: its `local-completions` (log-likelihood through echo +
logprobs, and generation) and `local-chat-completions` backends score a served model exactly as the harness's
own HFLM scores the same model in-process. Also the echo / logprobs API itself, as OpenAI defines it.

Skips without lm_eval (the optional `benchmarks` extra). The tasks are the offline ones in
tests/fixtures/benchmark_tasks (the harness's own YAML over local JSON files).
"""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest
from server_helpers import CORPUS, running_server

from desktop_app.engine.specs import ModelSpec

TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "benchmark_tasks"
CONTEXT = 256


@pytest.fixture(scope="module")
def harness_model(tmp_path_factory):
    """A tiny model with room for the tasks' prompts (the shared one has a 64-token context) whose vocabulary is
    exactly its tokenizer's: our generation never picks an id the tokenizer lacks, HF's generate (HFLM) would."""
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
    from desktop_app.engine.model.architecture import build_model

    folder = tmp_path_factory.mktemp("harness") / "tiny-harness"
    tokenizer = hf_tokenizer(train_tokenizer(CORPUS, "byte-bpe", 320))
    tokenizer.save_pretrained(folder)
    spec = ModelSpec("llama", len(tokenizer), 64, 2, 4, 2, 96, CONTEXT, init_std=0.2, tie_embeddings=False)
    build_model(spec, seed=2).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def harness_server(harness_model, tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("ws"), harness_model) as handle:
        yield handle[0]


@pytest.fixture
def in_tasks(monkeypatch):
    """The tasks' data_files are relative to their folder; the harness alone reads them from the current one."""
    pytest.importorskip("lm_eval")
    pytest.importorskip("tenacity")  # lm_eval's [api] extra, which its OpenAI-compatible backends need
    monkeypatch.chdir(TASKS)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")


def _evaluate(lm, tasks: list[str], **settings):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TASKS), include_defaults=False)
    return simple_evaluate(model=lm, tasks=tasks, task_manager=manager, log_samples=True, bootstrap_iters=0,
                           **settings)


def _hflm(model_dir: Path, batch_size: int = 4):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(model_dir), batch_size=batch_size, device="cpu", max_length=CONTEXT)


def _answers(result, task: str) -> list:
    """Per item, what the model answered: the log-likelihoods of the choices, or the generated text."""
    return [(s["doc_id"], s["filtered_resps"]) for s in sorted(result["samples"][task], key=lambda s: s["doc_id"])]


def _metrics(result, task: str) -> dict:
    return {k: v for k, v in result["results"][task].items() if not k.endswith("_stderr,none") and k != "alias"}


def _assert_same_loglikelihoods(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    for (doc, mine), (doc_ref, ref) in zip(ours, theirs, strict=True):
        assert doc == doc_ref
        for (lp, greedy), (lp_ref, greedy_ref) in zip(mine, ref, strict=True):
            assert math.isclose(float(lp), float(lp_ref), rel_tol=1e-5, abs_tol=1e-4)
            assert greedy == greedy_ref


def test_local_completions_equal_hflm(harness_server, harness_model, in_tasks):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    served = LocalCompletionsAPI(model=harness_model.name, base_url=harness_server + "/v1/completions",
                                 tokenizer=str(harness_model), tokenizer_backend="huggingface", max_length=CONTEXT,
                                 batch_size=4, max_retries=1)
    ours = _evaluate(served, ["azr_tiny_mc", "azr_tiny_gen"])
    ref = _evaluate(_hflm(harness_model), ["azr_tiny_mc", "azr_tiny_gen"])
    for task in ("azr_tiny_mc", "azr_tiny_gen"):
        assert _metrics(ours, task) == _metrics(ref, task)
    _assert_same_loglikelihoods(_answers(ours, "azr_tiny_mc"), _answers(ref, "azr_tiny_mc"))
    generated = _answers(ours, "azr_tiny_gen")
    assert generated == _answers(ref, "azr_tiny_gen")
    assert any(text for _, (text,) in generated)  # the model did answer something: the comparison means something


def test_the_servers_own_tokenizer_is_enough_for_the_harness(harness_server, harness_model, in_tasks):
    """tokenizer_backend=remote: the harness counts and cuts prompts through /tokenize (no model folder at hand),
    and scores as HFLM does."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    served = LocalCompletionsAPI(model=harness_model.name, base_url=harness_server + "/v1/completions",
                                 tokenizer_backend="remote", max_length=CONTEXT, batch_size=4, max_retries=1)
    assert served.tokenizer.encode("the cat") == _hflm(harness_model).tok_encode("the cat")
    ours = _evaluate(served, ["azr_tiny_mc"])
    ref = _evaluate(_hflm(harness_model), ["azr_tiny_mc"])
    assert _metrics(ours, "azr_tiny_mc") == _metrics(ref, "azr_tiny_mc")
    _assert_same_loglikelihoods(_answers(ours, "azr_tiny_mc"), _answers(ref, "azr_tiny_mc"))


def test_local_chat_completions_equal_hflm(harness_server, harness_model, in_tasks):
    from lm_eval.models.openai_completions import LocalChatCompletion

    served = LocalChatCompletion(model=harness_model.name, base_url=harness_server + "/v1/chat/completions",
                                 max_retries=1)
    ours = _evaluate(served, ["azr_tiny_gen"], apply_chat_template=True)
    ref = _evaluate(_hflm(harness_model), ["azr_tiny_gen"], apply_chat_template=True)
    assert _answers(ours, "azr_tiny_gen") == _answers(ref, "azr_tiny_gen")
    assert _metrics(ours, "azr_tiny_gen") == _metrics(ref, "azr_tiny_gen")


def _post(url: str, **body) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json=body, timeout=60)


def test_echo_logprobs_shape_and_values(harness_server, harness_model):
    """OpenAI's legacy object: a value per token, None first, the token itself among its alternatives, offsets
    into the echoed text; the numbers equal a plain forward of the model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(harness_model)
    ids = tok("the cat sat on the mat")["input_ids"]
    r = _post(harness_server, model=harness_model.name, prompt="the cat sat on the mat", echo=True, logprobs=2,
              max_tokens=0)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == "the cat sat on the mat" and choice["finish_reason"] == "length"
    assert len(lp["tokens"]) == len(ids) and "".join(lp["tokens"]) == tok.decode(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"][0] == 0 and lp["text_offset"][1] == len(lp["tokens"][0])
    model = AutoModelForCausalLM.from_pretrained(harness_model)
    with torch.no_grad():
        ref = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)
    for pos in range(1, len(ids)):
        assert math.isclose(lp["token_logprobs"][pos], float(ref[pos - 1, ids[pos]]), abs_tol=1e-4)
        top = lp["top_logprobs"][pos]
        assert lp["tokens"][pos] in top and 2 <= len(top) <= 3
        assert max(top.values()) == pytest.approx(float(ref[pos - 1].max()), abs=1e-4)
    assert r.json()["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 0, "total_tokens": len(ids)}


def test_logprobs_of_a_generated_completion(harness_server, harness_model):
    """Without echo: the generated tokens only, the text the same as without logprobs, offsets after the prompt."""
    plain = _post(harness_server, model=harness_model.name, prompt="the dog", max_tokens=6, temperature=0).json()
    r = _post(harness_server, model=harness_model.name, prompt="the dog", max_tokens=6, temperature=0, logprobs=1)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == plain["choices"][0]["text"]
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == r.json()["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"]
    assert lp["text_offset"][0] == len("the dog")
    # Greedy: every chosen token is the likeliest one.
    assert all(v == max(t.values()) for v, t in zip(lp["token_logprobs"], lp["top_logprobs"], strict=True))
    echoed = _post(harness_server, model=harness_model.name, prompt=[[5, 6, 7], [8, 9]], max_tokens=1,
                   temperature=0, echo=True, logprobs=1).json()
    assert [len(c["logprobs"]["tokens"]) for c in echoed["choices"]] == [4, 3]


@pytest.mark.parametrize("body, param, words", [
    ({"logprobs": 21}, "logprobs", "between 0 and 20"),
    ({"logprobs": -1}, "logprobs", "between 0 and 20"),
    ({"logprobs": 1, "stream": True}, "stream", "without streaming"),
    ({"echo": True, "num_beams": 2, "temperature": 0}, "num_beams", "beam search"),
    ({"max_tokens": 0}, "max_tokens", "at least 1"),
    ({"echo": True, "prompt": [1] * CONTEXT}, "prompt", f"at most {CONTEXT - 1} tokens"),
    ({"echo": True, "prompt": [[1, 2], [99999]]}, "prompt", "vocabulary"),
])
def test_bad_scoring_requests_are_refused(harness_server, harness_model, body, param, words):
    r = _post(harness_server, **{"model": harness_model.name, "prompt": "the cat", **body})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"]
    assert _post(harness_server, model=harness_model.name, prompt="the cat", max_tokens=2).status_code == 200
