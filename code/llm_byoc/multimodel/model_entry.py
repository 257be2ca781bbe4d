"""The child side of a model process (forked from the zygote, or spawned).

It loads one model, says ModelLoaded (or a fatal WorkerFailure with a
plain-data error), then answers InvokeRequests until Shutdown or its parent
goes away (``process.serve_calls``). A plain forward pass runs on the
receiving thread, one request at a time; the LLM engine gets a pool, as it
batches concurrent requests itself. Any exception becomes a WorkerFailure
(type, message); the process keeps serving.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

from ..config import EngineConfig
from ..errors import ServingError
from ..process import Channel, serve_calls
from ..process.threads import lower_priority
from ..protocol import WorkerFailure
from . import messages
from .store import ModelSpec

log = logging.getLogger(__name__)


def _load(channel: Channel, spec: ModelSpec, num_threads: int, engine: EngineConfig | None):
    from .handlers.by_kind import create_handler  # the handlers (numpy, the LLM engine): in this process only

    started = time.monotonic()
    try:
        handler = create_handler(spec, num_threads, engine)
    except ServingError as exc:
        channel.send(0, WorkerFailure(exc.error_type, exc.message, fatal=True))
        return None
    except Exception as exc:  # a broken folder can fail in any library; report it as data
        log.exception("loading %s failed", spec.name)
        channel.send(0, WorkerFailure("model_load_error", f"{type(exc).__name__}: {exc}", fatal=True))
        return None
    channel.send(0, messages.ModelLoaded(pid=os.getpid(), load_time_s=time.monotonic() - started))
    return handler


def _answerer(handler):
    def answer(request, body: bytes):
        if not isinstance(request, messages.InvokeRequest):
            return WorkerFailure("invalid_request", f"a model process does not handle {type(request).__name__}"), b""
        started = time.perf_counter()
        try:
            reply, out = handler.invoke(request, body)
        except ServingError as exc:
            return WorkerFailure(exc.error_type, exc.message), b""
        return dataclasses.replace(reply, compute_s=time.perf_counter() - started), out

    return answer


def run_model_process(conn, spec_plain: dict, num_threads: int, engine_plain: dict | None, log_level: int) -> None:
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s [model %(process)d] %(name)s: %(message)s")
    channel = Channel(conn, messages)
    spec = ModelSpec.from_plain(spec_plain)
    engine = EngineConfig(**engine_plain) if engine_plain else None
    if engine is not None:
        lower_priority(engine.worker_nice)  # before the model's thread pools start
    handler = _load(channel, spec, num_threads, engine)
    if handler is None:
        return
    try:
        serve_calls(channel, _answerer(handler), handler.max_concurrency)
    finally:
        handler.close()
    # Leave at once: interpreter teardown of torch takes about a second and
    # holds the model's memory; the parent waits for this process on unload.
    logging.shutdown()
    os._exit(0)
