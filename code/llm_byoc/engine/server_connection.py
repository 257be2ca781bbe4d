"""One front end's connection to the engine server.

A reader (the thread calling ``serve``) handles the front end's messages in
order; a sender thread writes from a queue, so a slow front end never stalls
the step loop. Frames are ``process.Channel``'s: a HealthRequest or a control
command is answered on its call id; AddSequence and AbortSequence get no
answer (a refused sequence comes back as a SequenceRejected among the outputs,
which are sent on call id 0).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from ..adapters.messages import AdapterCommand
from ..errors import ServingError
from ..process.channel import BadFrame, Channel
from ..protocol import (
    AbortSequence,
    AddSequence,
    EngineMetrics,
    EngineOutputs,
    HealthRequest,
    MetricsRequest,
    SequenceRejected,
    SessionCommand,
)
from .engine_choice import Core
from .engine_socket import PUSH

log = logging.getLogger(__name__)

_CLOSE = object()


class FrontConnection:
    def __init__(
        self,
        channel: Channel,
        core: Core,
        own: Callable[[str, FrontConnection], bool],
        disown: Callable[[str, FrontConnection], bool],
    ):
        self._channel = channel
        self._core = core
        self._own = own  # register this connection as a sequence's owner (False: id taken)
        self._disown = disown
        self._outbox: queue.Queue = queue.Queue()
        self._sender = threading.Thread(target=self._send_loop, name="engine-conn-send", daemon=True)

    def enqueue(self, message: Any, call_id: int = PUSH) -> None:
        self._outbox.put((call_id, message))

    def serve(self) -> None:
        """Handle messages until the front end disconnects or sends garbage."""
        self._sender.start()
        try:
            while True:
                call_id, message, _ = self._channel.receive()
                self._handle(call_id, message)
        except (EOFError, OSError):
            pass
        except BadFrame as exc:
            log.warning("closing a front-end connection: %s", exc)
        finally:
            self.close()
            self._channel.close()

    def _handle(self, call_id: int, message: Any) -> None:
        if isinstance(message, AddSequence):
            self._add(message)
        elif isinstance(message, AbortSequence):
            if self._disown(message.seq_id, self):
                self._core.abort(message.seq_id)
        elif isinstance(message, HealthRequest):
            self.enqueue(self._core.health(), call_id)
        elif isinstance(message, MetricsRequest):
            self.enqueue(EngineMetrics(self._core.metrics_text()), call_id)
        elif isinstance(message, (AdapterCommand, SessionCommand)):
            # the reply may come later (a preload)
            self._core.control(message, lambda reply: self.enqueue(reply, call_id))
        else:
            raise BadFrame(call_id, f"unexpected message {type(message).__name__}")

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
            item = self._outbox.get()
            if item is _CLOSE:
                break
            try:
                self._channel.send(*item)
            except (OSError, ValueError):  # BadFrame is a ValueError too
                break  # the front end is gone; the reader notices too
        self._channel.hang_up()  # wakes the reader, which closes the connection

    def close(self, timeout_s: float = 2.0) -> None:
        """Flush what is queued, then close (idempotent)."""
        self._outbox.put(_CLOSE)
        if self._sender.is_alive() and threading.current_thread() is not self._sender:
            self._sender.join(timeout_s)
