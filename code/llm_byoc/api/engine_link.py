"""The engine as one HTTP worker sees it, connected in the background.

A gunicorn worker starts before the engine process is listening (and long
before its model is loaded), yet ``/ping`` must answer at once. ``EngineLink``
keeps trying ``connect()`` on a daemon thread; until it succeeds the engine
reports LOADING and requests get 503. Once the model is loaded it also loads
the tokenizer in this process before ``/ping`` says READY, so the first request
does not pay for it. It is a ``ServingEngine`` (``engine/seam.py``) that hands
each call to the connected one, so the app cannot tell it from an engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..adapters.messages import AdapterStatus
from ..engine.seam import RequestStream, ServingEngine
from ..errors import EngineNotReady, ServingError
from ..protocol import EngineState, HealthReport

log = logging.getLogger(__name__)


class EngineLink:
    def __init__(
        self, connect: Callable[[], ServingEngine], where: str, retry_interval_s: float = 0.5, health_timeout_s: float | None = None
    ):
        """``health_timeout_s``: how long a health check may wait for the engine (None: the engine's default)."""
        self._connect = connect
        self._where = where
        self._retry_interval_s = retry_interval_s
        self._health_kwargs = {} if health_timeout_s is None else {"timeout_s": health_timeout_s}
        self._engine: Any = None  # the connected engine (an LLMEngine: it also has wait_ready)
        self._warm = False  # the tokenizer is loaded in this process
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> EngineLink:
        self._thread = threading.Thread(target=self._connect_loop, name="engine-link", daemon=True)
        self._thread.start()
        return self

    def _connect_loop(self) -> None:
        attempts = 0
        started = time.monotonic()
        while not self._stopped.is_set():
            attempts += 1
            try:
                engine = self._connect()
            except Exception as exc:  # not listening yet: keep trying, say so now and then
                if attempts % 20 == 1:
                    log.info("engine at %s not reachable yet (%s); retrying", self._where, exc)
                self._stopped.wait(self._retry_interval_s)
                continue
            self._engine = engine
            log.info("connected to the engine at %s after %.1f s", self._where, time.monotonic() - started)
            self._warm_up(engine)
            return

    def _warm_up(self, engine: Any) -> None:
        while not self._stopped.is_set():
            try:
                engine.wait_ready(1.0)
                break
            except EngineNotReady:
                continue  # still loading
            except ServingError:
                return  # dead: health() says so
        try:
            engine.tokenizer  # noqa: B018 - loads it once, here rather than in the first request
        except Exception:
            log.exception("loading the tokenizer failed")
        self._warm = True

    @property
    def connected(self) -> bool:
        return self._engine is not None

    def _require(self) -> ServingEngine:
        engine = self._engine
        if engine is None:
            raise EngineNotReady(f"the engine at {self._where} is starting; retry shortly")
        return engine

    def health(self) -> HealthReport:
        engine = self._engine
        if engine is None:
            return HealthReport(state=EngineState.LOADING, detail=f"connecting to the engine at {self._where}")
        report = engine.health(**self._health_kwargs)
        if report.state is EngineState.READY and not self._warm:
            return HealthReport(EngineState.LOADING, "loading the tokenizer", report.info)
        return report

    def submit(self, prompts, params, request_id: str | None = None, adapter: str | None = None,
               session_id: str | None = None) -> RequestStream:
        return self._require().submit(prompts, params, request_id=request_id, adapter=adapter, session_id=session_id)

    def open_session(self) -> tuple[str, float]:
        return self._require().open_session()

    def close_session(self, session_id: str) -> None:
        self._require().close_session(session_id)

    def register_adapter(self, name: str, src: str, preload: bool = False) -> list[AdapterStatus]:
        return self._require().register_adapter(name, src, preload=preload)

    def unregister_adapter(self, name: str) -> list[AdapterStatus]:
        return self._require().unregister_adapter(name)

    def list_adapters(self) -> list[AdapterStatus]:
        return self._require().list_adapters()

    @property
    def tokenizer(self) -> Any:
        return self._require().tokenizer

    def shutdown(self) -> None:
        self._stopped.set()
        if self._engine is not None:
            self._engine.shutdown()
