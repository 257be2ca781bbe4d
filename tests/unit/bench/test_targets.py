"""Targets without a network: payloads, the loopback rule, stream decoding
through a fake transport, and how failures are named."""

from __future__ import annotations

import json

import pytest
from llm_byoc.bench.targets import (
    HttpTarget,
    RequestFailed,
    SageMakerTarget,
    build_payload,
    classify_endpoint_error,
    require_loopback,
)
from llm_byoc.bench.workload import RequestSpec
from llm_byoc.client import EndpointClient
from llm_byoc.client.errors import EndpointError, StreamError

SPEC = RequestSpec(index=0, prompt="hello there", input_len=2, output_len=3)


def tgi_event(i, final=False):
    event = {"index": 0, "token": {"id": 100 + i, "text": f"t{i}", "logprob": -0.1, "special": False},
             "generated_text": "t0t1t2" if final else None, "details": {"finish_reason": "length"} if final else None}
    return f"data: {json.dumps(event)}\n\n".encode()


class FakeTransport:
    """Hands back canned SSE chunks (or raises) the way the real transports do."""

    def __init__(self, chunks=(), error: Exception | None = None):
        self.chunks, self.error, self.bodies = list(chunks), error, []

    def invoke(self, body, route):
        raise AssertionError("the load generator only streams")

    def stream(self, body, route):
        self.bodies.append(json.loads(body))
        if self.error is not None:
            raise self.error
        yield from self.chunks


def sagemaker_target(transport, api="tgi"):
    return SageMakerTarget("my-endpoint", api=api, client=EndpointClient(transport))


def test_payloads_ask_for_the_output_length():
    payload = build_payload(SPEC, "tgi")
    assert payload == {"inputs": "hello there", "parameters": {"max_new_tokens": 3, "ignore_eos": True}, "stream": True}
    completion = build_payload(SPEC, "openai")
    assert completion == {"prompt": "hello there", "max_tokens": 3, "temperature": 0, "ignore_eos": True, "stream": True,
                          "stream_options": {"include_usage": True}}
    with pytest.raises(ValueError):
        build_payload(SPEC, "grpc")


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost:8080/", "http://[::1]:9000", "http://127.0.0.2:1"])
def test_loopback_urls_are_accepted(url):
    host, port = require_loopback(url)
    assert port > 0


@pytest.mark.parametrize("url", ["http://8.8.8.8:80", "http://10.0.0.1:8080", "https://127.0.0.1:8443", "ftp://127.0.0.1", "127.0.0.1:8080"])
def test_other_urls_are_refused(url):
    with pytest.raises(ValueError):
        require_loopback(url)


def test_http_target_paths():
    assert HttpTarget("http://127.0.0.1:1").path == "/invocations"
    assert HttpTarget("http://127.0.0.1:1", target_model="a b/c").path == "/models/a%20b%2Fc/invoke"
    assert HttpTarget("http://127.0.0.1:1", path="/generate").path == "/generate"


def test_connection_refused_is_a_connection_error():
    with pytest.raises(RequestFailed) as info:
        list(HttpTarget("http://127.0.0.1:9").stream(SPEC, timeout_s=2))
    assert info.value.kind == "connection"


def test_sagemaker_stream_yields_one_event_per_token_even_when_chunks_split_events():
    raw = b"".join(tgi_event(i, final=i == 2) for i in range(3))
    chunks = [raw[:10], raw[10:95], raw[95:]]  # cut in the middle of events
    transport = FakeTransport(chunks)
    assert list(sagemaker_target(transport).stream(SPEC, timeout_s=5)) == [1, 1, 1]
    assert transport.bodies[0]["parameters"]["max_new_tokens"] == 3


def test_openai_role_and_finish_chunks_carry_no_token():
    chunks = [
        b'data: {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": null}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": null}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    assert list(sagemaker_target(FakeTransport(chunks), api="openai").stream(SPEC, 5)) == [1, 1]



def test_tokens_that_decode_to_no_text_are_counted_from_the_closing_usage():
    chunks = [  # our server's /v1/completions: the end-of-text token under ignore_eos streams as an empty chunk
        b'data: {"choices": [{"index": 0, "text": "Hi", "finish_reason": null}], "usage": null}\n\n',
        b'data: {"choices": [{"index": 0, "text": "", "finish_reason": null}], "usage": null}\n\n',
        b'data: {"choices": [{"index": 0, "text": "!", "finish_reason": null}], "usage": null}\n\n',
        b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": null}\n\n',
        b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}}\n\n',
        b"data: [DONE]\n\n",
    ]
    assert list(sagemaker_target(FakeTransport(chunks), api="openai").stream(SPEC, 5)) == [1, 1, 2]
    exact = chunks[:1] + chunks[2:4] + [chunks[4].replace(b'"completion_tokens": 4', b'"completion_tokens": 2'),
                                          chunks[5]]
    assert list(sagemaker_target(FakeTransport(exact), api="openai").stream(SPEC, 5)) == [1, 1]  # nothing missed
    assert list(sagemaker_target(FakeTransport(chunks[:4] + chunks[5:]), api="openai").stream(SPEC, 5)) == [1, 1]


def llama_server_chunk(text, finish=None):
    """A chunk of llama.cpp's llama-server on /v1/completions with stream (its server-task.cpp)."""
    chunk = {"choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}], "created": 1,
             "model": "m.gguf", "system_fingerprint": "b1", "object": "text_completion", "id": "cmpl-1"}
    if finish:
        chunk["usage"] = {"completion_tokens": 3, "prompt_tokens": 2, "total_tokens": 5}
        chunk["timings"] = {"predicted_n": 3, "predicted_ms": 10.0}
    return f"data: {json.dumps(chunk)}\n\n".encode()


def test_llama_servers_completion_stream_counts_its_tokens_and_not_its_closing_chunk():
    chunks = [llama_server_chunk(" the"), llama_server_chunk(" cat"), llama_server_chunk(" sat"),
              llama_server_chunk("", "length"), b"data: [DONE]\n\n"]
    transport = FakeTransport(chunks)
    assert list(sagemaker_target(transport, api="openai").stream(SPEC, 5)) == [1, 1, 1]
    assert transport.bodies[0]["ignore_eos"] is True and "logprobs" not in transport.bodies[0]

@pytest.mark.parametrize(
    "error, kind",
    [
        (EndpointError("queue full", 429, "queue_full"), "http_429"),
        (EndpointError("Throttling", 400, "ThrottlingException"), "http_400"),
        (StreamError("ModelStreamError: boom", None, "ModelStreamError"), "stream_ModelStreamError"),
        (EndpointError("Read timeout on endpoint URL"), "timeout"),
        (EndpointError("Could not connect to the endpoint URL"), "connection"),
        (EndpointError("something else"), "error"),
    ],
)
def test_endpoint_errors_are_named_by_kind(error, kind):
    assert classify_endpoint_error(error) == kind
    with pytest.raises(RequestFailed) as info:
        list(sagemaker_target(FakeTransport(error=error)).stream(SPEC, 5))
    assert info.value.kind == kind


def test_an_error_event_mid_stream_fails_the_request_after_its_tokens():
    chunks = [tgi_event(0), b'data: {"error": "worker died", "type": "engine_dead"}\n\n']
    seen = []
    with pytest.raises(RequestFailed) as info:
        for tokens in sagemaker_target(FakeTransport(chunks)).stream(SPEC, 5):
            seen.append(tokens)
    assert seen == [1]
    assert info.value.kind == "stream_engine_dead"
