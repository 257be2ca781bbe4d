"""The front end's side of the engine socket (one per LLMEngine, shared by its threads).

It connects in the background: a gunicorn worker starts before the engine
process listens, yet ``/ping`` must answer at once, so until the socket answers
health is LOADING ("connecting") and nothing can be sent (EngineNotReady).
Everything travels as ``process.Channel`` frames. A HealthRequest or a control
command waits for the answer on its own call id; AddSequence and AbortSequence
are sent and not answered: a refused sequence comes back among the outputs
(call id 0) as a SequenceRejected, on its request's stream. Which request a
sequence belongs to is the engine front end's table (``LLMEngine``); when the
connection is lost, ``on_lost`` tells it to fail them all.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..adapters.messages import AdapterCommand, AdapterReply
from ..errors import EngineDead, EngineNotReady, RequestTimeout
from ..process.channel import BadFrame, Channel
from ..protocol import (
    AbortSequence,
    AddSequence,
    EngineOutputs,
    EngineState,
    HealthReport,
    HealthRequest,
    MetricsRequest,
    SessionCommand,
    SessionReply,
)
from . import engine_socket

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 1.0
RETRY_INTERVAL_S = 0.1


class _Answer:
    """The reply some caller waits for on one call id."""

    def __init__(self):
        self.message: Any = None
        self.done = threading.Event()


class RemoteCore:
    def __init__(self, socket_path: str, on_outputs: Callable[[EngineOutputs], None],
                 on_lost: Callable[[str], None], connect_timeout_s: float | None = 30.0,
                 health_timeout_s: float = HEALTH_TIMEOUT_S, retry_interval_s: float = RETRY_INTERVAL_S,
                 open_channel: Callable[[str], Channel] = engine_socket.connect):
        """``connect_timeout_s``: how long to keep trying to connect before the engine counts as
        dead (None: for ever); ``health_timeout_s``: how long a health check waits for its answer."""
        self._where = socket_path
        self._open_channel = open_channel
        self._on_outputs = on_outputs
        self._on_lost = on_lost  # the connection is gone: fail every sequence of this front end
        self._health_timeout_s = health_timeout_s
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Answer] = {}  # by call id
        self._channel: Channel | None = None  # once connected
        self._dead: str | None = None
        threading.Thread(target=self._connect_then_read, args=(connect_timeout_s, retry_interval_s),
                         name="engine-client-read", daemon=True).start()

    # --- CoreClient --------------------------------------------------------------

    def add(self, adds: list[AddSequence]) -> None:
        """Queue the sequences; a refusal comes back on their stream."""
        self._send(adds)

    def abort(self, seq_ids: list[str]) -> None:
        self._send([AbortSequence(s) for s in seq_ids])

    def control(self, command: AdapterCommand | SessionCommand, timeout_s: float) -> AdapterReply | SessionReply:
        """One control command and its reply (a preload may take a while)."""
        return self._call(command, timeout_s)

    def health(self, timeout_s: float | None = None) -> HealthReport:
        """LOADING while connecting; DEAD at once when the connection is gone, and when no answer
        comes within ``timeout_s`` (None: the configured ``health_timeout_s``)."""
        timeout_s = self._health_timeout_s if timeout_s is None else timeout_s
        if self._channel is None and self._dead is None:
            return HealthReport(EngineState.LOADING, f"connecting to the engine at {self._where}")
        try:
            return self._call(HealthRequest(), timeout_s, lock_timeout_s=timeout_s)
        except EngineDead as exc:
            return HealthReport(EngineState.DEAD, exc.message)
        except RequestTimeout:
            return HealthReport(EngineState.DEAD, "the engine server is not answering")

    def engine_metrics(self, timeout_s: float) -> str:
        """The engine's own Prometheus series (EngineMetrics.text); EngineDead/RequestTimeout as a call."""
        return self._call(MetricsRequest(), timeout_s, lock_timeout_s=timeout_s).text

    def wait_ready(self, timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            report = self.health()
            if report.state is EngineState.READY:
                return
            if report.state is EngineState.DEAD:
                raise EngineDead(report.detail)
            if deadline is not None and time.monotonic() >= deadline:
                raise EngineNotReady(f"the model is still loading after {timeout_s} s")
            time.sleep(0.1)

    def shutdown(self) -> None:
        """Close this front end's connection (the server aborts its sequences)."""
        self._fail("the engine client was shut down")
        if self._channel is not None:
            self._channel.hang_up()  # the reader sees EOF and closes the connection

    # --- plumbing ----------------------------------------------------------------

    def _call(self, message: Any, timeout_s: float, lock_timeout_s: float | None = None) -> Any:
        answer = _Answer()
        with self._lock:
            call_id = next(self._ids)
            self._waiting[call_id] = answer
        try:
            self._send([message], call_id, lock_timeout_s)
            if not answer.done.wait(timeout_s):
                raise RequestTimeout(f"the engine did not answer the {type(message).__name__} within {timeout_s:g} s")
        finally:
            with self._lock:
                self._waiting.pop(call_id, None)
        if answer.message is None:
            raise EngineDead(self._dead or "lost the connection to the engine server")
        return answer.message

    def _send(self, messages: list, call_id: int = engine_socket.PUSH, lock_timeout_s: float | None = None) -> None:
        if self._dead is not None:
            raise EngineDead(self._dead)
        if self._channel is None:
            raise EngineNotReady(f"the engine at {self._where} is starting; retry shortly")
        try:
            for message in messages:
                if not self._channel.send(call_id, message, lock_timeout_s=lock_timeout_s):
                    # a health check must not queue behind a stuck send
                    raise EngineDead("the engine server is not answering")
            return
        except (OSError, ValueError) as exc:  # BadFrame is a ValueError
            error = exc
        self._fail(f"lost the connection to the engine server: {error}")
        raise EngineDead(self._dead)

    def _connect_then_read(self, timeout_s: float | None, retry_interval_s: float) -> None:
        started = time.monotonic()
        attempts = 0
        while self._dead is None:  # shut down before it ever connected
            attempts += 1
            try:
                channel = self._open_channel(self._where)
            except OSError as exc:  # not listening yet: keep trying, say so now and then
                if timeout_s is not None and time.monotonic() - started >= timeout_s:
                    self._fail(f"no engine server at {self._where}: {exc}")
                    return
                if attempts % 50 == 1:
                    log.info("engine at %s not reachable yet (%s); retrying", self._where, exc)
                time.sleep(retry_interval_s)
                continue
            if self._dead is not None:  # shut down while connecting
                channel.close()
                return
            log.info("connected to the engine at %s after %.1f s", self._where, time.monotonic() - started)
            self._channel = channel
            self._read_loop(channel)
            return

    def _read_loop(self, channel: Channel) -> None:
        try:
            while True:
                call_id, message, _ = channel.receive()
                if call_id == engine_socket.PUSH:
                    if isinstance(message, EngineOutputs):
                        self._on_outputs(message)
                    continue
                with self._lock:
                    answer = self._waiting.get(call_id)
                if answer is not None:
                    answer.message = message
                    answer.done.set()
        except (EOFError, OSError, BadFrame) as exc:
            self._fail(f"lost the connection to the engine server ({type(exc).__name__})")
        finally:
            channel.close()

    def _fail(self, detail: str) -> None:
        """The connection is gone: every waiting caller and every sequence gets EngineDead."""
        with self._lock:
            if self._dead is not None:
                return
            self._dead = detail
            answers, self._waiting = list(self._waiting.values()), {}
        for answer in answers:
            answer.done.set()
        self._on_lost(detail)
