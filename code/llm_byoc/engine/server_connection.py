"""One front end's connection to the engine server.

A reader (the thread calling ``serve``) handles the front end's messages in
order; a sender thread writes outputs from a queue, so a slow front end never
stalls the step loop. Because a connection's messages are handled in order and
a refusal is queued before the answer to any later message, a front end that
sends AddSequence... then HealthRequest knows, once the HealthReport arrives,
whether each of those sequences was accepted.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from ..adapters.messages import AdapterCommand
from ..errors import ServingError
from ..protocol import (
    AbortSequence,
    AddSequence,
    EngineOutputs,
    HealthRequest,
    ProtocolError,
    SequenceRejected,
    SessionCommand,
)
from . import ipc
from .core import EngineCore

log = logging.getLogger(__name__)

_CLOSE = object()


class FrontConnection:
    def __init__(
        self,
        conn: Any,
        core: EngineCore,
        own: Callable[[str, FrontConnection], bool],
        disown: Callable[[str, FrontConnection], bool],
    ):
        self._conn = conn
        self._core = core
        self._own = own  # register this connection as a sequence's owner (False: id taken)
        self._disown = disown
        self._outbox: queue.Queue = queue.Queue()
        self._sender = threading.Thread(target=self._send_loop, name="engine-conn-send", daemon=True)

    def enqueue(self, message: Any) -> None:
        self._outbox.put(message)

    def serve(self) -> None:
        """Handle messages until the front end disconnects or sends garbage."""
        self._sender.start()
        try:
            while True:
                self._handle(ipc.recv(self._conn))
        except (EOFError, OSError):
            pass
        except ProtocolError as exc:
            log.warning("closing a front-end connection: %s", exc)
        finally:
            self.close()
            self._conn.close()

    def _handle(self, message: Any) -> None:
        if isinstance(message, AddSequence):
            self._add(message)
        elif isinstance(message, AbortSequence):
            if self._disown(message.seq_id, self):
                self._core.abort(message.seq_id)
        elif isinstance(message, HealthRequest):
            self.enqueue(self._core.health())
        elif isinstance(message, (AdapterCommand, SessionCommand)):
            self._core.control(message, self.enqueue)  # the reply may come later (a preload)
        else:
            raise ProtocolError(f"unexpected message {type(message).__name__}")

    def _add(self, message: AddSequence) -> None:
        if not self._own(message.seq_id, self):
            self._reject(message.seq_id, "invalid_request", f"sequence {message.seq_id!r} is already in the engine")
            return
        try:
            self._core.add(message)
        except ServingError as exc:
            self._disown(message.seq_id, self)
            self._reject(message.seq_id, exc.error_type, exc.message)

    def _reject(self, seq_id: str, error_type: str, text: str) -> None:
        self.enqueue(EngineOutputs(rejected=[SequenceRejected(seq_id, error_type, text)]))

    def _send_loop(self) -> None:
        while True:
            message = self._outbox.get()
            if message is _CLOSE:
                break
            try:
                ipc.send(self._conn, message)
            except (OSError, ValueError):
                break  # the front end is gone; the reader notices too
        ipc.hang_up(self._conn)  # wakes the reader, which closes the connection

    def close(self, timeout_s: float = 2.0) -> None:
        """Flush what is queued, then close (idempotent)."""
        self._outbox.put(_CLOSE)
        if self._sender.is_alive() and threading.current_thread() is not self._sender:
            self._sender.join(timeout_s)
