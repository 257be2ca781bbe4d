"""EndpointClient against SageMaker: real botocore client, emulated runtime wire."""

from __future__ import annotations

import io
import json

import boto3
import pytest
from botocore.stub import Stubber
from llm_byoc.client import EndpointClient, EndpointError, StreamError
from sagemaker_runtime_emulator import error_event, install, payload_part


def tgi(index: int, token_id: int, text: str, finish: str | None = None) -> str:
    details = {"finish_reason": finish} if finish else None
    obj = {
        "index": index,
        "token": {"id": token_id, "text": text, "logprob": -0.1, "special": False},
        "generated_text": None,
        "details": details,
    }
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def chat(text: str | None, finish: str | None = None) -> str:
    delta = {"content": text} if text is not None else {}
    obj = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def split_parts(sse: bytes, size: int) -> list[bytes]:
    """PayloadPart payloads of ``size`` bytes: cuts events and characters anywhere."""
    return [sse[i : i + size] for i in range(0, len(sse), size)]


@pytest.fixture
def runtime():
    return boto3.client("sagemaker-runtime", region_name="us-east-1")


TGI_STREAM = (tgi(0, 1, "안녕") + tgi(0, 2, "하세요 ") + tgi(0, 3, "🙂") + tgi(0, 4, "!", "length")).encode()


@pytest.mark.parametrize("part_size", [1, 2, 3, 5, 7, 64, 10_000])
def test_stream_tgi_schema_with_payload_parts_cut_anywhere(runtime, part_size):
    wire = b"".join(payload_part(p) for p in split_parts(TGI_STREAM, part_size))
    emulator = install(runtime, wire, cuts=[3, 17, 40])  # network chunks cut event-stream frames too
    events = list(EndpointClient.sagemaker("ep", client=runtime).stream({"inputs": "hi"}))
    assert "".join(e.text for e in events) == "안녕하세요 🙂!"
    assert [e.token_id for e in events] == [1, 2, 3, 4]
    assert events[-1].finish_reason == "length"
    (request,) = emulator.requests
    assert request.url == "http://127.0.0.1:9/endpoints/ep/invocations-response-stream"
    assert request.headers["X-Amzn-SageMaker-Accept"] == b"text/event-stream"
    assert json.loads(request.body) == {"inputs": "hi", "stream": True}


def test_stream_openai_schema_stops_at_done(runtime):
    sse = (chat(None) + chat("한") + chat("👍") + chat(None, "stop") + "data: [DONE]\n\n").encode()
    install(runtime, b"".join(payload_part(p) for p in split_parts(sse, 4)))
    client = EndpointClient.sagemaker("ep", client=runtime)
    events = list(client.stream({"messages": [{"role": "user", "content": "hi"}]}))
    assert [e.text for e in events] == ["한", "👍", ""]
    assert events[-1].finish_reason == "stop"


@pytest.mark.parametrize("kind", ["ModelStreamError", "InternalStreamFailure"])
def test_error_event_mid_stream_raises_after_the_tokens_before_it(runtime, kind):
    wire = payload_part(tgi(0, 1, "첫").encode()) + error_event(kind, "worker crashed", "500")
    install(runtime, wire, cuts=[5])
    stream = EndpointClient.sagemaker("ep", client=runtime).stream({"inputs": "hi"})
    assert next(stream).text == "첫"
    with pytest.raises(StreamError, match="worker crashed") as info:
        next(stream)
    assert kind in str(info.value)


def test_stream_cut_inside_a_character_raises(runtime):
    install(runtime, payload_part('data: {"token": {"text": "'.encode() + "한".encode()[:2]))
    with pytest.raises(StreamError, match="UTF-8"):
        list(EndpointClient.sagemaker("ep", client=runtime).stream({"inputs": "hi"}))


def test_stream_refuses_target_model(runtime):
    with pytest.raises(EndpointError, match="multi-model"):
        list(EndpointClient.sagemaker("ep", client=runtime).stream({"inputs": "x"}, target_model="m.tar.gz"))


def test_invoke_sends_json_and_target_model(runtime):
    with Stubber(runtime) as stub:
        body = json.dumps([{"generated_text": "안녕 🙂"}]).encode()
        stub.add_response(
            "invoke_endpoint",
            {"Body": io.BytesIO(body), "ContentType": "application/json"},
            {
                "EndpointName": "mme",
                "Body": json.dumps({"inputs": "hi"}).encode(),
                "ContentType": "application/json",
                "Accept": "application/json",
                "TargetModel": "smollm2.tar.gz",
            },
        )
        result = EndpointClient.sagemaker("mme", client=runtime).invoke({"inputs": "hi"}, target_model="smollm2.tar.gz")
    assert result == [{"generated_text": "안녕 🙂"}]


