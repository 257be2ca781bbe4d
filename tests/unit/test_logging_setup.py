from __future__ import annotations

import io
import json
import logging
import threading

import pytest
from flask import Flask, Response, stream_with_context
from llm_byoc.contract import INFERENCE_ID_HEADER, REQUEST_ID_HEADER
from llm_byoc.logging_setup import (
    MASK,
    configure_logging,
    context_from_headers,
    current_request,
    format_args,
    looks_secret,
    redact_url,
    redact_value,
    register_request_context,
    request_context,
    scrub,
    secret_values,
)


@pytest.fixture
def log_stream():
    stream = io.StringIO()
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    handler = configure_logging("debug", stream=stream)
    yield stream
    root.removeHandler(handler)
    root.setLevel(saved_level)
    assert root.handlers == saved_handlers


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_line_is_json_with_time_level_logger_message_and_extras(log_stream):
    logging.getLogger("llm_byoc.test").info("loaded %s", "model", extra={"seconds": 1.5, "path": "/opt/ml/model"})
    (entry,) = lines(log_stream)
    assert entry["level"] == "INFO" and entry["logger"] == "llm_byoc.test"
    assert entry["message"] == "loaded model"
    assert entry["seconds"] == 1.5 and entry["path"] == "/opt/ml/model"
    assert entry["time"].endswith("+00:00") and "T" in entry["time"]
    assert "request_id" not in entry  # not in a request


def test_exceptions_are_kept_in_one_line(log_stream):
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        logging.getLogger("t").exception("failed")
    (entry,) = lines(log_stream)
    assert entry["level"] == "ERROR" and "RuntimeError: boom" in entry["exception"]
    assert len(log_stream.getvalue().strip().splitlines()) == 1


def test_configure_logging_is_idempotent_and_checks_the_level():
    stream = io.StringIO()
    root = logging.getLogger()
    before = list(root.handlers)
    first = configure_logging("info", stream=stream)
    second = configure_logging("warning", stream=stream)
    try:
        assert first not in root.handlers and second in root.handlers
        assert root.level == logging.WARNING
        with pytest.raises(ValueError):
            configure_logging("loud")
    finally:
        root.removeHandler(second)
        root.setLevel(logging.WARNING)
    assert root.handlers == before


def test_request_id_comes_from_sagemaker_then_x_request_id_then_a_new_one():
    both = {INFERENCE_ID_HEADER: "sm-123", REQUEST_ID_HEADER: "mine"}
    assert context_from_headers(both).request_id == "sm-123"
    assert context_from_headers(both).inference_id == "sm-123"
    only_ours = context_from_headers({REQUEST_ID_HEADER: "abc-1"})
    assert only_ours.request_id == "abc-1" and only_ours.inference_id is None
    fresh = context_from_headers({})
    assert len(fresh.request_id) == 32 and fresh.request_id != context_from_headers({}).request_id


@pytest.mark.parametrize("bad", ["has space", "new\nline", "x" * 200, "", '{"json": 1}'])
def test_unsafe_ids_are_replaced(bad):
    context = context_from_headers({REQUEST_ID_HEADER: bad})
    assert context.request_id != bad and len(context.request_id) == 32


def test_request_context_tags_lines_and_is_per_thread(log_stream):
    log = logging.getLogger("t")
    seen = {}

    def other_thread():
        seen["other"] = current_request()

    with request_context({INFERENCE_ID_HEADER: "sm-9"}):
        log.info("inside")
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    log.info("outside")
    inside, outside = lines(log_stream)
    assert inside["request_id"] == "sm-9" and inside["inference_id"] == "sm-9"
    assert "request_id" not in outside
    assert seen["other"] is None


def make_app() -> Flask:
    app = Flask("log-test")
    log = logging.getLogger("llm_byoc.api")

    @app.post("/invocations")
    def invocations():
        log.info("accepted")

        def tokens():
            for i in range(2):
                log.info("token", extra={"index": i})
                yield f"data: {i}\n\n"

        return Response(stream_with_context(tokens()), content_type="text/event-stream")

    register_request_context(app)
    return app


