"""Multi-model mode with real model processes (tiny ONNX and BERT models), on both backends.

Isolation (a killed worker fails alone and reloads), memory returned on
unload, corrupt folders, one load for concurrent first requests, eviction
driven by the measured memory of the workers. Every app-level test runs
against the native backend (a process per model, forked from the zygote) and
the Triton backend (Triton's Python backend stubs); Triton's own failure
modes are in test_multimodel_triton.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from flask import Flask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "multimodel"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llm_byoc.api.errors import register_error_handlers
from llm_byoc.config import EngineConfig, MultiModelConfig
from llm_byoc.errors import EngineDead
from llm_byoc.multimodel.messages import InvokeRequest
from llm_byoc.multimodel.model_engine import ProcessWorkerFactory
from llm_byoc.api.multimodel_routes import model_manager, register_multi_model_routes
from llm_byoc.multimodel.store import describe_model
from llm_byoc.multimodel.model_process import ModelProcess
from fixtures.triton_server import running_triton, triton_config
from mme_tiny_models import build_tiny_embedder, build_tiny_onnx, png_bytes

MiB = 1024 * 1024
RED = (250, 5, 5)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mme-root")
    for name in ("alpha", "beta", "gamma"):
        build_tiny_onnx(root / name)
    (root / "broken").mkdir()
    (root / "broken" / "model.onnx").write_bytes(b"\x08\x07 this is not an onnx graph")
    return root


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    """One tritonserver for this module's Triton runs (skips them, with the reason, where none runs)."""
    tmp = tmp_path_factory.mktemp("triton")
    config = triton_config(tmp, load_timeout_s=60)
    with running_triton(config, tmp / "triton.log"):
        yield config


@pytest.fixture(params=["native", "triton"])
def backend(request) -> MultiModelConfig:
    """The multi-model settings of one backend (model_root and budget set by make_app)."""
    engine = EngineConfig(num_threads=1)
    if request.param == "triton":
        return MultiModelConfig(engine=engine, backend="triton", triton=request.getfixturevalue("triton"))
    return MultiModelConfig(engine=engine)


class CountingFactory:
    def __init__(self, config: MultiModelConfig):
        if config.backend == "triton":
            from llm_byoc.multimodel.triton.factory import TritonWorkerFactory

            self.inner = TritonWorkerFactory.from_config(config)
        else:
            self.inner = ProcessWorkerFactory(config.engine, start_method=config.start_method)
        self.loads: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, spec):
        with self._lock:
            self.loads.append(spec.name)
        return self.inner(spec)

    def shared_bytes(self) -> int:
        return self.inner.shared_bytes()

    def check_health(self) -> None:
        getattr(self.inner, "check_health", lambda: None)()


def make_app(root: Path, budget: int = 4 * 1024 * MiB, backend: MultiModelConfig | None = None):
    app = Flask("mme-test")
    register_error_handlers(app)
    config = dataclasses.replace(backend or MultiModelConfig(engine=EngineConfig(num_threads=1)),
                                 model_root=str(root), memory_budget_bytes=budget)
    factory = CountingFactory(config)
    register_multi_model_routes(app, config, factory)
    return app, factory


@pytest.fixture()
def app_and_factory(root, backend):
    app, factory = make_app(root, backend=backend)
    yield app, factory
    model_manager(app).shutdown()


def classify(client, name: str, colour=RED):
    return client.post(f"/models/{name}/invoke", data=png_bytes(colour), content_type="image/png")


def worker_pid(app, name: str) -> int:
    with model_manager(app).acquire(name) as entry:
        return entry.worker.pid


def pid_exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_load_invoke_unload_returns_the_process(app_and_factory, root):
    app, _ = app_and_factory
    client = app.test_client()
    response = client.post("/models", json={"model_name": "alpha", "url": str(root / "alpha")})
    assert response.status_code == 200, response.json
    assert response.json["memory_bytes"] > 10 * MiB  # measured (USS of its processes), not the 331-byte file
    response = classify(client, "alpha")
    assert response.status_code == 200 and response.json["predictions"][0]["label"] == "red"
    pid = worker_pid(app, "alpha")
    assert client.delete("/models/alpha").status_code == 200
    assert not pid_exists(pid)  # stopped and joined before DELETE answered


