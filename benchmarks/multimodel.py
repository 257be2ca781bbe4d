"""Multi-model figures: cold start and warm invoke overhead against a raw in-process model,
or (``--backends``) the backends side by side.

    python -m benchmarks.multimodel [--repo DIR] [--runs 3] [--requests 200] [--llm | --only NAME]
                                        [--skip-warm] [--json OUT]
    python -m benchmarks.multimodel --backends native,triton [--levels 1,8] [--requests 200] [--llm]

Backends (``multimodel_backends.py``): per backend and model, the cold load
(``POST /models`` through the first answer), warm p50/p99 and requests/s at
each concurrency, memory per loaded model, and Triton's requests per batch;
printed as a table and written to ``benchmarks/results/mme_backends.json``
(or ``--json``).

Cold start: ``POST /models`` + the first invoke, through the Flask routes (a
fresh worker process each run), against a raw load of the same model with the
same handler + one call in a fresh spawned Python process (what a
single-model container does at start-up). Both include starting Python and
importing the framework; the raw run's own load+call time (imports included,
interpreter start excluded) is reported too.

Warm overhead: median latency of an invoke through the routes (Flask, the
manager, the worker pipe) minus the median of the same call on a handler
loaded in this process, the two calls alternating; also the median of the
paired differences, and the round trip of a request the worker refuses at once
(the fixed cost of the routes + pipe alone). Medians over ``--runs`` /
``--requests``; the machine is shared, so read the spread.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

from flask import Flask

from llm_byoc.api.errors import register_error_handlers
from llm_byoc.api.multimodel_routes import MODEL_TIME_HEADER, model_manager, register_multi_model_routes
from llm_byoc.config import EngineConfig, MultiModelConfig
from llm_byoc.multimodel.demo_repository import EMBEDDING_NAME, IMAGE_NAME, LLM_NAME, build_demo_repository, drawn_test_image
from llm_byoc.multimodel.handlers.by_kind import create_handler
from llm_byoc.multimodel.messages import InvokeRequest
from llm_byoc.multimodel.store import ModelSpec, describe_model
from .multimodel_backends import cold_load, run_backends, table

_SPAWN = multiprocessing.get_context("spawn")


def sample_request(name: str) -> tuple[bytes, str]:
    if name == IMAGE_NAME:
        buffer = io.BytesIO()
        drawn_test_image().save(buffer, format="JPEG")
        return buffer.getvalue(), "image/jpeg"
    if name == LLM_NAME:
        return json.dumps({"inputs": "Hello", "parameters": {"max_new_tokens": 1}}).encode(), "application/json"
    return json.dumps({"inputs": "The quick brown fox jumps over the lazy dog."}).encode(), "application/json"


def _raw_child(conn, spec_plain: dict, body: bytes, content_type: str, num_threads: int) -> None:
    started = time.perf_counter()
    handler = create_handler(ModelSpec.from_plain(spec_plain), num_threads, EngineConfig(num_threads=num_threads))
    handler.invoke(InvokeRequest(content_type=content_type), body)
    conn.send(time.perf_counter() - started)
    handler.close()


def raw_cold_start(folder: Path, name: str, num_threads: int) -> tuple[float, float]:
    """(seconds from spawn to the first answer, seconds of load+call inside the child)."""
    body, content_type = sample_request(name)
    spec = describe_model(name, folder)
    parent, child = _SPAWN.Pipe()
    started = time.perf_counter()
    process = _SPAWN.Process(target=_raw_child, args=(child, spec.to_plain(), body, content_type, num_threads))
    process.start()
    inner = parent.recv()
    total = time.perf_counter() - started
    process.join(60)
    return total, inner


def make_client(root: Path, num_threads: int):
    app = Flask("mme-bench")
    register_error_handlers(app)
    engine = EngineConfig(num_threads=num_threads, max_num_seqs=4, max_model_len=512)
    register_multi_model_routes(app, MultiModelConfig(model_root=str(root), memory_budget_bytes=8 * 1024**3, engine=engine))
    return app, app.test_client()


def mme_cold_start(client, folder: Path, name: str) -> float:
    elapsed = cold_load(client, folder, name, *sample_request(name))
    client.delete(f"/models/{name}")
    return elapsed


def interleaved(direct, routed, count: int) -> tuple[list[float], list[float]]:
    """Alternate the two calls so that both see the same load on a shared machine."""
    direct(), routed()  # warm-up
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(count):
        for call, out in ((direct, times[0]), (routed, times[1])):
            started = time.perf_counter()
            call()
            out.append(time.perf_counter() - started)
    return times


def warm_overhead(client, folder: Path, name: str, requests: int, num_threads: int) -> dict:
    body, content_type = sample_request(name)
    handler = create_handler(describe_model(name, folder), num_threads)
    client.post("/models", json={"model_name": name, "url": str(folder)})
    in_worker: list[float] = []

    def routed_call():
        response = client.post(f"/models/{name}/invoke", data=body, content_type=content_type)
        in_worker.append(float(response.headers[MODEL_TIME_HEADER]) / 1e3)

    direct, routed = interleaved(lambda: handler.invoke(InvokeRequest(content_type=content_type), body), routed_call, requests)
    # The fixed cost alone: a request the worker refuses at once (415), through the routes.
    refused = interleaved(lambda: None, lambda: client.post(f"/models/{name}/invoke", data=b"x", content_type="text/plain"), requests)[1]
    client.delete(f"/models/{name}")
    handler.close()
    direct_ms, routed_ms = statistics.median(direct) * 1e3, statistics.median(routed) * 1e3
    paired = statistics.median(r - d for r, d in zip(routed, direct)) * 1e3
    return {
        "in_process_ms": round(direct_ms, 3),
        "mme_ms": round(routed_ms, 3),
        "overhead_ms": round(routed_ms - direct_ms, 3),
        "paired_overhead_ms": round(paired, 3),
        "round_trip_ms": round(statistics.median(refused) * 1e3, 3),
        "in_worker_ms": round(statistics.median(in_worker) * 1e3, 3),
        "outside_model_ms": round(statistics.median(r - w for r, w in zip(routed, in_worker[1:])) * 1e3, 3),
    }


def cold_start(client, folder: Path, name: str, runs: int, num_threads: int) -> dict:
    raw, mme = [], []
    for _ in range(runs):  # alternating, so that both see the same page cache and load
        raw.append(raw_cold_start(folder, name, num_threads))
        mme.append(mme_cold_start(client, folder, name))
    raw_total = statistics.median(r[0] for r in raw)
    mme_total = statistics.median(mme)
    return {
        "raw_process_s": round(raw_total, 3),
        "raw_load_and_call_s": round(statistics.median(r[1] for r in raw), 3),
        "mme_s": round(mme_total, 3),
        "ratio": round(mme_total / raw_total, 3),
        "mme_runs_s": [round(t, 3) for t in mme],
        "raw_runs_s": [round(r[0], 3) for r in raw],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, help="demo repository (built in a temporary folder if absent)")
    parser.add_argument("--runs", type=int, default=3, help="cold starts per model and side")
    parser.add_argument("--requests", type=int, default=200, help="warm requests per side")
    parser.add_argument("--threads", type=int, default=1, help="torch / ONNX Runtime threads on both sides")
    parser.add_argument("--llm", action="store_true", help="include SmolLM2 (cold start only; slow)")
    parser.add_argument("--skip-warm", action="store_true", help="cold starts only")
    parser.add_argument("--only", choices=[EMBEDDING_NAME, IMAGE_NAME, LLM_NAME], help="one model only")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--backends", help="compare these backends instead (native,triton)")
    parser.add_argument("--levels", default="1,8", help="with --backends: client concurrencies")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.backends:
        return compare_backends(args)
    with tempfile.TemporaryDirectory(prefix="mme-bench-") as tmp:
        repo = build_demo_repository(args.repo or Path(tmp), include_llm=args.llm or args.only == LLM_NAME)
        app, client = make_client(next(iter(repo.values())).parent, args.threads)
        try:
            figures = {"cold_start": {}, "warm": {}}
            names = [EMBEDDING_NAME, IMAGE_NAME] + ([LLM_NAME] if args.llm else [])
            names = [args.only] if args.only else names
            for name in names:
                figures["cold_start"][name] = cold_start(client, repo[name], name, args.runs, args.threads)
                print(name, "cold start", figures["cold_start"][name], flush=True)
            for name in [] if args.skip_warm else [n for n in names if n != LLM_NAME]:
                figures["warm"][name] = warm_overhead(client, repo[name], name, args.requests, args.threads)
                print(name, "warm", figures["warm"][name], flush=True)
        finally:
            model_manager(app).shutdown()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def compare_backends(args) -> int:
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    levels = [int(level) for level in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="mme-bench-") as tmp:
        repo = build_demo_repository(args.repo or Path(tmp), include_llm=args.llm or args.only == LLM_NAME)
        names = [args.only] if args.only else [EMBEDDING_NAME, IMAGE_NAME] + ([LLM_NAME] if args.llm else [])
        results = run_backends(repo, names, backends, sample_request, levels, args.requests, args.threads)
    figures = {"levels": levels, "requests": args.requests, "threads": args.threads, "backends": results}
    print(table(results, levels))
    out = args.json or Path("benchmarks/results/mme_backends.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
