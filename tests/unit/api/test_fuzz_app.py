"""Property-based fuzzing of the real Flask app (over the fake engine): whatever arrives,
the answer is never a 5xx, every error is our JSON shape, every answer matches the
OpenAPI document, and the server keeps serving.

Bodies are valid requests with fields replaced by arbitrary JSON, arbitrary JSON,
deep nesting and long lists, and raw bytes; with arbitrary content types, request
ids, custom attributes, methods and paths. ``--hypothesis-profile=thorough`` runs
many more examples (profiles: tests/conftest.py).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fixtures.openapi_contract import check_answer, route_of
from llm_byoc.api.app import create_app
from llm_byoc.api.errors import TGI_PATHS
from llm_byoc.config import ServerConfig

pytestmark = pytest.mark.filterwarnings("ignore")

SEEN: dict[str, int] = {"requests": 0, "5xx": 0, "non_json_errors": 0}

json_scalars = st.none() | st.booleans() | st.integers() | st.integers(min_value=-(2**80), max_value=2**80) \
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=20,
)
VALID = [
    {"inputs": "hello", "parameters": {"max_new_tokens": 4}},
    {"inputs": ["ab", "cd"], "parameters": {"details": True, "stop": ["x"], "do_sample": True, "top_k": 3}},
    {"inputs": "abc", "stream": True, "parameters": {"max_new_tokens": 3, "return_full_text": True}},
    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0},
    {"messages": [{"role": "system", "content": [{"type": "text", "text": "x"}]}, {"role": "user", "content": "y"}],
     "stream": True, "stream_options": {"include_usage": True}},
    {"prompt": ["ab", "c"], "max_tokens": 2, "seed": 1, "n": 1},
    {"prompt": "abc", "stream": True, "stop": "b"},
]
FIELDS = ["inputs", "parameters", "stream", "messages", "prompt", "max_tokens", "temperature", "top_p", "stop",
          "seed", "n", "stream_options", "model", "user", "max_completion_tokens", "oops"]
PARAMETERS = ["max_new_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "stop", "seed",
              "do_sample", "return_full_text", "details", "ignore_eos", "oops"]


@st.composite
def mutated_bodies(draw) -> dict:
    body = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    for _ in range(draw(st.integers(1, 3))):
        target = draw(st.sampled_from(["body", "parameters", "message", "delete"]))
        if target == "body":
            body[draw(st.sampled_from(FIELDS))] = draw(json_values)
        elif target == "parameters" and isinstance(body.get("parameters"), dict):
            body["parameters"][draw(st.sampled_from(PARAMETERS))] = draw(json_values)
        elif target == "message" and isinstance(body.get("messages"), list) and body["messages"] \
                and isinstance(body["messages"][0], dict):
            body["messages"][0][draw(st.sampled_from(["role", "content", "name", "x"]))] = draw(json_values)
        elif body:
            body.pop(draw(st.sampled_from(sorted(body))), None)
    return body


@st.composite
def hostile_bodies(draw) -> bytes:
    kind = draw(st.sampled_from(["nested", "long_list", "bytes", "truncated", "constant", "huge_number"]))
    if kind == "nested":
        depth = draw(st.integers(20, 5000))
        opener = draw(st.sampled_from(["[", '{"a":']))
        closer = "]" if opener == "[" else "}"
        return ('{"inputs": ' + opener * depth + "1" + closer * depth + "}").encode()
    if kind == "long_list":
        key = draw(st.sampled_from(["inputs", "prompt", "messages"]))
        item = {"role": "user", "content": "a"} if key == "messages" else "a"
        return json.dumps({key: [item] * draw(st.integers(60, 1100))}).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "truncated":
        text = json.dumps(draw(st.sampled_from(VALID)))
        return text[: draw(st.integers(0, len(text) - 1))].encode()
    if kind == "constant":
        return draw(st.sampled_from([b'{"inputs": NaN}', b'{"inputs": "a", "parameters": {"top_p": Infinity}}']))
    return b'{"inputs": "a", "parameters": {"max_new_tokens": 1' + b"0" * draw(st.integers(10, 6000)) + b"}}"


header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=200)
content_types = st.sampled_from(["application/json", "application/json; charset=utf-8", "application/json; charset=latin-1",
                                 "text/plain", "", "multipart/form-data", "application/x-www-form-urlencoded"]) | header_text


@pytest.fixture(scope="module")
def app_client():
    from fakes.fake_engine import FakeEngine

    engine = FakeEngine()
    client = create_app(engine, ServerConfig(timeout_s=5, max_payload_bytes=64 * 1024), capacity=64,
                        health_refresh_s=0).test_client()
    yield client
    assert client.get("/ping").status_code == 200, "the server stopped serving"
    print(f"\napp fuzz: {SEEN}")


def check(response, method: str, path: str) -> None:
    SEEN["requests"] += 1
    status = response.status_code
    if status >= 500:
        SEEN["5xx"] += 1
    assert status < 500, response.get_data()[:300]
    if status >= 400:
        try:
            body = response.get_json(force=True)
        except Exception:
            body = None
        shapes = ({"error", "type"}, {"error", "error_type"}) if path in TGI_PATHS else ({"error", "type"},)
        if not (isinstance(body, dict) and set(body) in shapes):  # TGI's routes answer in TGI's shape
            SEEN["non_json_errors"] += 1
            raise AssertionError(f"{status} is not our JSON error: {response.get_data()[:200]!r}")
    try:
        route_of(path)
    except AssertionError:
        return  # an undocumented path: a 404 in our shape is all there is to check
    if status not in (404, 405):  # a route of the other mode, or another method: the shape is all
        check_answer(method, path, status, response.content_type, response.get_data())


@given(body=mutated_bodies())
def test_mutated_requests(app_client, body):
    check(app_client.post("/invocations", json=body), "POST", "/invocations")


@given(body=hostile_bodies(), content_type=content_types)
def test_hostile_bodies_and_content_types(app_client, body, content_type):
    response = app_client.post("/invocations", data=body, headers={"Content-Type": content_type})
    check(response, "POST", "/invocations")


@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.sampled_from(["/ping", "/invocations", "/execution-parameters", "/metrics", "/openapi.json", "/models",
                          "/nope", "/invocations/x"]) | st.text(st.characters(min_codepoint=33, max_codepoint=126),
                                                                max_size=30).map(lambda s: "/" + s.lstrip("/")),
    request_id=header_text,
    attributes=header_text,
    body=json_values,
)
def test_routes_methods_and_headers(app_client, method, path, request_id, attributes, body):
    headers = {"X-Request-Id": request_id, "X-Amzn-SageMaker-Custom-Attributes": attributes}
    response = app_client.open(path.split("?")[0].split("#")[0] or "/", method=method, json=body, headers=headers)
    check(response, method, path.split("?")[0].split("#")[0] or "/")
    if response.status_code < 400 or response.status_code == 404:
        assert response.headers.get("X-Amzn-SageMaker-Custom-Attributes") == attributes
