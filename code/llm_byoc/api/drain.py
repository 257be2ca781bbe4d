"""Ending in-flight requests cleanly when a stopping worker's grace runs out.

On SIGTERM gunicorn stops accepting and gives in-flight requests
``LLM_BYOC_GRACEFUL_TIMEOUT`` to finish; after that the worker exits and any
stream still open would be cut mid-event. A little before that,
``ThreadPerConnectionWorker`` calls ``drain``: every registered route aborts
what it still runs, and each client gets a last, clean answer (a 503, or a
final ``{"error", "type": "shutting_down"}`` event) instead of a torn one.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger(__name__)

MARGIN_S = 2.0  # before the grace ends: time to write the last events

_lock = threading.Lock()
_routes: list[weakref.WeakMethod] = []  # an app that is gone is not kept alive by this list


def register(stop_all: Callable[[str], None]) -> None:
    """``stop_all``: a bound method of a route, called with the reason."""
    with _lock:
        _routes[:] = [ref for ref in _routes if ref() is not None]
        _routes.append(weakref.WeakMethod(stop_all))


def drain(reason: str) -> None:
    with _lock:
        routes = [ref() for ref in _routes]
    for stop_all in routes:
        if stop_all is None:
            continue
        try:
            stop_all(reason)
        except Exception:
            log.exception("ending the in-flight requests failed")


def drain_later(grace_s: float) -> None:
    """From the worker's SIGTERM handler: drain once ``grace_s - MARGIN_S`` has passed."""
    timer = threading.Timer(max(0.0, grace_s - MARGIN_S), drain, args=("the server is shutting down",))
    timer.daemon = True
    timer.start()
