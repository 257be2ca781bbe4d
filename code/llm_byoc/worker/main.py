"""Model worker process entry: load the model, then answer one message at a time.

The parent (the engine's executor) starts ``run_worker`` with the 'spawn'
method and talks over a ``multiprocessing`` Connection in protocol bytes:

    worker -> WorkerReady(info)           once loaded, or WorkerFailure(fatal=True) and exit
    StepBatch -> StepOutput               or WorkerFailure(fatal=False): the step failed,
                                          the worker keeps serving (the engine decides)
    Shutdown  -> (return)                 also on a closed connection
    anything else -> WorkerFailure(fatal=False)
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from .. import protocol
from ..config import EngineConfig
from ..cpu import default_num_threads, describe_line
from ..errors import InsufficientMemory, ServingError
from ..protocol import Shutdown, StepBatch, WorkerFailure, WorkerReady

if TYPE_CHECKING:
    from .runner import ModelRunner

log = logging.getLogger(__name__)

# OpenMP worker threads spin only briefly between parallel regions, then sleep.
# The worker shares the CPU with the HTTP front end and the engine core.
# Measured on the 2-core dev VM (SmolLM2-135M, 16 concurrent, 2 threads):
# torch's default (long spins) collapses to 370-2800 ms per decode step when
# another process is busy; OMP_WAIT_POLICY=PASSIVE avoids that but pays a wake-up
# per region (engine bench 96-125 tok/s); a bounded spin of 50k iterations keeps
# back-to-back regions hot and still yields between steps (120-122 tok/s, ITL
# p50 113 ms). libgomp reads this once, when torch loads, so torch is imported
# only after it is set. An operator's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "50000"}
_OPENMP_OVERRIDES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def prepare_threads() -> None:
    """Apply OPENMP_DEFAULTS unless torch is loaded already or the operator chose."""
    if "torch" in sys.modules:
        log.debug("torch already loaded: OpenMP settings left as they are")
        return
    if any(os.environ.get(name) for name in _OPENMP_OVERRIDES):
        return
    os.environ.update(OPENMP_DEFAULTS)


def _failure(exc: BaseException, fatal: bool) -> WorkerFailure:
    """An exception as plain data: ServingErrors keep their type, others are internal."""
    import torch

    if isinstance(exc, ServingError):
        return WorkerFailure(exc.error_type, exc.message, fatal)
    out_of_memory = isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)
    if out_of_memory or isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return WorkerFailure(InsufficientMemory.error_type, f"out of memory: {exc}", fatal)
    return WorkerFailure("internal_error", f"{type(exc).__name__}: {exc}", fatal)


def _send(conn, message) -> None:
    conn.send_bytes(protocol.encode(message))


def run_worker(conn, config: EngineConfig) -> None:
    """Serve ``config``'s model over ``conn`` until Shutdown or the connection closes."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker[{os.getpid()}] %(levelname)s %(message)s")
    prepare_threads()
    import torch

    from .runner import ModelRunner

    torch.set_num_threads(default_num_threads(config.num_threads))
    log.info("%d torch threads on %s", torch.get_num_threads(), describe_line())
    try:
        runner = ModelRunner.from_config(config)
    except Exception as exc:  # noqa: BLE001 - every load failure is reported, then we exit
        log.error("model load failed: %s", exc, exc_info=not isinstance(exc, ServingError))  # ours say why: no traceback
        _send(conn, _failure(exc, fatal=True))
        return
    _send(conn, WorkerReady(runner.info))
    serve(conn, runner)


def serve(conn, runner: "ModelRunner") -> None:
    """The message loop; returns on Shutdown or when the parent goes away."""
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            log.info("engine connection closed; worker exiting")
            return
        reply = _handle(data, runner)
        if reply is None:
            log.info("shutdown requested; worker exiting")
            return
        try:
            _send(conn, reply)
        except (EOFError, OSError):
            log.info("engine connection closed; worker exiting")
            return


def _handle(data: bytes, runner: "ModelRunner"):
    """The reply to one message, or None for Shutdown. Never raises."""
    try:
        message = protocol.decode(data)
    except Exception as exc:  # noqa: BLE001 - ProtocolError, or JSON too deep to parse
        log.error("bad message from the engine: %s", exc)
        return WorkerFailure("invalid_request", f"bad message: {exc}")
    if isinstance(message, Shutdown):
        return None
    if not isinstance(message, StepBatch):
        return WorkerFailure("invalid_request", f"the worker does not handle {type(message).__name__}")
    try:
        return runner.step(message)
    except Exception as exc:  # noqa: BLE001 - a failed step is reported, not fatal
        log.exception("step %s failed", message.step_id)
        return _failure(exc, fatal=False)
