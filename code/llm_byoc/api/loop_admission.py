"""Admission in the HTTP worker's event loop: a generation request beyond capacity is refused
with a 429 before any thread is given to it.

In a burst, every request's thread queues for the GIL behind the others: with
400 requests at once on 2 cores the app took its admission decision (the
gate) for the last of them about a second after they arrived, so a
refused client waited that long for its 429. The event loop sees each request
the moment its connection becomes readable: it peeks at the request line (the
bytes stay in the socket for the thread that serves the request), takes room
in the app's ``CapacityGate`` (``admission.py``) for a generation route (one
sequence; the rows of ``routes.py``), or in multi-model mode for an invoke
(one among the invoked model's requests in flight), and hands the ticket to the serving thread
(``environ[TICKET]``), whose route then takes no room of its own; when the
gate is full it writes the 429 itself (the JSON shape and ``Retry-After`` the
app's own 429 has), half-closes the connection and lets ``Draining`` read
what the client still sends, so the answer is not lost to a reset.

Only a plain-TCP HTTP/1.x request whose request line has fully arrived is
peeked at; anything else goes to a thread as before, and the app admits it.
"""

from __future__ import annotations

import json
import socket
import time
from collections import deque
from collections.abc import Callable
from functools import partial

from ..errors import QueueFull
from .admission import ONE_KEY, CapacityGate, Ticket
from .errors import RETRY_AFTER_S, error_json, tgi_error_json
from .routes import BY_PATH

PEEK_BYTES = 1024
TICKET = "llm_byoc.admission_ticket"  # environ key: the room the event loop took for this request
ADMISSION_EXTENSION = "llm_byoc.loop_admission"  # app.extensions key: what the event loop admits with
DRAIN_S = 1.0  # how long a refused connection is read from before it is closed


def generation_route(head: bytes) -> str | None:
    """The path of a ``POST`` to a generation route (or a multi-model invoke), from the first
    bytes of a request."""
    line, found, _ = head.partition(b"\r\n")
    if not found:
        return None  # the request line has not fully arrived: the thread decides
    parts = line.split(b" ")
    if len(parts) != 3 or parts[0] != b"POST" or not parts[2].startswith(b"HTTP/1."):
        return None
    path = parts[1].split(b"?", 1)[0].decode("latin-1")
    return path if path in BY_PATH or invoked_model(path) is not None else None


def invoked_model(path: str) -> str | None:
    """``NAME`` of ``/models/NAME/invoke`` (the multi-model invoke route), else None."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == "" and parts[1] == "models" and parts[2] and parts[3] == "invoke":
        return parts[2]
    return None


def generation_key(path: str) -> str | None:
    """Single-model mode: a generation route (api/routes.py) takes room under the gate's one key."""
    return ONE_KEY if path in BY_PATH else None


class LoopAdmission:
    """What the event loop admits with: the app's ``CapacityGate``, and the key a route takes
    room under (``generation_key`` in single-model mode, ``invoked_model`` in multi-model mode;
    None: the route admits the request itself)."""

    def __init__(self, gate: CapacityGate, key_of: Callable[[str], str | None]):
        self.gate = gate
        self._key_of = key_of

    def reserve(self, path: str) -> Ticket | None:
        """A ticket (its ``release`` idempotent), None for a path admitted elsewhere; QueueFull when full."""
        key = self._key_of(path)
        return None if key is None else self.gate.reserve(key)


def peek_route(sock: socket.socket) -> str | None:
    """``generation_route`` of what is waiting on ``sock``, without reading it (never blocks)."""
    try:
        head = sock.recv(PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError, OSError):
        return None
    return generation_route(head)


def refusal(path: str, exc: QueueFull) -> bytes:
    """The 429 the app would answer, in the route's error shape, with ``Connection: close``."""
    route = BY_PATH.get(path)
    shape = tgi_error_json if route is not None and route.tgi else partial(error_json, path)
    body = json.dumps(shape(exc.status_code, exc.message, exc.error_type)).encode()
    head = (
        f"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Retry-After: {RETRY_AFTER_S}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def send_refusal(sock: socket.socket, data: bytes) -> bool:
    """Write the whole 429 without blocking, then half-close; False if the socket would not take it."""
    try:
        sent = sock.send(data, socket.MSG_DONTWAIT)
        if sent != len(data):
            return False
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        return False
    return True


class Draining:
    """Refused connections, read from (and the bytes dropped) until the client closes or
    ``DRAIN_S`` passes, then closed. Called from the event loop only."""

    def __init__(self):
        self._conns: deque = deque()  # (deadline, conn), oldest first

    def __len__(self) -> int:
        return len(self._conns)

    def add(self, conn) -> None:
        self._conns.append((time.monotonic() + DRAIN_S, conn))

    def readable(self, conn) -> bool:
        """Drop what arrived; True once the client has closed (the caller closes the connection)."""
        try:
            while True:
                data = conn.sock.recv(65536, socket.MSG_DONTWAIT)
                if not data:
                    return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    def expired(self) -> list:
        """The connections whose time is up, taken out of the queue."""
        now, out = time.monotonic(), []
        while self._conns and self._conns[0][0] <= now:
            out.append(self._conns.popleft()[1])
        return out

    def remove(self, conn) -> None:
        self._conns = deque(item for item in self._conns if item[1] is not conn)
