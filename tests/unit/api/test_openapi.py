"""The OpenAPI document: valid, served, and true to the apps' routes and answers."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from flask import Flask
from openapi_spec_validator import validate

from fixtures.openapi_contract import check_answer, check_request
from llm_byoc.api.app import _base_app, create_multi_model_app
from llm_byoc.api.multimodel_routes import register_multi_model_routes
from llm_byoc.api.openapi import openapi_document
from llm_byoc.config import MultiModelConfig, ServerConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "multimodel"))
from mme_fakes import FakeWorker  # noqa: E402

HIDDEN = {"/static/<path:filename>"}  # Flask's own, not part of the contract


def documented() -> set[tuple[str, str]]:
    out = set()
    for path, item in openapi_document()["paths"].items():
        for method in item:
            if method in ("get", "post", "delete", "put", "patch"):
                out.add((method.upper(), path))
    return out


def served(app: Flask) -> set[tuple[str, str]]:
    out = set()
    for rule in app.url_map.iter_rules():
        if rule.rule in HIDDEN:
            continue
        path = re.sub(r"<(\w+)>", r"{\1}", rule.rule.replace("<name>", "{model_name}"))
        out |= {(m, path) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return out


@pytest.fixture
def mme_app(tmp_path) -> Flask:
    app = _base_app(ServerConfig(multi_model=True))
    register_multi_model_routes(app, MultiModelConfig(model_root=str(tmp_path)),
                                worker_factory=lambda spec: FakeWorker(spec, 1000))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.onnx").write_bytes(b"\0" * 10)
    return app


def test_the_document_is_valid_openapi_3_1():
    document = openapi_document()
    validate(document)
    assert document["openapi"].startswith("3.1")


def test_the_packaged_file_is_the_one_in_the_repository():
    from llm_byoc.api import openapi

    repo_copy = Path(__file__).resolve().parents[3] / "code" / "llm_byoc" / "api" / "openapi.json"
    assert json.loads(repo_copy.read_text()) == openapi_document() == json.loads(Path(openapi.__file__).with_name("openapi.json").read_text())


def test_every_route_of_both_modes_is_documented_and_nothing_else(client, tmp_path):
    single = served(client.application)
    multi = served(create_multi_model_app(ServerConfig(multi_model=True), MultiModelConfig(model_root=str(tmp_path))))
    assert single | multi == documented()


def test_the_container_serves_the_document(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200 and response.get_json() == openapi_document()


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SINGLE_MODEL_CALLS = [
    ("GET", "/ping", None),
    ("GET", "/execution-parameters", None),
    ("GET", "/metrics", None),
    ("POST", "/invocations", {"inputs": ["ab", "cd"], "parameters": {"max_new_tokens": 3, "details": True}}),
    ("POST", "/invocations", {"inputs": "abc", "stream": True, "parameters": {"max_new_tokens": 2}}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                              "stream": True, "stream_options": {"include_usage": True}}),
    ("POST", "/invocations", {"prompt": ["ab", "c"], "max_tokens": 2}),
    ("POST", "/invocations", {"prompt": "ab", "stream": True}),
    ("POST", "/invocations", {"inputs": "x", "parameters": {"max_new_tokens": "many"}}),
    ("POST", "/invocations", {"inputs": [[[]]]}),
    ("POST", "/invocations", {"inputs": ["a"] * 65}),
    ("POST", "/invocations", {"requestType": "NEW_SESSION"}),
    ("POST", "/invocations", {"requestType": "CLOSE"}),
    ("GET", "/adapters", None),
    ("GET", "/adapters/none", None),
    ("POST", "/adapters", {"name": "a", "src": "/opt/ml/model/adapters/a"}),
    ("POST", "/invocations", {"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "[ab]+"}}}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": "hi"}],
                              "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {}}}}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL], "stream": True,
                              "tool_choice": {"type": "function", "function": {"name": "f"}}}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL],
                              "tool_choice": {"type": "function", "function": {"name": "f"}}}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL],
                              "tool_choice": {"type": "function", "function": {"name": "g"}}}),
    ("POST", "/invocations", {"inputs": "x", "parameters": {"grammar": {"type": "json", "value": {"if": {}}}}}),
    ("POST", "/", {"inputs": "abc", "parameters": {"max_new_tokens": 2, "details": True}}),
    ("POST", "/", {"inputs": "abc", "stream": True}),
    ("POST", "/generate", {"inputs": "abc", "parameters": {"details": True, "top_n_tokens": 2, "truncate": 2,
                                                           "watermark": False, "decoder_input_details": False}}),
    ("POST", "/generate", {"inputs": "abc", "parameters": {"watermark": True}}),
    ("POST", "/generate", {"inputs": "abc", "parameters": {"details": True, "decoder_input_details": True,
                                                           "best_of": 2, "do_sample": True}}),
    ("POST", "/generate", {"inputs": "abc", "parameters": {"best_of": 2}}),
    ("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 2, "echo": True, "logprobs": 1}),
    ("POST", "/generate", {"inputs": ["abc"]}),
    ("POST", "/generate_stream", {"inputs": "abc", "parameters": {"top_n_tokens": 1}}),
    ("GET", "/info", None),
    ("POST", "/tokenize", {"inputs": "abc"}),
    ("POST", "/tokenize", {"inputs": 3}),
    ("POST", "/invocations", {"prompt": [[104, 105], [106]], "max_tokens": 2, "echo": True, "best_of": 2,
                              "top_k": 5, "min_p": 0.1, "logit_bias": {"104": 3}, "stop_token_ids": [7],
                              "repetition_penalty": 1.1}),
    ("POST", "/invocations", {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL],
                              "parallel_tool_calls": False, "chat_template_kwargs": {"x": 1}, "top_k": 2}),
]


@pytest.mark.parametrize("method, path, body", SINGLE_MODEL_CALLS)
def test_single_model_answers_match_the_document(client, method, path, body):
    response = client.open(path, method=method, json=body)
    check_answer(method, path, response.status_code, response.content_type, response.get_data())
    if body is not None and path == "/invocations" and response.status_code == 200:
        assert check_request(body) == [], "a body the server accepts must be valid by the document"


def test_refusals_match_the_document(client, engine):
    engine.queue_full = True
    response = client.post("/invocations", json={"inputs": "x"})
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    check_answer("POST", "/invocations", 429, response.content_type, response.get_data())
    response = client.post("/invocations", data="x", content_type="text/plain")
    check_answer("POST", "/invocations", 415, response.content_type, response.get_data())


def test_multi_model_answers_match_the_document(mme_app):
    client = mme_app.test_client()
    calls = [
        ("POST", "/models", {"model_name": "m", "url": "m"}),
        ("GET", "/models", None),
        ("GET", "/models/m", None),
        ("POST", "/models/m/invoke", {"inputs": "x"}),
        ("DELETE", "/models/m", None),
        ("GET", "/models/nope", None),
        ("POST", "/models", {"model_name": "../x", "url": "m"}),
        ("GET", "/ping", None),
    ]
    for method, path, body in calls:
        response = client.open(path, method=method, json=body)
        check_answer(method, path, response.status_code, response.content_type, response.get_data())


def test_the_checker_catches_answers_off_the_document():
    with pytest.raises(AssertionError, match="does not match"):
        check_answer("POST", "/invocations", 200, "application/json", b'[{"text": "no generated_text"}]')
    with pytest.raises(AssertionError, match="not documented"):
        check_answer("GET", "/ping", 418, "application/json", b"{}")
    with pytest.raises(AssertionError, match="does not match"):
        check_answer("POST", "/invocations", 400, "application/json", b'{"error": "x"}')  # no "type"
    assert check_request({"inputs": "x", "oops": 1})


def test_the_new_openai_fields_are_served_and_documented(client):
    """The last calls above, with the fields OpenAI and vLLM clients send, are answered (not refused), so the
    document's check of their bodies runs."""
    for method, path, body in SINGLE_MODEL_CALLS[-2:]:
        assert client.open(path, method=method, json=body).status_code == 200, body
