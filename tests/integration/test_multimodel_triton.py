"""The Triton backend's own failure modes and dynamic batching, in-process and under the real `serve`.

A stub that never starts and a model file Triton cannot load are 5xx answers
within bounded time, with the cache left consistent; Triton gone is /ping 503
(and under `serve`, a non-zero exit); SIGTERM stops tritonserver with serve.
Skipped, with the reason, where no tritonserver can run.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from flask import Flask

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "multimodel"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixtures.triton_server import free_port, running_triton, triton_config
from llm_byoc.api.errors import register_error_handlers
from llm_byoc.config import EngineConfig, MultiModelConfig
from llm_byoc.api.multimodel_routes import model_manager, register_multi_model_routes
from mme_tiny_models import build_tiny_embedder, build_tiny_onnx, png_bytes
from serve_helpers import wait_for_ping

pytestmark = pytest.mark.slow
RED = (250, 5, 5)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mme-triton-root")
    build_tiny_onnx(root / "alpha")
    build_tiny_embedder(root / "emb")
    _unknown_op_onnx(root / "unloadable")
    return root


def _unknown_op_onnx(dest: Path) -> None:
    """A well-formed graph (we can read its tensors) that ONNX Runtime cannot run."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NoSuchOperator", ["pixels"], ["logits"], domain="example.invalid")],
        "unloadable",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("example.invalid", 1)])
    dest.mkdir(parents=True)
    onnx.save(model, str(dest / "model.onnx"))


def make_app(root: Path, triton, **overrides):
    from llm_byoc.multimodel.triton.factory import TritonWorkerFactory

    app = Flask("mme-triton")
    register_error_handlers(app)
    config = MultiModelConfig(
        model_root=str(root), memory_budget_bytes=4 << 30, engine=EngineConfig(num_threads=1),
        backend="triton", triton=dataclasses.replace(triton, **overrides),
    )
    register_multi_model_routes(app, config, TritonWorkerFactory.from_config(config))
    return app


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("triton")
    config = triton_config(tmp, load_timeout_s=60, batch_delay_us=50_000)
    with running_triton(config, tmp / "triton.log") as server:
        yield config, server


def test_a_model_triton_cannot_load_is_a_500_and_the_cache_stays_consistent(root, triton):
    config, _ = triton
    app = make_app(root, config)
    client = app.test_client()
    try:
        assert client.post("/models/alpha/invoke", data=png_bytes(RED), content_type="image/png").status_code == 200
        started = time.monotonic()
        response = client.post("/models", json={"model_name": "unloadable", "url": "unloadable"})
        assert response.status_code == 500 and response.json["type"] == "model_load_error", response.json
        assert "unloadable" in response.json["error"] and time.monotonic() - started < 60
        assert not (Path(config.repository) / "unloadable").exists()  # its folder is gone again
        invoked = client.post("/models/unloadable/invoke", data=png_bytes(RED), content_type="image/png")
        assert invoked.status_code == 500 and invoked.json["type"] == "model_load_error"
        listed = {m["model_name"]: m for m in client.get("/models").json["models"]}
        assert listed["unloadable"]["state"] == "failed" and listed["alpha"]["state"] == "loaded"
        assert client.post("/models/alpha/invoke", data=png_bytes(RED), content_type="image/png").status_code == 200
        assert client.get("/ping").status_code == 200
    finally:
        model_manager(app).shutdown()


def _settled_statistics(grpc, model: str, within_s: float = 10.0) -> dict:
    """The model's statistics once two reads 0.2 s apart agree (Triton updates them after it answers)."""
    last = grpc.statistics(model)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = grpc.statistics(model)
        if now == last:
            return now
        last = now
    return last


def test_dynamic_batching_runs_concurrent_requests_together(root, triton):
    config, _ = triton
    app = make_app(root, config)
    client = app.test_client()
    manager = model_manager(app)
    try:
        texts = ["hello world", "good movie", "bad movie", "the movie is great"]
        single = client.post("/models/emb/invoke", json={"inputs": texts}).json["embeddings"]
        factory_grpc = manager._factory.grpc
        # Triton counts a request a moment after answering it: the single request above must be in `before`
        before = _settled_statistics(factory_grpc, "emb")
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: client.post("/models/emb/invoke", json={"inputs": texts}), range(8)))
        assert all(a.status_code == 200 for a in answers)
        for answer in answers:  # batched or not, each text gets its own embedding back
            for got, want in zip(answer.json["embeddings"], single):
                assert max(abs(x - y) for x, y in zip(got, want)) < 1e-4
        after = _settled_statistics(factory_grpc, "emb")
        inferences = after["inference_count"] - before["inference_count"]
        executions = after["execution_count"] - before["execution_count"]
        assert inferences == 32 and executions < inferences, (inferences, executions)
    finally:
        manager.shutdown()


