"""The same models through each multi-model backend, side by side (``python -m benchmarks.multimodel --backends``).

Per backend and model: cold load (``POST /models`` through the first answer),
warm latency p50/p99 and requests/s at each client concurrency, memory per
loaded model (what the budget counts, and RSS/USS of its processes), and for
Triton how many executions (batches) its dynamic batcher ran per inference
under the highest concurrency. Everything runs through the Flask routes in
this process (the clients share its interpreter, as they would share the 2
cores anyway); the machine is shared, so read the spread, not the digits.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from flask import Flask

from llm_byoc.api.errors import register_error_handlers
from llm_byoc.api.multimodel_routes import model_manager, register_multi_model_routes
from llm_byoc.config import EngineConfig, MultiModelConfig, TritonConfig
from llm_byoc.multimodel.handlers import PRELOADED_HANDLERS
from llm_byoc.multimodel.triton.server import TritonServer
from llm_byoc.process import get_context

GiB = 1024**3


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def zygote_ready_s() -> float:
    """Seconds until the zygote forks a process (0 if it runs already): a server starts it at start-up."""
    import os

    started = time.perf_counter()
    process = get_context("forkserver", preload=PRELOADED_HANDLERS).Process(target=os.getpid)
    process.start()
    process.join(120)
    return time.perf_counter() - started


def _app(root: Path, config: MultiModelConfig):
    app = Flask(f"mme-bench-{config.backend}")
    register_error_handlers(app)
    register_multi_model_routes(app, dataclasses.replace(config, model_root=str(root), memory_budget_bytes=8 * GiB))
    return app


def _concurrent(client, name: str, body: bytes, content_type: str, clients: int, requests: int) -> dict:
    def one(_) -> float:
        started = time.perf_counter()
        response = client.post(f"/models/{name}/invoke", data=body, content_type=content_type)
        if response.status_code != 200:
            raise RuntimeError(f"{name}: {response.status_code} {response.get_data(as_text=True)[:200]}")
        return time.perf_counter() - started

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(clients)))  # warm-up, one per client
        started = time.perf_counter()
        latencies = list(pool.map(one, range(requests)))
        elapsed = time.perf_counter() - started
    return {
        "p50_ms": round(statistics.median(latencies) * 1e3, 2),
        "p99_ms": round(_percentile(latencies, 0.99) * 1e3, 2),
        "requests_per_s": round(requests / elapsed, 2),
    }


def _memory(app, name: str) -> dict:
    manager = model_manager(app)
    with manager.acquire(name) as entry:
        worker = entry.worker
        footprint = worker.footprint() if hasattr(worker, "footprint") else None
        accounted = entry.accounted_bytes
    out = {"accounted_mib": round(accounted / 2**20, 1), "shared_mib": round(manager.memory_summary()["shared_bytes"] / 2**20, 1)}
    if footprint is not None:
        out.update(rss_mib=round(footprint.rss / 2**20, 1), uss_mib=round(footprint.uss / 2**20, 1))
    return out


def _batching(app, name: str) -> dict | None:
    factory = model_manager(app)._factory
    grpc = getattr(factory, "grpc", None)  # the Triton backend's
    if grpc is None:
        return None
    try:
        return grpc.statistics(name)
    except Exception:  # noqa: BLE001 - a model Triton does not host (the LLM) has no statistics
        return None


def cold_load(client, folder: Path, name: str, body: bytes, content_type: str) -> float:
    """Seconds from ``POST /models`` through the first answer (the model stays loaded)."""
    started = time.perf_counter()
    response = client.post("/models", json={"model_name": name, "url": str(folder)})
    if response.status_code != 200:
        raise RuntimeError(f"POST /models {name}: {response.status_code} {response.get_data(as_text=True)[:300]}")
    response = client.post(f"/models/{name}/invoke", data=body, content_type=content_type)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"invoke {name}: {response.status_code} {response.get_data(as_text=True)[:300]}")
    return elapsed


def bench_model(app, folder: Path, name: str, sample, levels: list[int], requests: int) -> dict:
    client = app.test_client()
    body, content_type = sample(name)
    cold = cold_load(client, folder, name, body, content_type)
    figures = {"cold_load_s": round(cold, 3), "memory": _memory(app, name), "warm": {}}
    for clients in levels:
        before = _batching(app, name)
        figures["warm"][str(clients)] = _concurrent(client, name, body, content_type, clients, requests)
        after = _batching(app, name)
        if before is not None and after is not None:
            inferences = after["inference_count"] - before["inference_count"]
            executions = after["execution_count"] - before["execution_count"]
            figures["warm"][str(clients)]["triton_inferences_per_execution"] = round(inferences / max(1, executions), 2)
    client.delete(f"/models/{name}")
    return figures


def run_backends(repo: dict[str, Path], names: list[str], backends: list[str], sample, levels: list[int],
                 requests: int, threads: int) -> dict:
    engine = EngineConfig(num_threads=threads, max_num_seqs=8, max_model_len=512)
    results: dict = {}
    root = next(iter(repo.values())).parent
    with ExitStack() as stack:
        for backend in backends:
            config = MultiModelConfig(engine=engine, backend=backend)
            if backend == "triton":
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mme-bench-triton-")))
                triton = TritonConfig(repository=str(tmp / "repository"), http_port=_free_port(), grpc_port=_free_port())
                server = TritonServer(triton, log_file=tmp / "triton.log")
                server.start()
                stack.callback(server.stop)
                config = dataclasses.replace(config, triton=triton)
            app = _app(root, config)
            try:
                results[backend] = {"zygote_start_s": round(zygote_ready_s(), 2)}
                for name in names:
                    results[backend][name] = bench_model(app, repo[name], name, sample, levels, requests)
                    print(backend, name, results[backend][name], flush=True)
            finally:
                model_manager(app).shutdown()
    return results


def table(results: dict, levels: list[int]) -> str:
    """The figures as a Markdown table, one row per model and backend."""
    head = ["model", "backend", "cold load s", "accounted MiB", "USS MiB"]
    for clients in levels:
        head += [f"p50/p99 ms @{clients}", f"req/s @{clients}"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    models = sorted({m for per in results.values() for m in per if m != "zygote_start_s"})
    for model in models:
        for backend, per in results.items():
            if model not in per:
                continue
            f = per[model]
            cells = [model, backend, f"{f['cold_load_s']:.2f}", str(f["memory"]["accounted_mib"]),
                     str(f["memory"].get("uss_mib", "-"))]
            for clients in levels:
                w = f["warm"][str(clients)]
                batch = f" ({w['triton_inferences_per_execution']}/batch)" if "triton_inferences_per_execution" in w else ""
                cells += [f"{w['p50_ms']:.1f} / {w['p99_ms']:.1f}", f"{w['requests_per_s']:.1f}{batch}"]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
