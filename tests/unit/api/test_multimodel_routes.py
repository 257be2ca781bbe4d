"""The MME HTTP routes over fake workers: status codes, JSON errors, pagination."""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from flask import Flask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "multimodel"))

from llm_byoc.api.errors import register_error_handlers
from llm_byoc.api.loop_admission import ADMISSION_EXTENSION, TICKET
from llm_byoc.api.multimodel_routes import register_multi_model_routes
from llm_byoc.config import MultiModelConfig
from llm_byoc.contract import TARGET_MODEL_HEADER
from mme_fakes import FakeFactory

MB = 1_000_000


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        config = {"task": "text-embedding", "framework": "pytorch", "size_bytes": 40 * MB}
        (tmp_path / name / "llm_byoc_model.json").write_text(json.dumps(config))
    return tmp_path


@pytest.fixture()
def factory() -> FakeFactory:
    return FakeFactory()


@pytest.fixture()
def client(root, factory):
    app = Flask("test")
    register_error_handlers(app)
    register_multi_model_routes(app, MultiModelConfig(model_root=str(root), memory_budget_bytes=100 * MB), factory)
    return app.test_client()


def assert_error(response, status: int, error_type: str) -> None:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.is_json and response.json["type"] == error_type and response.json["error"]


def test_load_describe_invoke_unload(client, root, factory):
    response = client.post("/models", json={"model_name": "a", "url": str(root / "a")})
    assert response.status_code == 200
    assert response.json["state"] == "loaded" and response.json["memory_bytes"] == 40 * MB
    assert client.get("/models/a").json["task"] == "text-embedding"
    response = client.post("/models/a/invoke", data=b"hello", content_type="application/json")
    assert response.status_code == 200 and response.json == {"model": "a", "echo": "hello"}
    response = client.post("/invocations", data=b"again", headers={TARGET_MODEL_HEADER: "a"})
    assert response.json["echo"] == "again"
    assert client.delete("/models/a").status_code == 200
    assert factory.workers["a"].stopped
    assert_error(client.get("/models/a"), 404, "model_not_found")
    assert_error(client.delete("/models/a"), 404, "model_not_found")


def test_load_twice_is_409(client):
    assert client.post("/models", json={"model_name": "a", "url": "a"}).status_code == 200
    assert_error(client.post("/models", json={"model_name": "a", "url": "a"}), 409, "model_already_loaded")


@pytest.mark.parametrize(
    "body",
    [
        {"model_name": "x", "url": "/etc"},
        {"model_name": "x", "url": "../"},
        {"model_name": "../a", "url": "a"},
        {"model_name": "a"},
        {"url": "a"},
        ["a"],
    ],
)
def test_bad_load_requests_are_400(client, body):
    assert_error(client.post("/models", json=body), 400, "invalid_request")


def test_load_body_that_is_not_json_is_400(client):
    assert_error(client.post("/models", data=b"{oops", content_type="application/json"), 400, "invalid_request")


def test_unknown_models_are_404(client):
    assert_error(client.post("/models/zzz/invoke", data=b"{}"), 404, "model_not_found")
    assert_error(client.post("/invocations", data=b"{}", headers={TARGET_MODEL_HEADER: "zzz"}), 404, "model_not_found")


def test_invocations_need_the_target_header(client):
    assert_error(client.post("/invocations", data=b"{}"), 400, "invalid_request")
    assert_error(client.post("/invocations", data=b"{}", headers={TARGET_MODEL_HEADER: "../a"}), 400, "invalid_request")


def test_lazy_invoke_of_a_folder_in_the_repository(client, factory):
    assert client.post("/models/b/invoke", data=b"1").status_code == 200
    assert factory.loads == ["b"]


def test_too_big_for_the_budget_is_507(client, factory):
    factory.gates["a"] = gate = threading.Event()
    factory.gates["b"] = gate
    factory.memory["c"] = 30 * MB
    with ThreadPoolExecutor(2) as pool:
        busy = [pool.submit(client.post, f"/models/{n}/invoke", data=b"x") for n in ("a", "b")]
        deadline = time.monotonic() + 5
        while len(factory.loads) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert_error(client.post("/models", json={"model_name": "c", "url": "c"}), 507, "insufficient_memory")
        gate.set()
        assert [f.result(5).status_code for f in busy] == [200, 200]


def test_listing_is_paginated_with_state_and_size(client):
    for name in ("a", "b"):
        client.post("/models", json={"model_name": name, "url": name})
    first = client.get("/models?max_results=1").json
    assert [m["model_name"] for m in first["models"]] == ["a"]
    assert first["models"][0]["state"] == "loaded" and first["models"][0]["size_bytes"] == 40 * MB
    second = client.get(f"/models?max_results=1&next_page_token={first['next_page_token']}").json
    assert [m["model_name"] for m in second["models"]] == ["b"] and "next_page_token" not in second
    assert_error(client.get("/models?max_results=0"), 400, "invalid_request")
    assert_error(client.get("/models?next_page_token=%%%"), 400, "invalid_request")


def test_evicted_model_is_listed_as_unloaded(client):
    for name in ("a", "b", "c"):  # budget holds two
        assert client.post("/models", json={"model_name": name, "url": name}).status_code == 200
    states = {m["model_name"]: m["state"] for m in client.get("/models").json["models"]}
    assert states == {"a": "unloaded", "b": "loaded", "c": "loaded"}


def test_ping(client):
    response = client.get("/ping")
    assert response.status_code == 200 and response.json["status"] == "healthy"


def test_invokes_of_one_model_beyond_its_limit_are_429_whoever_admitted_them(root, factory):
    app = Flask("test")
    register_error_handlers(app)
    register_multi_model_routes(app, MultiModelConfig(model_root=str(root), memory_budget_bytes=100 * MB), factory,
                                max_in_flight=2)
    client = app.test_client()
    admission = app.extensions[ADMISSION_EXTENSION]  # what the HTTP worker's event loop admits with
    factory.gates["a"] = gate = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        loop_ticket = admission.reserve("/models/a/invoke")  # the event loop took this one's room
        busy = [pool.submit(client.post, "/models/a/invoke", data=b"x", environ_overrides={TICKET: loop_ticket}),
                pool.submit(client.post, "/invocations", data=b"y", headers={TARGET_MODEL_HEADER: "a"})]
        deadline = time.monotonic() + 5
        while admission.gate.in_flight("a") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert admission.gate.in_flight("a") == 2  # the event loop's ticket is not counted twice
        for path, headers in (("/models/a/invoke", {}), ("/invocations", {TARGET_MODEL_HEADER: "a"})):
            response = client.post(path, data=b"z", headers=headers)
            assert_error(response, 429, "queue_full")
            assert "'a' has 2 requests in flight" in response.json["error"]
        assert client.post("/models/b/invoke", data=b"1").status_code == 200  # another model has its own room
        gate.set()
        assert [f.result(5).status_code for f in busy] == [200, 200]
    assert admission.gate.busy_keys() == set()