def test_a_stub_that_never_starts_is_a_5xx_within_the_load_timeout(root, tmp_path):
    config = triton_config(tmp_path, load_timeout_s=5)
    backends = Path(f"{config.repository}.backends")
    from llm_byoc.multimodel.triton.server import find_install

    try:
        install = find_install()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no tritonserver here: {exc}")
    shutil.copytree(install.backends, backends)
    stub = backends / "python" / "triton_python_backend_stub"
    stub.write_text("#!/bin/sh\nexec sleep 120\n")  # a stub that never says hello
    stub.chmod(0o755)
    with running_triton(config, tmp_path / "triton.log"):
        app = make_app(root, config)
        client = app.test_client()
        try:
            started = time.monotonic()
            response = client.post("/models", json={"model_name": "alpha", "url": "alpha"})
            elapsed = time.monotonic() - started
            assert response.status_code in (500, 504) and elapsed < 45, (response.json, elapsed)
            assert client.get("/models/alpha").status_code == 404  # a failed POST /models registers nothing
            assert client.get("/ping").json["loaded"] == 0
            assert not (Path(config.repository) / "alpha").exists()
        finally:
            model_manager(app).shutdown()


def test_triton_gone_is_503_on_ping_and_invoke(root, tmp_path):
    config = triton_config(tmp_path, load_timeout_s=60)
    with running_triton(config, tmp_path / "triton.log") as server:
        app = make_app(root, config)
        client = app.test_client()
        try:
            assert client.post("/models/alpha/invoke", data=png_bytes(RED), content_type="image/png").status_code == 200
            assert client.get("/ping").status_code == 200
            os.killpg(server.pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while server.alive and time.monotonic() < deadline:
                time.sleep(0.05)
            ping = client.get("/ping")
            assert ping.status_code == 503 and ping.json["type"] == "engine_dead"
            response = client.post("/models/alpha/invoke", data=png_bytes(RED), content_type="image/png")
            assert response.status_code == 503, response.json
        finally:
            model_manager(app).shutdown()


class Serve:
    """The real `serve` in multi-model mode with the Triton backend."""

    def __init__(self, root: Path, tmp: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "serve.log"
        env = dict(os.environ)
        env.update(
            SAGEMAKER_BIND_TO_PORT=str(self.port), SAGEMAKER_MULTI_MODEL="true", LLM_BYOC_MODEL_ROOT=str(root),
            LLM_BYOC_MULTI_MODEL_BACKEND="triton", LLM_BYOC_TRITON_REPOSITORY=str(tmp / "repository"),
            LLM_BYOC_TRITON_HTTP_PORT=str(free_port()), LLM_BYOC_TRITON_GRPC_PORT=str(free_port()),
            LLM_BYOC_NUM_THREADS="1", LLM_BYOC_LOG_LEVEL="info",
        )
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, str(REPO / "container" / "serve"), "serve"], env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def triton_pid(self) -> int:
        from serve_helpers import children_of

        return next(pid for pid, cmd in children_of(self.proc.pid).items() if "tritonserver" in cmd)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


def _skip_without_triton() -> None:
    from llm_byoc.multimodel.triton.server import TritonUnavailable, find_install

    try:
        find_install()
    except TritonUnavailable as exc:
        pytest.skip(f"no tritonserver here: {exc}")


def test_serve_runs_tritonserver_and_stops_it_on_sigterm(root, tmp_path):
    _skip_without_triton()
    serve = Serve(root, tmp_path)
    try:
        wait_for_ping(serve.url, 120, serve.proc, consecutive=3)
        triton_pid = serve.triton_pid()
        response = requests.post(f"{serve.url}/models", json={"model_name": "alpha", "url": "alpha"}, timeout=120)
        assert response.status_code == 200, response.text
        response = requests.post(f"{serve.url}/models/alpha/invoke", data=png_bytes(RED),
                                 headers={"Content-Type": "image/png"}, timeout=60)
        assert response.json()["predictions"][0]["label"] == "red"
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(90) == 0, serve.log()
        assert not Path(f"/proc/{triton_pid}").exists()
    finally:
        serve.stop()


def test_serve_exits_non_zero_when_tritonserver_dies(root, tmp_path):
    _skip_without_triton()
    serve = Serve(root, tmp_path)
    try:
        wait_for_ping(serve.url, 120, serve.proc, consecutive=3)
        statuses: set = set()
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                try:
                    statuses.add(requests.get(f"{serve.url}/ping", timeout=3).status_code)
                except requests.RequestException:
                    statuses.add("refused")
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        os.kill(serve.triton_pid(), signal.SIGKILL)
        assert serve.proc.wait(90) != 0, serve.log()
        stop.set()
        watcher.join(10)
        assert "tritonserver exited unexpectedly" in serve.log()
        assert statuses <= {200, 503, "refused"}
    finally:
        serve.stop()
