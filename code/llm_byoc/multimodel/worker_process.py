"""The entry point of a model's worker process (started with multiprocessing spawn).

It loads one model, says WorkerReady (or LoadFailed with a plain-data error),
then answers InvokeRequests until it gets Stop or its parent goes away (the
pipe closes). A plain forward pass runs on the receiving thread, one request
at a time; the LLM engine gets a thread pool, as it batches concurrent
requests itself. Any exception becomes an InvokeFailed (type, message); the
process keeps serving.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..config import EngineConfig
from ..errors import ServingError
from . import messages as wire
from .store import ModelSpec

log = logging.getLogger(__name__)


def _load(conn, spec: ModelSpec, num_threads: int, engine: EngineConfig | None):
    from .model_engine import create_handler

    started = time.monotonic()
    try:
        handler = create_handler(spec, num_threads, engine)
    except ServingError as exc:
        wire.send(conn, wire.LoadFailed(exc.error_type, exc.message))
        return None
    except Exception as exc:  # a broken folder can fail in any library; report it as data
        log.exception("loading %s failed", spec.name)
        wire.send(conn, wire.LoadFailed("model_load_error", f"{type(exc).__name__}: {exc}"))
        return None
    wire.send(conn, wire.WorkerReady(pid=os.getpid(), load_time_s=time.monotonic() - started))
    return handler


def _answer(conn, send_lock: threading.Lock, handler, request: wire.InvokeRequest, body: bytes) -> None:
    started = time.perf_counter()
    try:
        reply, out = handler.invoke(request.invocation, body)
        reply = dataclasses.replace(reply, compute_s=time.perf_counter() - started)
        message = wire.InvokeResult(request.request_id, reply)
    except ServingError as exc:
        message, out = wire.InvokeFailed(request.request_id, exc.error_type, exc.message), b""
    except Exception as exc:
        log.exception("invoke failed")
        message, out = wire.InvokeFailed(request.request_id, "internal_error", f"{type(exc).__name__}: {exc}"), b""
    try:
        with send_lock:
            wire.send(conn, message, out)
    except (OSError, EOFError, ValueError):
        pass  # the parent is gone; the receive loop ends too


def worker_main(conn, spec_plain: dict, num_threads: int, engine_plain: dict | None, log_level: int) -> None:
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s [mme-worker %(process)d] %(name)s: %(message)s")
    spec = ModelSpec.from_plain(spec_plain)
    engine = EngineConfig(**engine_plain) if engine_plain else None
    handler = _load(conn, spec, num_threads, engine)
    if handler is None:
        return
    send_lock = threading.Lock()
    # One request at a time runs right here (no thread hand-off on the hot path);
    # a batching handler gets a pool so that concurrent requests reach it together.
    pool = ThreadPoolExecutor(handler.max_concurrency, "invoke") if handler.max_concurrency > 1 else None
    try:
        while True:
            try:
                header, body = wire.receive(conn)
            except (EOFError, OSError):
                break  # parent gone
            if isinstance(header, wire.Stop):
                break
            if isinstance(header, wire.InvokeRequest) and pool is not None:
                pool.submit(_answer, conn, send_lock, handler, header, body)
            elif isinstance(header, wire.InvokeRequest):
                _answer(conn, send_lock, handler, header, body)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        handler.close()
    # Leave at once: interpreter teardown of torch takes about a second and
    # holds the model's memory; the parent joins this process on unload.
    logging.shutdown()
    os._exit(0)
