"""TGI's routes (/, /generate, /generate_stream, /info, /tokenize), its fields and its error shape, on the fake engine."""

from __future__ import annotations

import pytest

from fixtures.sse_events import parse_sse
from llm_byoc.api.tgi_routes import token_spans
from llm_byoc.errors import ServingError
from llm_byoc.metrics import get_metrics


def test_generate_answers_one_object(client, engine):
    out = client.post("/generate", json={"inputs": "abc", "parameters": {"details": True}}).get_json()
    assert out["generated_text"] == "cba"
    assert out["details"]["finish_reason"] == "eos_token" and out["details"]["prefill"] == []
    assert [t["text"] for t in out["details"]["tokens"]] == ["c", "b", "a", ""]
    assert client.post("/generate", json={"inputs": "abc", "stream": True}).get_json() == {"generated_text": "cba"}


def test_compat_route_answers_as_invocations(client):
    assert client.post("/", json={"inputs": "ab"}).get_json() == [{"generated_text": "ba"}]
    events = parse_sse(client.post("/", json={"inputs": "ab", "stream": True}).get_data())
    assert [e["index"] for e in events] == [0, 0, 0]  # the input's number, as on /invocations


def test_generate_stream_numbers_events_by_token(client):
    response = client.post("/generate_stream", json={"inputs": "abc", "parameters": {"max_new_tokens": 2}})
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    events = parse_sse(response.get_data())
    assert [e["index"] for e in events] == [1, 2]
    assert [e["token"]["text"] for e in events] == ["c", "b"]
    assert events[-1]["generated_text"] == "cb" and events[-1]["details"]["finish_reason"] == "length"


def test_truncate_keeps_the_last_tokens(client, engine):
    out = client.post("/generate", json={"inputs": "abcdef", "parameters": {"truncate": 3, "return_full_text": True}})
    assert engine.submitted[-1][0] == [[ord("d"), ord("e"), ord("f")]]
    assert out.get_json() == {"generated_text": "abcdef" + "fed"}  # the text sent, then the answer


def test_top_n_tokens_and_typical_p_reach_the_engine(client, engine):
    client.post("/generate", json={"inputs": "ab", "parameters": {"top_n_tokens": 3, "typical_p": 0.5}})
    params = engine.submitted[-1][1]
    assert (params.logprobs, params.top_logprobs, params.typical_p, params.temperature) == (True, 3, 0.5, 1.0)


@pytest.mark.parametrize("parameters, named", [
    ({"watermark": True}, "watermark"),
    ({"best_of": 2}, "you must use sampling when `best_of` is > 1"),
    ({"best_of": 2, "do_sample": True, "seed": 3}, "`seed` must not be set when `best_of` > 1"),
    ({"best_of": 9, "do_sample": True}, "`best_of` must be > 0 and <= 8"),
    ({"typical_p": 1.0}, "typical_p"),
    ({"top_n_tokens": 21}, "top_n_tokens"),
    ({"truncate": 0}, "truncate"),
    ({"bogus": 1}, "bogus"),
])
def test_validation_errors_are_tgis_422(client, parameters, named):
    for path in ("/generate", "/generate_stream", "/"):
        response = client.post(path, json={"inputs": "ab", "parameters": parameters})
        assert response.status_code == 422, path
        body = response.get_json()
        assert set(body) == {"error", "error_type"} and body["error_type"] == "validation" and named in body["error"]
    on_invocations = client.post("/invocations", json={"inputs": "ab", "parameters": parameters})
    assert on_invocations.status_code == 400 and on_invocations.get_json()["type"] == "invalid_request"  # ours there


def test_what_tgi_cannot_stream_is_refused_on_generate_stream(client):
    for parameters, named in (({"decoder_input_details": True}, "decoder_input_details"),
                              ({"best_of": 2, "do_sample": True}, "streaming")):
        response = client.post("/generate_stream", json={"inputs": "ab", "parameters": parameters})
        assert response.status_code == 422 and named in response.get_json()["error"]


