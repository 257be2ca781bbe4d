"""The routes and every error status, against the fake engine."""

from __future__ import annotations

import dataclasses
import io

from llm_byoc.protocol import EngineState


def invoke(client, body, **kwargs):
    return client.post("/invocations", json=body, **kwargs)


def test_ping_is_200_only_when_ready(client, engine):
    assert client.get("/ping").status_code == 200
    for state, error_type in ((EngineState.LOADING, "engine_not_ready"), (EngineState.DEAD, "engine_dead")):
        engine.state = state
        response = client.get("/ping")
        assert response.status_code == 503
        assert response.get_json()["type"] == error_type


def test_ping_names_the_engine_and_its_decoder(client, engine):
    assert client.get("/ping").get_json()["engine"] == {"name": "native", "reason": "", "decoder": "native"}
    real = engine.health

    def generic():
        report = real()
        return dataclasses.replace(report, info=dataclasses.replace(report.info, decoder="generic"))

    engine.health = generic
    assert client.get("/ping").get_json()["engine"]["decoder"] == "generic"


def test_ping_is_503_when_health_itself_fails(client, engine):
    def broken():
        raise ConnectionError("socket closed")

    engine.health = broken
    response = client.get("/ping")
    assert response.status_code == 503
    assert "socket closed" in response.get_json()["error"]


def test_execution_parameters(client):
    body = client.get("/execution-parameters").get_json()
    assert body == {"MaxConcurrentTransforms": 8, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 1}


def test_tgi_invocation_answers_one_result_per_input_in_order(client):
    response = invoke(client, {"inputs": ["abc", "xy"], "parameters": {"max_new_tokens": 10}})
    assert response.status_code == 200
    assert response.get_json() == [{"generated_text": "cba"}, {"generated_text": "yx"}]


def test_wrong_content_type_is_415(client):
    response = client.post("/invocations", data='{"inputs": "a"}', content_type="text/plain")
    assert response.status_code == 415
    assert response.get_json()["type"] == "unsupported_media_type"
    assert client.post("/invocations", data=b"{}").status_code == 415  # no content type at all


def test_charset_other_than_utf8_is_415(client):
    response = client.post("/invocations", data=b'{"inputs": "a"}', content_type="application/json; charset=latin-1")
    assert response.status_code == 415


def test_malformed_json_is_400(client):
    for data in (b'{"inputs": ', b"", b'{"inputs": NaN}', b"\xff\xfe"):
        response = client.post("/invocations", data=data, content_type="application/json")
        assert response.status_code == 400, data
        assert response.get_json()["type"] == "invalid_request"


def test_body_over_the_limit_is_413_by_content_length(client, config, engine):
    big = {"inputs": "a" * config.max_payload_bytes}
    response = invoke(client, big)
    assert response.status_code == 413
    assert response.get_json()["type"] == "payload_too_large"
    assert engine.submitted == []


def test_body_over_the_limit_is_413_when_chunked(client, config):
    body = b'{"inputs": "' + b"a" * config.max_payload_bytes + b'"}'
    response = client.post(  # no Content-Length: the server must count what it reads
        "/invocations",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        headers={"Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},  # as gunicorn sets for chunked bodies
    )
    assert response.status_code == 413
    assert response.get_json()["type"] == "payload_too_large"


def test_body_just_under_the_limit_is_accepted(client, config):
    prompt = "a" * (config.max_payload_bytes - len('{"inputs": ""}') - 200)
    response = invoke(client, {"inputs": prompt, "parameters": {"max_new_tokens": 1}})
    assert response.status_code == 200


def test_queue_full_is_429(client, engine):
    engine.queue_full = True
    response = invoke(client, {"inputs": "abc"})
    assert response.status_code == 429
    assert response.get_json() == {"error": "the queue is full", "type": "queue_full"}


def test_engine_dead_or_loading_is_503(client, engine):
    engine.state = EngineState.DEAD
    assert invoke(client, {"inputs": "abc"}).get_json()["type"] == "engine_dead"
    engine.state = EngineState.LOADING
    response = invoke(client, {"inputs": "abc"})
    assert response.status_code == 503
    assert response.get_json()["type"] == "engine_not_ready"


def test_timeout_is_504_and_aborts(engine):
    from llm_byoc.api.app import create_app
    from llm_byoc.config import ServerConfig

    engine.hang = True
    client = create_app(engine, ServerConfig(timeout_s=1)).test_client()
    response = invoke(client, {"inputs": "abc"})
    assert response.status_code == 504
    assert response.get_json()["type"] == "timeout"
    assert len(engine.aborted) == 1


def test_invalid_sampling_values_from_the_engine_are_400(client, engine):
    response = invoke(client, {"inputs": "abc", "parameters": {"max_new_tokens": 1000}})
    assert response.status_code == 400
    assert "max_new_tokens" in response.get_json()["error"]


def test_unknown_route_and_method_are_json(client):
    response = client.get("/nope")
    assert response.status_code == 404
    assert set(response.get_json()) == {"error", "type"}
    response = client.get("/invocations")
    assert response.status_code == 405
    assert set(response.get_json()) == {"error", "type"}


def test_custom_attributes_are_echoed_and_request_id_kept(client, engine):
    headers = {"X-Amzn-SageMaker-Custom-Attributes": "trace=1;x=y", "X-Amzn-SageMaker-Inference-Id": "abc-123"}
    response = invoke(client, {"inputs": "abc"}, headers=headers)
    assert response.headers["X-Amzn-SageMaker-Custom-Attributes"] == "trace=1;x=y"
    assert response.headers["X-Request-Id"] == "abc-123"
    assert engine.submitted[0][2].startswith("abc-123-")


def test_request_ids_are_generated_and_unsafe_ones_replaced(client):
    first = invoke(client, {"inputs": "a"}).headers["X-Request-Id"]
    second = invoke(client, {"inputs": "a"}, headers={"X-Request-Id": "bad id;drop"}).headers["X-Request-Id"]
    assert first != second and len(second) == 32


def test_errors_also_carry_the_request_id(client):
    response = client.post("/invocations", data=b"{", content_type="application/json", headers={"X-Request-Id": "r1"})
    assert response.headers["X-Request-Id"] == "r1"


def test_request_log_line(client, caplog):
    caplog.set_level("INFO", logger="llm_byoc.access")
    invoke(client, {"inputs": "abc"}, headers={"X-Request-Id": "log-me"})
    line = next(r.getMessage() for r in caplog.records if "log-me" in r.getMessage())
    assert "POST /invocations" in line and "status=200" in line and "completion_tokens=4" in line
