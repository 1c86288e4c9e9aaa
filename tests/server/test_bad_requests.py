"""Bad requests get a clear error in OpenAI's shape with the right status, and the server stays up."""

from __future__ import annotations

import io
import time

import httpx
import openai
import pytest
from server_helpers import running_server

KEY = "test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
UPLOAD_LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def keyed(model_dir, tmp_path_factory):
    limits = {"upload_limit": UPLOAD_LIMIT, "json_limit": UPLOAD_LIMIT}
    with running_server(tmp_path_factory.mktemp("ws"), model_dir, api_key=KEY, **limits) as (url, _), \
            httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
        yield client


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body["error"]) >= {"message", "type", "param", "code"} and body["error"]["message"]
    return body["error"]


def _still_up(client: httpx.Client) -> None:
    assert client.get("/health").json()["status"] == "ok"


def _completion(model_dir, **fields) -> dict:
    return {"model": model_dir.name, "prompt": "hello", "max_tokens": 4, "temperature": 0, **fields}


def test_invalid_json(keyed):
    err = _error(keyed.post("/v1/completions", content=b'{"model": "x", "prompt": ', headers={
        "content-type": "application/json"}), 400)
    assert "not valid JSON" in err["message"]
    _still_up(keyed)


def test_unknown_model(keyed, model_dir):
    err = _error(keyed.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": [
        {"role": "user", "content": "hi"}]}), 404)
    assert err["code"] == "model_not_found" and model_dir.name in err["message"]


@pytest.mark.parametrize("field,value,param", [
    ("max_tokens", -3, "max_tokens"), ("max_tokens", 0, "max_tokens"), ("max_tokens", "5", "max_tokens"),
    ("temperature", "hot", "temperature"), ("temperature", 9.0, "temperature"), ("n", 2.5, "n"), ("n", 99, "n"),
    ("top_p", 1.5, "top_p"), ("stop", 3, "stop"), ("presence_penalty", 5, "presence_penalty"),
    ("logit_bias", {"5": 1.0}, "logit_bias"), ("logprobs", 21, "logprobs"), ("prompt", {"a": 1}, "prompt"),
    ("prompt", [999999], "prompt"),
])
def test_wrong_values_and_types(keyed, model_dir, field, value, param):
    err = _error(keyed.post("/v1/completions", json=_completion(model_dir, **{field: value})), 400)
    assert err["param"] is not None and err["param"].startswith(param), err
    assert err["type"] == "invalid_request_error"


def test_chat_shape_errors(keyed, model_dir):
    _error(keyed.post("/v1/chat/completions", json={"model": model_dir.name, "messages": "hi"}), 400)
    err = _error(keyed.post("/v1/chat/completions", json={"model": model_dir.name}), 400)
    assert "messages" in err["message"]
    err = _error(keyed.post("/v1/chat/completions", json={"model": model_dir.name, "messages": [
        {"role": "tool", "content": "x"}]}), 400)
    assert "role" in err["message"]
    err = _error(keyed.post("/v1/chat/completions", json={"model": model_dir.name, "tools": [{"type": "function"}],
                                                          "messages": [{"role": "user", "content": "x"}]}), 400)
    assert "not supported" in err["message"]
    _still_up(keyed)


def test_huge_max_tokens_is_capped_to_the_context(keyed, model_dir):
    r = keyed.post("/v1/completions", json=_completion(model_dir, max_tokens=10**9))
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 64  # the model's context length


def test_api_key_required(keyed, model_dir):
    base = str(keyed.base_url)
    err = _error(httpx.get(base + "/v1/models"), 401)
    assert "API key" in err["message"] and err["code"] == "invalid_api_key"
    _error(httpx.get(base + "/api/runs", headers={"Authorization": "Bearer wrong-key"}), 401)
    _error(httpx.get(base + "/v1/models", headers={"Authorization": KEY}), 401)  # the scheme is required
    assert httpx.get(base + "/docs").status_code == 200  # the documentation stays readable
    assert "/api/runs/{run_id}/{action}" in httpx.get(base + "/openapi.json").json()["paths"]
    with openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0) as bad, \
            pytest.raises(openai.AuthenticationError):
        bad.models.list()
    with openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0) as good:
        assert good.completions.create(model=model_dir.name, prompt="hi", max_tokens=2).choices


@pytest.mark.parametrize("name", ["../evil.txt", "/etc/passwd", "..\\..\\win.txt", "C:evil.txt", "a/b.txt",
                                  ".hidden.txt"])
def test_path_traversal_upload_names_are_refused(keyed, name, tmp_path):
    files = [("files", (name, io.BytesIO(b"some text for a dataset\n\nmore text"), "text/plain"))]
    err = _error(keyed.post("/api/datasets", files=files, data={"name": "bad"}), 400)
    assert err["code"] == "invalid_file_name"
    ws_root = tmp_path.parent  # nothing escaped into the test's folders
    assert not (ws_root / "evil.txt").exists()
    _still_up(keyed)


def test_oversized_upload(keyed):
    big = io.BytesIO(b"x" * (UPLOAD_LIMIT + 1024))
    err = _error(keyed.post("/api/datasets", files=[("files", ("big.txt", big, "text/plain"))]), 413)
    assert "limit" in err["message"]

    def chunks():  # no Content-Length: counted while it streams
        for _ in range(20):
            yield b"y" * 8192

    err = _error(keyed.post("/v1/completions", content=chunks(), headers={"content-type": "application/json"}), 413)
    _still_up(keyed)


def test_unknown_route_and_method(keyed):
    _error(keyed.get("/v1/nothing"), 404)
    _error(keyed.get("/v1/completions"), 405)
    _error(keyed.get("/api/runs/..%2F..%2Fetc"), 404)
    _still_up(keyed)


def test_the_request_log_says_why_a_request_failed(model_dir, tmp_path):
    """A 404 in the log names its reason (a wrong model id), as the client was told; a good request carries none."""
    with running_server(tmp_path, model_dir) as (url, state), httpx.Client(base_url=url, timeout=60) as client:
        records: list[dict] = []
        state.monitor.add_listener(records.append)
        client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
        client.get("/health")
        deadline = time.monotonic() + 10  # a request's end record follows its response (the body is sent first)
        while len([r for r in records if r["event"] == "end"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        ends = [r for r in records if r["event"] == "end"]
    assert ends[0]["status"] == 404 and "'gpt-4o' does not exist" in ends[0]["error"]
    assert model_dir.name in ends[0]["error"]  # and which id this server serves
    assert ends[1]["status"] == 200 and "error" not in ends[1]
