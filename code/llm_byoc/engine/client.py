"""The front end's side of the engine socket (one per process, shared by threads).

A reader thread hands EngineOutputs to the engine's router and HealthReports
to the callers waiting for them, first come first served (the server answers
a connection's messages in order). ``add`` is synchronous: it sends the
AddSequences followed by a HealthRequest; by the time the HealthReport comes
back, any refusal of those sequences has come back before it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Client

from ..adapters.messages import AdapterCommand, AdapterReply
from ..errors import EngineDead, EngineNotReady, RequestTimeout, ServingError
from ..protocol import (
    AbortSequence,
    AddSequence,
    EngineOutputs,
    EngineState,
    HealthReport,
    HealthRequest,
    ProtocolError,
    SequenceRejected,
    SessionCommand,
    SessionReply,
)
from . import ipc

HEALTH_TIMEOUT_S = 1.0
ADD_TIMEOUT_S = 30.0


class _Reply:
    """A HealthReport some caller is waiting for, plus refusals seen before it."""

    def __init__(self, seq_ids: tuple[str, ...] = ()):
        self.seq_ids = set(seq_ids)
        self.rejected: list[SequenceRejected] = []
        self.report: HealthReport | None = None
        self.done = threading.Event()


class _Call:
    """A control command waiting for its reply (AdapterReply / SessionReply)."""

    def __init__(self):
        self.reply: AdapterReply | SessionReply | None = None
        self.done = threading.Event()


class SocketCoreClient:
    def __init__(self, socket_path: str, on_outputs: Callable[[EngineOutputs], None], timeout_s: float = 30.0):
        self._on_outputs = on_outputs
        self._send_lock = threading.Lock()
        self._replies: deque[_Reply] = deque()
        self._live: set[str] = set()  # sequences added and not finished
        self._calls: dict[int, _Call] = {}  # adapter commands waiting for their reply, by call id
        self._dead: str | None = None
        self._conn = _connect(socket_path, timeout_s)
        threading.Thread(target=self._read_loop, name="engine-client-read", daemon=True).start()

    # --- CoreClient --------------------------------------------------------------

    def add(self, adds: list[AddSequence]) -> None:
        reply = _Reply(tuple(a.seq_id for a in adds))
        self._send([*adds, HealthRequest()], reply, live=[a.seq_id for a in adds])
        if not reply.done.wait(ADD_TIMEOUT_S):
            raise EngineDead(f"the engine server did not answer within {ADD_TIMEOUT_S:.0f} s")
        if reply.report is None:
            raise EngineDead(self._dead or "lost the connection to the engine server")
        if reply.rejected:
            accepted = [a.seq_id for a in adds if a.seq_id not in {r.seq_id for r in reply.rejected}]
            self.abort(accepted)
            first = reply.rejected[0]
            raise ServingError.from_wire(first.error_type, first.message)

    def abort(self, seq_ids: list[str]) -> None:
        if seq_ids:
            self._send([AbortSequence(s) for s in seq_ids], None, done=seq_ids)

    def control(self, command: AdapterCommand | SessionCommand, timeout_s: float) -> AdapterReply | SessionReply:
        """Send one control command; its reply comes by call id (a preload may take a while)."""
        call = _Call()
        with self._send_lock:
            self._calls[command.call_id] = call
        try:
            self._send([command], None)
            if not call.done.wait(timeout_s):
                raise RequestTimeout(f"the engine did not answer the {type(command).__name__} within {timeout_s:g} s")
        finally:
            with self._send_lock:
                self._calls.pop(command.call_id, None)
        if call.reply is None:
            raise EngineDead(self._dead or "lost the connection to the engine server")
        return call.reply

    def health(self, timeout_s: float | None = None) -> HealthReport:
        """DEAD at once when the connection is gone; DEAD too when no answer comes within ``timeout_s``."""
        timeout_s = HEALTH_TIMEOUT_S if timeout_s is None else timeout_s
        reply = _Reply()
        try:
            self._send([HealthRequest()], reply, lock_timeout_s=timeout_s)
        except EngineDead as exc:
            return HealthReport(EngineState.DEAD, exc.message)
        if not reply.done.wait(timeout_s):
            return HealthReport(EngineState.DEAD, "the engine server is not answering")
        if reply.report is None:
            return HealthReport(EngineState.DEAD, self._dead or "lost the connection to the engine server")
        return reply.report

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
        ipc.hang_up(self._conn)  # the reader sees EOF and closes the connection

    # --- plumbing ----------------------------------------------------------------

    def _send(
        self, messages: list, reply: _Reply | None, live: list[str] = (), done: list[str] = (),
        lock_timeout_s: float = -1,
    ) -> None:
        if not self._send_lock.acquire(timeout=lock_timeout_s):  # a health check must not queue behind a stuck send
            raise EngineDead("the engine server is not answering")
        try:
            if self._dead is not None:
                raise EngineDead(self._dead)
            self._live.update(live)
            self._live.difference_update(done)
            if reply is not None:
                self._replies.append(reply)
            try:
                for message in messages:
                    ipc.send(self._conn, message)
                return
            except (OSError, ValueError) as exc:
                error = exc
        finally:
            self._send_lock.release()
        self._fail(f"lost the connection to the engine server: {error}")  # takes the lock itself
        raise EngineDead(self._dead)

    def _read_loop(self) -> None:
        try:
            while True:
                message = ipc.recv(self._conn)
                if isinstance(message, EngineOutputs):
                    self._on_engine_outputs(message)
                elif isinstance(message, (AdapterReply, SessionReply)):
                    with self._send_lock:
                        call = self._calls.get(message.call_id)
                    if call is not None:
                        call.reply = message
                        call.done.set()
                elif isinstance(message, HealthReport):
                    with self._send_lock:
                        reply = self._replies.popleft() if self._replies else None
                    if reply is not None:
                        reply.report = message
                        reply.done.set()
        except (EOFError, OSError, ProtocolError) as exc:
            self._fail(f"lost the connection to the engine server ({type(exc).__name__})")
        finally:
            self._conn.close()

    def _on_engine_outputs(self, outputs: EngineOutputs) -> None:
        with self._send_lock:
            for update in outputs.updates:
                if update.finish_reason is not None:
                    self._live.discard(update.seq_id)
            for rejected in outputs.rejected:
                self._live.discard(rejected.seq_id)
                for reply in self._replies:
                    if rejected.seq_id in reply.seq_ids:
                        reply.rejected.append(rejected)
        self._on_outputs(outputs)

    def _fail(self, detail: str) -> None:
        """The connection is gone: every caller and every live sequence gets EngineDead."""
        with self._send_lock:
            if self._dead is not None:
                return
            self._dead = detail
            replies, self._replies = list(self._replies), deque()
            live, self._live = sorted(self._live), set()
            calls = list(self._calls.values())
        for waiter in [*replies, *calls]:
            waiter.done.set()
        if live:
            rejected = [SequenceRejected(s, EngineDead.error_type, detail) for s in live]
            self._on_outputs(EngineOutputs(rejected=rejected))


def _connect(socket_path: str, timeout_s: float):
    """Connect and authenticate, retrying while the server is still starting."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn = Client(socket_path, family="AF_UNIX")
            conn.send_bytes(ipc.read_key(socket_path))
            return conn
        except (FileNotFoundError, ConnectionRefusedError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise EngineDead(f"no engine server at {socket_path}: {exc}") from None
            time.sleep(0.1)
