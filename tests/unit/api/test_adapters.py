"""The /adapters routes and how a request names its adapter, against the fake engine."""

from __future__ import annotations

import pytest
from werkzeug.datastructures import Headers

from llm_byoc.api.adapters import chosen_adapter
from llm_byoc.contract import ADAPTER_ALIAS_HEADER, ADAPTER_HEADER
from llm_byoc.errors import InvalidRequest

BASE = {"fake-model", "/opt/ml/model/fake-model"}


def register(client, name="support", src="/opt/ml/adapters/support", **extra):
    return client.post("/adapters", json={"name": name, "src": src, **extra})


def test_register_list_describe_delete(client, engine):
    response = register(client)
    assert response.status_code == 200
    adapter = response.get_json()["adapter"]
    assert (adapter["name"], adapter["state"], adapter["path"]) == ("support", "loaded", "/opt/ml/adapters/support")
    assert register(client, "lazy", preload=False).get_json()["adapter"]["state"] == "registered"
    listed = client.get("/adapters").get_json()["adapters"]
    assert [a["name"] for a in listed] == ["support", "lazy"] and listed[0]["rank"] == 8
    assert client.get("/adapters/lazy").get_json()["adapter"]["target_modules"] == ["q_proj"]
    assert client.delete("/adapters/lazy").get_json()["adapter"]["state"] == "unregistered"
    for response in (client.get("/adapters/lazy"), client.delete("/adapters/lazy")):
        assert response.status_code == 404 and response.get_json()["type"] == "adapter_not_found"


@pytest.mark.parametrize("body, status, fragment", [
    ({"name": "a"}, 400, '"name" and "src"'),
    ({"name": "a", "src": "/opt/ml/x", "extra": 1}, 400, "unsupported field"),
    ({"name": "a", "src": "/etc"}, 400, "outside the allowed adapter roots"),
    ({"name": "a", "src": "/opt/ml/x", "preload": "yes"}, 400, "preload must be true or false"),
])
def test_bad_registrations_are_4xx(client, body, status, fragment):
    response = client.post("/adapters", json=body)
    assert response.status_code == status and fragment in response.get_json()["error"]


def test_registering_a_name_twice_is_409(client):
    register(client)
    response = register(client)
    assert response.status_code == 409 and response.get_json()["type"] == "adapter_exists"


def test_a_request_runs_on_the_adapter_it_names(client, engine):
    register(client)
    body = {"inputs": "hi", "parameters": {"max_new_tokens": 2}}
    assert client.post("/invocations", json=body, headers={ADAPTER_HEADER: "support"}).status_code == 200
    body_named = {"inputs": "hi", "parameters": {"max_new_tokens": 2, "adapter_id": "support"}}
    assert client.post("/invocations", json=body_named).status_code == 200
    chat = {"messages": [{"role": "user", "content": "hi"}], "model": "support", "max_tokens": 2}
    assert client.post("/invocations", json=chat).status_code == 200
    base = {"messages": [{"role": "user", "content": "hi"}], "model": "fake-model", "max_tokens": 2}
    assert client.post("/invocations", json=base).status_code == 200
    assert engine.adapters_used == ["support", "support", "support", None]


def test_an_unknown_adapter_is_404_never_the_base_model(client, engine):
    for kwargs in ({"headers": {ADAPTER_HEADER: "nope"}, "json": {"inputs": "hi"}},
                   {"json": {"inputs": "hi", "parameters": {"adapter_id": "nope"}}},
                   {"json": {"prompt": "hi", "model": "gpt-4"}}):
        response = client.post("/invocations", **kwargs)
        assert response.status_code == 404 and response.get_json()["type"] == "adapter_not_found"
    assert engine.submitted == []


@pytest.mark.parametrize("headers, body_adapter, model, expected", [
    ({}, None, None, None),
    ({ADAPTER_HEADER: "a"}, None, None, "a"),
    ({ADAPTER_ALIAS_HEADER: "a"}, None, None, "a"),
    ({}, "a", None, "a"),
    ({}, None, "fake-model", None),
    ({}, None, "a", "a"),
    ({ADAPTER_HEADER: "a"}, "a", "a", "a"),  # the same name twice is fine
])
def test_chosen_adapter(headers, body_adapter, model, expected):
    assert chosen_adapter(Headers(headers), body_adapter, model, BASE) == expected


def test_two_different_adapters_in_one_request_are_a_400():
    with pytest.raises(InvalidRequest, match="different adapters: a, b"):
        chosen_adapter(Headers({ADAPTER_HEADER: "a"}), "b", None, BASE)