def test_killed_worker_fails_alone_and_reloads(app_and_factory):
    app, factory = app_and_factory
    client = app.test_client()
    assert classify(client, "alpha").status_code == 200
    assert classify(client, "beta").status_code == 200
    alpha_pid, beta_pid = worker_pid(app, "alpha"), worker_pid(app, "beta")
    os.kill(alpha_pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_exists(alpha_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert classify(client, "beta").status_code == 200 and worker_pid(app, "beta") == beta_pid
    response = classify(client, "alpha")  # the dead worker is dropped and reloaded
    assert response.status_code == 200 and response.json["predictions"][0]["label"] == "red"
    assert worker_pid(app, "alpha") != alpha_pid
    assert factory.loads.count("alpha") == 2 and factory.loads.count("beta") == 1


def test_pending_requests_fail_when_the_worker_dies(root):
    worker = ModelProcess(describe_model("gamma", root / "gamma"), num_threads=1)
    worker.start(timeout_s=60)
    try:
        os.kill(worker.pid, signal.SIGSTOP)  # hold the request in flight
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(worker.invoke, InvokeRequest(content_type="image/png"), png_bytes(RED), 30)
            time.sleep(0.2)
            os.kill(worker.pid, signal.SIGKILL)
            with pytest.raises(EngineDead):
                pending.result(10)
        assert not worker.alive
        with pytest.raises(EngineDead):
            worker.invoke(InvokeRequest(content_type="image/png"), png_bytes(RED))
    finally:
        worker.stop()


def test_hung_worker_times_out_and_is_killed_on_stop(root):
    from llm_byoc.errors import RequestTimeout

    worker = ModelProcess(describe_model("gamma", root / "gamma"), num_threads=1)
    worker.start(timeout_s=60)
    pid = worker.pid
    os.kill(pid, signal.SIGSTOP)
    with pytest.raises(RequestTimeout):
        worker.invoke(InvokeRequest(content_type="image/png"), png_bytes(RED), timeout_s=0.5)
    started = time.monotonic()
    worker.stop(timeout_s=1.0)
    assert time.monotonic() - started < 10 and not pid_exists(pid)


def test_corrupt_folder_is_a_clear_error_and_others_keep_serving(app_and_factory):
    app, _ = app_and_factory
    client = app.test_client()
    assert classify(client, "alpha").status_code == 200
    response = client.post("/models", json={"model_name": "broken", "url": "broken"})
    assert response.status_code == 500 and response.json["type"] == "model_load_error"
    assert "broken" in response.json["error"]
    assert classify(client, "broken").json["type"] == "model_load_error"
    assert classify(client, "alpha").status_code == 200
    listed = {m["model_name"]: m for m in client.get("/models").json["models"]}
    assert listed["broken"]["state"] == "failed" and "broken" in listed["broken"]["error"]


def test_concurrent_first_requests_start_one_worker(app_and_factory):
    app, factory = app_and_factory
    client = app.test_client()
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: classify(client, "gamma"), range(8)))
    assert [r.status_code for r in responses] == [200] * 8
    assert factory.loads == ["gamma"]


def test_wrong_payload_for_the_kind(app_and_factory):
    client = app_and_factory[0].test_client()
    assert client.post("/models/alpha/invoke", data=b"text", content_type="text/plain").status_code == 415
    assert client.post("/models/alpha/invoke", json={"inputs": "###"}).status_code == 400
    body = {"inputs": base64.b64encode(png_bytes(RED)).decode()}
    assert client.post("/models/alpha/invoke", json=body).json["predictions"][0]["label"] == "red"


def test_measured_memory_drives_lru_eviction(root, backend):
    app, factory = make_app(root, budget=1, backend=backend)  # placeholder, set below once a worker is measured
    client = app.test_client()
    manager = model_manager(app)
    try:
        manager.budget_bytes = 4 * 1024 * MiB
        assert classify(client, "alpha").status_code == 200
        one = manager.describe("alpha")["memory_bytes"]
        manager.budget_bytes = int(one * 1.5)  # room for one worker, not two
        alpha_pid = worker_pid(app, "alpha")
        assert classify(client, "beta").status_code == 200  # loads, measures, evicts alpha
        assert not pid_exists(alpha_pid)
        states = {m["model_name"]: m["state"] for m in client.get("/models").json["models"]}
        assert states == {"alpha": "unloaded", "beta": "loaded"}
        assert classify(client, "alpha").status_code == 200  # back, beta out
        assert factory.loads == ["alpha", "beta", "alpha"]
    finally:
        manager.shutdown()


@pytest.mark.slow
def test_text_embedding_worker(tmp_path, backend):
    build_tiny_embedder(tmp_path / "emb")
    app, _ = make_app(tmp_path, backend=backend)
    client = app.test_client()
    try:
        response = client.post("/models/emb/invoke", json={"inputs": ["hello world", "bad movie"]})
        assert response.status_code == 200, response.json
        vectors = response.json["embeddings"]
        assert len(vectors) == 2 and abs(sum(v * v for v in vectors[0]) - 1) < 1e-4
        response = client.post("/models/emb/invoke", data=png_bytes(RED), content_type="image/png")
        assert response.status_code == 415
    finally:
        model_manager(app).shutdown()
    assert json.loads(client.get("/ping").data)["loaded"] == 0


@pytest.mark.slow
def test_causal_lm_worker_serves_concurrent_requests(tmp_path, tiny_llama_dir, backend):
    import shutil

    shutil.copytree(tiny_llama_dir, tmp_path / "tiny-llama")
    app, _ = make_app(tmp_path, backend=backend)  # Triton: causal LMs stay on the native engine
    client = app.test_client()
    try:
        bodies = [{"inputs": f"Hello world {i}", "parameters": {"max_new_tokens": 5, "details": True}} for i in range(4)]
        with ThreadPoolExecutor(4) as pool:
            responses = list(pool.map(lambda b: client.post("/models/tiny-llama/invoke", json=b), bodies))
        assert [r.status_code for r in responses] == [200] * 4, responses[0].json
        assert all(r.json[0]["details"]["generated_tokens"] <= 5 for r in responses)
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert client.post("/models/tiny-llama/invoke", json=chat).status_code == 200
        bad = client.post("/models/tiny-llama/invoke", json={"inputs": "x", "parameters": {"max_new_tokens": 0}})
        assert bad.status_code == 400
        assert client.post("/models/tiny-llama/invoke", data=png_bytes(RED), content_type="image/png").status_code == 415
        assert client.get("/models/tiny-llama").json["task"] == "causal-lm"
    finally:
        model_manager(app).shutdown()