def test_flask_requests_log_their_id_through_the_stream_and_an_access_line(log_stream):
    client = make_app().test_client()
    response = client.post("/invocations", headers={INFERENCE_ID_HEADER: "inf-1"})
    assert response.get_data(as_text=True) == "data: 0\n\ndata: 1\n\n"
    assert response.headers[REQUEST_ID_HEADER] == "inf-1"
    response.close()
    response = client.post("/invocations", headers={REQUEST_ID_HEADER: "req-2"})
    response.get_data()
    response.close()
    entries = [e for e in lines(log_stream) if e["logger"] in ("llm_byoc.api", "llm_byoc.access")]
    first, second = entries[:4], entries[4:]
    assert [e["message"] for e in first] == ["accepted", "token", "token", "POST /invocations 200"]
    assert all(e["request_id"] == "inf-1" and e["inference_id"] == "inf-1" for e in first)
    assert all(e["request_id"] == "req-2" and "inference_id" not in e for e in second)
    access = first[-1]
    assert access["status"] == 200 and access["method"] == "POST" and access["duration_s"] >= 0
    assert current_request() is None  # nothing leaks out of the request


# --- secrets ------------------------------------------------------------------------------------

SECRET = "hf_SECRETSECRET123"


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "hf_token", "SM_VLLM_HF_TOKEN",
                                  "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "api_key",
                                  "OPENAI_API_KEY", "apiKey", "hfToken", "db_password", "X-Amz-Signature",
                                  "X-Amz-Credential", "X-Amz-Security-Token", "sig", "Authorization"])
def test_names_that_carry_a_secret(name):
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["max_num_batched_tokens", "num_speculative_tokens", "LLM_BYOC_MAX_INPUT_TOKENS",
                                  "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "ssl_keyfile", "model",
                                  "LLM_BYOC_ENGINE_SOCKET", "session_ttl_s", "kv_cache_memory_bytes", "HF_ENDPOINT"])
def test_names_that_do_not(name):
    assert not looks_secret(name)


def test_url_credentials_are_masked_wherever_they_are_in_a_text():
    text = (f"fetching https://user:{SECRET}@host.example/org/m?revision=main&X-Amz-Signature=abc123"
            f"&X-Amz-Credential=AKIA%2F1&b=2, then http://{SECRET}@h/ and s3://bucket/prefix/ for me@example.com")
    assert redact_url(text) == ("fetching https://***@host.example/org/m?revision=main&X-Amz-Signature=***"
                                "&X-Amz-Credential=***&b=2, then http://***@h/ and s3://bucket/prefix/ for "
                                "me@example.com")
    assert redact_url(f"https://user:p@ss{SECRET}@host/x") == "https://***@host/x"  # the last @ ends the userinfo
    assert redact_url("https://host/a@b?token=&x=1") == "https://host/a@b?token=&x=1"  # nothing to mask


def test_values_are_masked_under_a_secret_name_at_any_depth():
    assert redact_value("HF_TOKEN", SECRET) == MASK
    assert redact_value("use_auth", True) is True and redact_value("hf_token", None) is None
    assert redact_value("api_key", 1) == MASK
    assert redact_value("model", f"https://u:{SECRET}@h/m") == "https://***@h/m"
    nested = {"model": "m", "hf_overrides": {"api_key": SECRET, "n": 1}, "urls": [f"https://u:{SECRET}@h", 2]}
    assert redact_value("speculative_config", nested) == {"model": "m", "hf_overrides": {"api_key": MASK, "n": 1},
                                                          "urls": ["https://***@h", 2]}
    line = format_args({"model": "/m", "hf_token": SECRET, "max_num_batched_tokens": 512,
                        "structured_outputs_config": {"backend": "guidance"}})
    assert line == "hf_token=***, max_num_batched_tokens=512, model=/m, structured_outputs_config={'backend': 'guidance'}"


def test_secret_values_are_found_in_an_environment_and_its_json_and_scrubbed_from_free_text():
    env = {"HF_TOKEN": SECRET, "LLM_BYOC_VLLM_ENGINE_ARGS": '{"hf_token": "hf_other_secret", "seed": 1}',
           "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI", "LLM_BYOC_MODEL": "/opt/ml/model", "SOME_AUTH": "on"}
    found = secret_values(env)
    assert found == {SECRET, "hf_other_secret", "wJalrXUtnFEMI"}  # "on" is too short to hunt for in free text
    said = f"refused {SECRET} and hf_other_secret at https://x:y@h/ (configuration on)"
    assert scrub(said, found) == "refused *** and *** at https://***@h/ (configuration on)"
    assert scrub(said, [None]) == f"refused {SECRET} and hf_other_secret at https://***@h/ (configuration on)"


def test_a_line_never_carries_url_credentials(log_stream):
    logging.getLogger("llm_byoc.test").info("downloading %s", f"https://user:{SECRET}@hub.example/org/m")
    entry = json.loads(log_stream.getvalue())
    assert entry["message"] == "downloading https://***@hub.example/org/m"

