"""vLLM's tokenizer routes on our server (/tokenize, /detokenize, /tokenizer_info): the served model's own tokenizer,
in the shapes lm-evaluation-harness's RemoteTokenizer reads; bad requests are clear errors in OpenAI's shape.
(The harness itself scoring through them: test_harness_client.py, with the optional extra.)"""

from __future__ import annotations

import httpx
import pytest
from server_helpers import running_server


@pytest.fixture(scope="module")
def api(server):
    url, _ = server
    with httpx.Client(base_url=url, timeout=60) as client:
        yield client


def test_tokenize_and_detokenize_are_the_served_tokenizers(api, loaded, model_dir):
    tok = loaded.tokenizer
    text = "the cat sat on the mat"
    r = api.post("/tokenize", json={"prompt": text, "add_special_tokens": False})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert body["tokens"] == ids and body["count"] == len(ids) and body["max_model_len"] == 64
    assert api.post("/tokenize", json={"prompt": text, "model": model_dir.name}).json()["tokens"] == \
        tok(text)["input_ids"]  # vLLM's default: the tokenizer's own special tokens added
    back = api.post("/detokenize", json={"tokens": ids})
    assert back.status_code == 200 and back.json() == {"prompt": tok.decode(ids)}


def test_tokenizer_info_names_the_special_tokens_template_and_context(api, loaded):
    info = api.get("/tokenizer_info").json()
    tok = loaded.tokenizer
    assert info["eos_token"] == tok.eos_token and info["bos_token"] == tok.bos_token
    assert info["chat_template"] == tok.chat_template and info["model_max_length"] == 64
    assert info["vocab_size"] >= len(tok)


@pytest.mark.parametrize("path, body, status, param, words", [
    ("/tokenize", {"prompt": "hi", "model": "other"}, 404, "model", "does not exist"),
    ("/detokenize", {"tokens": [1, 99999]}, 400, "tokens", "outside this model's vocabulary"),
    ("/detokenize", {"tokens": [-1]}, 400, "tokens", "outside this model's vocabulary"),
    ("/tokenize", {}, 400, None, "prompt"),
    ("/detokenize", {"tokens": "abc"}, 400, None, "tokens"),
])
def test_bad_tokenizer_requests_are_clear_errors(api, path, body, status, param, words):
    r = api.post(path, json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"] and (param is None or error["param"] == param)
    assert api.post("/tokenize", json={"prompt": "still up"}).status_code == 200


def test_without_a_served_model_the_routes_say_so(tmp_path):
    with running_server(tmp_path / "ws") as (url, _):
        r = httpx.post(url + "/tokenize", json={"prompt": "hi"}, timeout=30)
        assert r.status_code == 404 and "no model is being served" in r.json()["error"]["message"]
        assert httpx.get(url + "/tokenizer_info", timeout=30).status_code == 404
