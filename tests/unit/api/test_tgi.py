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
        ({"inputs": "a", "parameters": {"best_of": 2}}, "sampling"),
        ({"inputs": ["a"] * 9, "parameters": {"best_of": 8, "do_sample": True}}, "best_of x inputs"),
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


def _result(index, text, logprobs, prompt=None):
    from llm_byoc.engine.outputs import GenerationResult
    from llm_byoc.protocol import FinishReason

    return GenerationResult(index, text, [ord(c) for c in text], FinishReason.LENGTH, 3, len(text), logprobs,
                            prompt_token_ids=[104, 105, 33], prompt_logprobs=prompt)


class _Chars:
    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_decoder_input_details_answers_the_prefill():
    from llm_byoc.protocol import PromptLogprobs
    from llm_byoc.schemas.invocation import ResponseContext

    inv = tgi.parse({"inputs": "hi!", "parameters": {"details": True, "decoder_input_details": True}}, route="generate")
    assert inv.params.prompt_logprobs == 0
    ctx = ResponseContext("r", "m", tokenizer=_Chars())
    out = inv.response([_result(0, "ab", [-0.5, -0.5], PromptLogprobs([-1.5, -2.5]))], ctx)
    assert out["details"]["prefill"] == [{"id": 104, "text": "h", "logprob": None},
                                         {"id": 105, "text": "i", "logprob": -1.5},
                                         {"id": 33, "text": "!", "logprob": -2.5}]
    plain = tgi.parse({"inputs": "hi!", "parameters": {"details": True}}, route="generate")
    assert plain.params.prompt_logprobs is None and plain.response([_result(0, "ab", [-0.5] * 2)], ctx)[
        "details"]["prefill"] == []


def test_best_of_returns_the_sample_of_highest_mean_logprob_and_the_others_in_details():
    inv = tgi.parse({"inputs": ["p", "q"], "parameters": {"best_of": 3, "do_sample": True, "details": True,
                                                          "return_full_text": True}})
    assert inv.prompts == ["p"] * 3 + ["q"] * 3 and inv.best_of == 3
    seeds = [p.seed for p in inv.params]
    assert all(p.logprobs for p in inv.params) and len(set(seeds)) == 6 and None not in seeds  # each its own seed
    results = [_result(0, "aa", [-1.0, -1.0]), _result(1, "bbb", [-0.1, -0.1, -2.5]), _result(2, "c", [-0.8]),
               _result(3, "d", [-3.0]), _result(4, "e", [-0.2]), _result(5, "f", [-0.3])]
    answers = inv.response(results, tgi_ctx())
    assert [a["generated_text"] for a in answers] == ["pc", "qe"]  # mean, not sum: "bbb" sums to -2.7, mean -0.9
    assert answers[0]["details"]["seed"] == seeds[2]
    others = answers[0]["details"]["best_of_sequences"]
    assert [(o["generated_text"], o["seed"]) for o in others] == [("pbbb", seeds[1]), ("paa", seeds[0])]
    assert others[0]["generated_tokens"] == 3 and others[0]["finish_reason"] == "length"
    quiet = tgi.parse({"inputs": "p", "parameters": {"best_of": 2, "temperature": 0.5}}, route="generate")
    assert quiet.response([_result(0, "x", [-2.0]), _result(1, "y", [-1.0])], tgi_ctx()) == {"generated_text": "y"}


def tgi_ctx():
    from llm_byoc.schemas.invocation import ResponseContext

    return ResponseContext("r", "m", tokenizer=_Chars())


def test_speculative_false_opts_a_request_out_of_speculation():
    assert tgi.parse({"inputs": "a"}).params.speculative is True
    assert tgi.parse({"inputs": "a", "parameters": {"speculative": False}}).params.speculative is False
    with pytest.raises(InvalidRequest):
        tgi.parse({"inputs": "a", "parameters": {"speculative": "no"}})
