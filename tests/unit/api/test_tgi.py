"""Hugging Face / TGI style requests and responses."""

from __future__ import annotations

import pytest
from llm_byoc.schemas import tgi
from llm_byoc.errors import InvalidRequest
from fixtures.sse_events import parse_sse


def invoke(client, body, **kwargs):
    return client.post("/invocations", json=body, **kwargs)


def test_single_string_input(client, engine):
    response = invoke(client, {"inputs": "hello"})
    assert response.get_json() == [{"generated_text": "olleh"}]
    prompts, params, _ = engine.submitted[0]
    assert prompts == ["hello"] and params.temperature == 0.0 and params.max_new_tokens == 64


def test_parameters_reach_the_engine(client, engine):
    parameters = {
        "max_new_tokens": 3, "temperature": 0.7, "top_p": 0.9, "top_k": 5, "repetition_penalty": 1.1,
        "stop": ["x"], "seed": 42, "ignore_eos": True,
    }
    assert invoke(client, {"inputs": "abcdef", "parameters": parameters}).get_json() == [{"generated_text": "fed"}]
    params = engine.submitted[0][1]
    assert (params.max_new_tokens, params.temperature, params.top_p, params.top_k) == (3, 0.7, 0.9, 5)
    assert (params.repetition_penalty, params.stop, params.seed, params.ignore_eos) == (1.1, ("x",), 42, True)


@pytest.mark.parametrize(
    "parameters, temperature",
    [
        ({}, 0.0),
        ({"do_sample": True}, 1.0),
        ({"do_sample": False, "temperature": 0.8}, 0.0),
        ({"temperature": 0.8}, 0.8),
        ({"top_k": 10}, 1.0),
        ({"top_p": 0.5}, 1.0),
        ({"do_sample": True, "temperature": 0.3}, 0.3),
    ],
)
def test_do_sample_and_temperature(parameters, temperature):
    assert tgi.parse({"inputs": "a", "parameters": parameters}).params.temperature == temperature


def test_stop_string_cuts_the_text(client):
    body = {"inputs": "abcdef", "parameters": {"stop": ["c"], "details": True}}
    out = invoke(client, body).get_json()[0]
    assert out["generated_text"] == "fed"
    assert out["details"]["finish_reason"] == "stop_sequence"


def test_details(client):
    out = invoke(client, {"inputs": "ab", "parameters": {"details": True, "seed": 7}}).get_json()[0]
    details = out["details"]
    assert details["finish_reason"] == "eos_token"
    assert (details["generated_tokens"], details["input_length"], details["seed"]) == (3, 3, 7)
    assert [t["text"] for t in details["tokens"]] == ["b", "a", ""]
    assert [t["special"] for t in details["tokens"]] == [False, False, True]
    assert all(t["logprob"] == -0.5 for t in details["tokens"])
    out = invoke(client, {"inputs": "abcdef", "parameters": {"details": True, "max_new_tokens": 2}}).get_json()[0]
    assert out["details"]["finish_reason"] == "length"


def test_return_full_text(client):
    out = invoke(client, {"inputs": ["ab", "cd"], "parameters": {"return_full_text": True}}).get_json()
    assert out == [{"generated_text": "abba"}, {"generated_text": "cddc"}]


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"inputs": "a", "extra": 1}, "extra"),
        ({"inputs": "a", "parameters": {"best_of": 2}}, "best_of"),
        ({"inputs": 5}, "inputs must be a string"),
        ({"inputs": []}, "empty list"),
        ({"inputs": ["a", 3]}, r"inputs\[1\] must be a string"),
        ({"inputs": ""}, "empty string"),
        ({"inputs": "a", "parameters": []}, "parameters must be a JSON object"),
        ({"inputs": "a", "parameters": {"max_new_tokens": "5"}}, "max_new_tokens must be an integer"),
        ({"inputs": "a", "parameters": {"max_new_tokens": 0}}, "max_new_tokens must be >= 1"),
        ({"inputs": "a", "parameters": {"temperature": "hot"}}, "temperature must be a number"),
        ({"inputs": "a", "parameters": {"temperature": -1}}, "temperature must be >= 0"),
        ({"inputs": "a", "parameters": {"do_sample": "yes"}}, "do_sample must be true or false"),
        ({"inputs": "a", "parameters": {"do_sample": True, "temperature": 0}}, "temperature > 0"),
        ({"inputs": "a", "parameters": {"stop": [""]}}, "stop"),
        ({"inputs": "a", "parameters": {"seed": -1}}, "seed"),
        ({"inputs": "a", "stream": "true"}, "stream must be true or false"),
    ],
)
def test_bad_requests_name_the_problem(body, needle):
    with pytest.raises(InvalidRequest, match=needle):
        tgi.parse(body)


def test_bad_request_is_400_json(client, engine):
    response = invoke(client, {"inputs": "a", "parameters": {"max_new_tokens": "x"}})
    assert response.status_code == 400
    assert response.get_json()["type"] == "invalid_request"
    assert engine.submitted == []


def test_body_must_pick_one_style(client):
    for body in ({"inputs": "a", "prompt": "b"}, {"parameters": {}}, ["a"], "a"):
        response = invoke(client, body)
        assert response.status_code == 400, body


def test_stream_events(client):
    response = invoke(client, {"inputs": "abc", "stream": True, "parameters": {"seed": 1}})
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    events = parse_sse(response.get_data())
    assert [e["token"]["text"] for e in events] == ["c", "b", "a", ""]
    assert all(e["index"] == 0 for e in events)
    assert all(e["generated_text"] is None and e["details"] is None for e in events[:-1])
    last = events[-1]
    assert last["generated_text"] == "cba"
    assert last["token"] == {"id": 2, "text": "", "logprob": -0.5, "special": True}
    assert last["details"] == {"finish_reason": "eos_token", "generated_tokens": 4, "input_length": 4, "cached_tokens": 0,
                               "seed": 1}


def test_stream_of_several_inputs_is_interleaved_with_their_index(client):
    events = parse_sse(invoke(client, {"inputs": ["ab", "xyz"], "stream": True}).get_data())
    assert [e["index"] for e in events][:4] == [0, 1, 0, 1]
    finals = {e["index"]: e["generated_text"] for e in events if e["generated_text"] is not None}
    assert finals == {0: "ba", 1: "zyx"}


def test_stream_stop_string_ends_with_a_tokenless_event(client):
    events = parse_sse(invoke(client, {"inputs": "abcdef", "stream": True, "parameters": {"stop": ["d"]}}).get_data())
    assert events[-1]["token"]["id"] is None
    assert events[-1]["generated_text"] == "fe"
    assert events[-1]["details"]["finish_reason"] == "stop_sequence"


def test_speculative_false_opts_a_request_out_of_speculation():
    assert tgi.parse({"inputs": "a"}).params.speculative is True
    assert tgi.parse({"inputs": "a", "parameters": {"speculative": False}}).params.speculative is False
    with pytest.raises(InvalidRequest):
        tgi.parse({"inputs": "a", "parameters": {"speculative": "no"}})