def test_the_off_values_clients_send_are_accepted(client):
    parameters = {"watermark": False, "decoder_input_details": False, "best_of": 1, "details": False,
                  "return_full_text": False}
    assert client.post("/generate", json={"inputs": "ab", "parameters": parameters}).status_code == 200


def test_overload_is_429_overloaded(client, engine):
    engine.queue_full = True
    response = client.post("/generate", json={"inputs": "ab"})
    assert response.status_code == 429 and response.get_json()["error_type"] == "overloaded"
    assert response.headers["Retry-After"]


def test_a_failed_generation_is_424(client, engine, monkeypatch):
    def fail(*args, **kwargs):
        raise ServingError("the model step failed")

    monkeypatch.setattr(engine, "submit", fail)
    response = client.post("/generate", json={"inputs": "ab"})
    assert response.status_code == 424
    assert response.get_json() == {"error": "the model step failed", "error_type": "generation"}
    assert client.post("/invocations", json={"inputs": "ab"}).status_code == 500  # ours there


def test_info(client):
    info = client.get("/info").get_json()
    assert info["model_id"] == "fake-model" and info["max_total_tokens"] == 512 and info["max_input_tokens"] == 511
    assert info["max_concurrent_requests"] == 8 and info["router"] == "llm-byoc" and info["version"]


def test_tokenize_gives_each_token_its_span(client):
    tokens = client.post("/tokenize", json={"inputs": "hé!"}).get_json()
    assert tokens == [{"id": 1, "text": "", "start": 0, "stop": 0}, {"id": ord("h"), "text": "h", "start": 0, "stop": 1},
                      {"id": ord("é"), "text": "é", "start": 1, "stop": 2}, {"id": ord("!"), "text": "!", "start": 2, "stop": 3}]
    refused = client.post("/tokenize", json={"inputs": ""})
    assert refused.status_code == 422 and refused.get_json()["error_type"] == "validation"


def test_tokenize_uses_a_fast_tokenizers_offsets(tiny_llama_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    text = "Hello wide world"
    spans = token_spans(tokenizer, text)
    assert [s["id"] for s in spans] == tokenizer.encode(text)
    assert all(text[s["start"]:s["stop"]] == s["text"] for s in spans)
    assert [s["text"] for s in spans if s["text"]][-1].endswith("world")


def _sample(name: str) -> float:
    return get_metrics().registry.get_sample_value(name) or 0.0


def test_tgi_series_count_generation_requests(client):
    before = {n: _sample(n) for n in ("tgi_request_count", "tgi_request_success", "tgi_request_generated_tokens_sum")}
    failures = get_metrics().registry.get_sample_value("tgi_request_failure", {"err": "validation"}) or 0.0
    client.post("/generate", json={"inputs": "abc"})
    client.post("/v1/completions", json={"prompt": "ab", "max_tokens": 1})
    client.post("/generate", json={"inputs": "abc", "parameters": {"watermark": True}})
    client.post("/invocations", json={"requestType": "NEW_SESSION"})  # not a generation
    assert _sample("tgi_request_count") - before["tgi_request_count"] == 3
    assert _sample("tgi_request_success") - before["tgi_request_success"] == 2
    assert _sample("tgi_request_generated_tokens_sum") - before["tgi_request_generated_tokens_sum"] == 4 + 1
    assert get_metrics().registry.get_sample_value("tgi_request_failure", {"err": "validation"}) - failures == 1
    text = client.get("/metrics").get_data(as_text=True)
    assert "\ntgi_queue_size " in text and "\ntgi_batch_current_size " in text


def test_only_a_request_that_reached_a_tgi_route_gets_tgis_shape(client):
    wrong_method = client.get("/generate")
    assert wrong_method.status_code == 405 and set(wrong_method.get_json()) == {"error", "type"}
    assert set(client.post("/generatex", json={}).get_json()) == {"error", "type"}


def test_an_error_mid_stream_is_a_last_event_in_tgis_shape(client, engine):
    engine.die_after_tokens = 1
    events = parse_sse(client.post("/generate_stream", json={"inputs": "abc"}).get_data())
    assert events[0]["token"]["text"] == "c"
    assert set(events[-1]) == {"error", "error_type"}
