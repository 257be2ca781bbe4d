"""The child side: the answer loop every worker process runs after its handshake.

A worker sends its ready message (or a fatal WorkerFailure) with call id 0,
then calls ``serve_calls(channel, answer)``: each call is answered with the
same call id; Shutdown, or the parent going away (the pipe closes), ends the
loop. ``answer(message, payload) -> (reply, payload)`` maps its own errors to
plain data; anything it lets escape becomes an internal WorkerFailure, and a
frame that is not a message is answered with a WorkerFailure too: the loop
never dies of a bad call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..protocol import Shutdown, WorkerFailure
from .channel import BadFrame, Channel

log = logging.getLogger(__name__)

Answer = Callable[[Any, bytes], tuple[Any, bytes]]


def _reply(channel: Channel, call_id: int, answer: Answer, message: Any, payload: bytes) -> None:
    try:
        reply, out = answer(message, payload)
    except Exception as exc:  # noqa: BLE001 - reported as data; the worker keeps serving
        log.exception("call %d (%s) failed", call_id, type(message).__name__)
        reply, out = WorkerFailure("internal_error", f"{type(exc).__name__}: {exc}"), b""
    try:
        channel.send(call_id, reply, out)
    except (OSError, EOFError, ValueError):
        pass  # the parent is gone; the receive loop ends too


def serve_calls(channel: Channel, answer: Answer, concurrency: int = 1) -> None:
    """Answer calls until Shutdown or EOF. ``concurrency`` > 1 answers that many at once (a pool)."""
    pool = ThreadPoolExecutor(concurrency, "call") if concurrency > 1 else None
    try:
        while True:
            try:
                call_id, message, payload = channel.receive()
            except (EOFError, OSError):
                log.info("parent connection closed; worker exiting")
                return
            except BadFrame as exc:
                log.error("bad message from the parent: %s", exc)
                failure = WorkerFailure("invalid_request", f"bad message: {exc}")
                _reply(channel, exc.call_id, lambda *_: (failure, b""), None, b"")
                continue
            if isinstance(message, Shutdown):
                log.info("shutdown requested; worker exiting")
                return
            if pool is not None:
                pool.submit(_reply, channel, call_id, answer, message, payload)
            else:  # one call at a time right here: no thread hand-off on the hot path
                _reply(channel, call_id, answer, message, payload)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