def model_error(stub: Stubber, status: int, body: dict) -> None:
    """The container answered ``status`` with ``body``: SageMaker's ModelError (424) carrying both."""
    stub.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message=f"Received client error ({status})",
        http_status_code=424,
        response_meta={},
    )
    stub._queue[-1]["response"][1]["OriginalStatusCode"] = status  # noqa: SLF001 - modelled ModelError fields
    stub._queue[-1]["response"][1]["OriginalMessage"] = json.dumps(body)


def test_invoke_model_error_keeps_the_container_status_and_type(runtime):
    with Stubber(runtime) as stub:
        model_error(stub, 429, {"error": "queue is full", "type": "queue_full"})
        with pytest.raises(EndpointError) as info:
            EndpointClient.sagemaker("ep", client=runtime).invoke({"inputs": "hi"})
    assert (info.value.status_code, info.value.error_type, info.value.message) == (429, "queue_full", "queue is full")


def test_invoke_unknown_endpoint(runtime):
    with Stubber(runtime) as stub:
        stub.add_client_error("invoke_endpoint", "ValidationError", "Endpoint nope of account 123 not found.", 400)
        with pytest.raises(EndpointError, match="Endpoint nope .* not found") as info:
            EndpointClient.sagemaker("nope", client=runtime).invoke({"inputs": "hi"})
    assert info.value.status_code == 400


def test_no_region_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.delenv("AWS_REGION", raising=False)
    with pytest.raises(EndpointError, match="region"):
        EndpointClient.sagemaker("ep")


def test_no_credentials_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(EndpointError, match="no AWS credentials found"):
        EndpointClient.sagemaker("ep")


ONE_TOKEN = payload_part(tgi(0, 1, "네", "length").encode())


@pytest.mark.parametrize(
    "default, adapter, sent",
    [(None, "support", b"support"), ("llama-base", None, b"llama-base"), ("llama-base", "support", b"support")],
)
def test_stream_names_the_inference_component(runtime, default, adapter, sent):
    emulator = install(runtime, ONE_TOKEN)
    client = EndpointClient.sagemaker("lora", client=runtime, inference_component=default)
    assert [e.text for e in client.stream({"inputs": "hi"}, adapter=adapter)] == ["네"]
    (request,) = emulator.requests
    assert request.headers["X-Amzn-SageMaker-Inference-Component"] == sent
    assert request.url == "http://127.0.0.1:9/endpoints/lora/invocations-response-stream"


def test_stream_without_a_component_sends_none(runtime):
    emulator = install(runtime, ONE_TOKEN)
    list(EndpointClient.sagemaker("ep", client=runtime).stream({"inputs": "hi"}))
    assert "X-Amzn-SageMaker-Inference-Component" not in emulator.requests[0].headers


def test_invoke_an_adapter_component(runtime):
    with Stubber(runtime) as stub:
        stub.add_response(
            "invoke_endpoint",
            {"Body": io.BytesIO(b'[{"generated_text": "ok"}]'), "ContentType": "application/json"},
            {
                "EndpointName": "lora",
                "Body": json.dumps({"inputs": "hi"}).encode(),
                "ContentType": "application/json",
                "Accept": "application/json",
                "InferenceComponentName": "support",
            },
        )
        client = EndpointClient.sagemaker("lora", client=runtime, inference_component="llama-base")
        assert client.invoke({"inputs": "hi"}, adapter="support") == [{"generated_text": "ok"}]


def test_an_adapter_the_container_does_not_know_is_its_404(runtime):
    with Stubber(runtime) as stub:
        model_error(stub, 404, {"error": "adapter 'support' is not registered", "type": "adapter_not_found"})
        with pytest.raises(EndpointError) as info:
            EndpointClient.sagemaker("lora", client=runtime).invoke({"inputs": "hi"}, adapter="support")
    assert (info.value.status_code, info.value.error_type) == (404, "adapter_not_found")


def test_target_model_and_adapter_together_are_refused(runtime):
    client = EndpointClient.sagemaker("ep", client=runtime)
    with pytest.raises(EndpointError, match="not both"):
        client.invoke({"inputs": "x"}, target_model="m.tar.gz", adapter="a")
