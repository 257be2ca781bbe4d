"""Model worker process entry: load the model, then answer one step at a time.

The parent (the engine's ``engine.model_executor.ModelExecutor``) starts ``run_worker`` with the
'spawn' method; messages are ``protocol`` messages on a ``process.Channel``
(typed JSON frames with a call id, never pickle):

    worker -> WorkerReady(info)           once loaded, or WorkerFailure(fatal=True) and exit
    StepBatch -> StepOutput               or WorkerFailure(fatal=False): the step failed,
                                          the worker keeps serving (the engine decides)
    Shutdown  -> (return)                 also on a closed connection
    anything else -> WorkerFailure(fatal=False)
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from .. import protocol
from ..config import EngineConfig
from ..cpu import default_num_threads, describe_line
from ..errors import InsufficientMemory, ServingError
from ..process import Channel, serve_calls
from ..process.cpu_share import ThreadBudget
from ..process.threads import WORKER_OPENMP_DEFAULTS, lower_priority, prepare_threads
from ..protocol import StepBatch, WorkerFailure, WorkerReady

if TYPE_CHECKING:
    from .runner import ModelRunner

log = logging.getLogger(__name__)


def _failure(exc: BaseException, fatal: bool) -> WorkerFailure:
    """An exception as plain data: ServingErrors keep their type, others are internal."""
    import torch

    if isinstance(exc, ServingError):
        return WorkerFailure(exc.error_type, exc.message, fatal)
    out_of_memory = isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    if out_of_memory or isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return WorkerFailure(InsufficientMemory.error_type, f"out of memory: {exc}", fatal)
    return WorkerFailure("internal_error", f"{type(exc).__name__}: {exc}", fatal)


def run_worker(conn, config: EngineConfig) -> None:
    """Serve ``config``'s model over ``conn`` until Shutdown or the connection closes."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker[{os.getpid()}] %(levelname)s %(message)s")
    lower_priority(config.worker_nice)
    prepare_threads(WORKER_OPENMP_DEFAULTS)
    import torch

    from .runner import ModelRunner

    torch.set_num_threads(default_num_threads(config.num_threads))
    log.info("%d torch threads on %s", torch.get_num_threads(), describe_line())
    channel = Channel(conn, protocol)
    try:
        runner = ModelRunner.from_config(config)
    except Exception as exc:  # noqa: BLE001 - every load failure is reported, then we exit
        log.error("model load failed: %s", exc, exc_info=not isinstance(exc, ServingError))  # ours say why: no traceback
        channel.send(0, _failure(exc, fatal=True))
        return
    channel.send(0, WorkerReady(runner.info))
    budget = None
    if config.threads_adapt and runner.device.type == "cpu":
        budget = ThreadBudget(torch.get_num_threads(), apply=torch.set_num_threads)
    serve(conn, runner, budget)


def serve(conn, runner: "ModelRunner", budget: ThreadBudget | None = None) -> None:
    """The message loop; returns on Shutdown or when the parent goes away. ``budget``: the torch
    threads of each step, fewer while other processes keep cores busy (None: as set at start)."""
    serve_calls(Channel(conn, protocol), lambda message, _: (_handle(message, runner, budget), b""))


def _handle(message, runner: "ModelRunner", budget: ThreadBudget | None = None):
    """The reply to one message. Never raises."""
    if not isinstance(message, StepBatch):
        return WorkerFailure("invalid_request", f"the worker does not handle {type(message).__name__}")
    try:
        if budget is not None:
            budget.threads()
        return runner.step(message)
    except Exception as exc:  # noqa: BLE001 - a failed step is reported, not fatal
        log.exception("step %s failed", message.step_id)
        return _failure(exc, fatal=False)
