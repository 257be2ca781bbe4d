"""Messages between the model manager and a model's worker process.

Each message is two frames on a ``multiprocessing`` pipe: a JSON header (a
small dataclass, rebuilt only from the classes named here, never unpickled)
and a raw payload (the request or response body, bytes as they came). Errors
travel as (error_type, message) and are rebuilt with ``ServingError.from_wire``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..wire import MessageCodec


@dataclass(frozen=True)
class Invocation:
    """One invoke request: the HTTP body with its content type and options."""

    content_type: str = "application/json"
    accept: str = "application/json"
    params: dict[str, str] = field(default_factory=dict)  # query string (top_k=...)
    timeout_s: float = 60.0  # the handler gives up (and frees the work) after this


@dataclass(frozen=True)
class Reply:
    content_type: str = "application/json"
    compute_s: float = 0.0  # time in the handler, measured in the worker


@dataclass(frozen=True)
class InvokeRequest:
    request_id: int
    invocation: Invocation


@dataclass(frozen=True)
class InvokeResult:
    request_id: int
    reply: Reply


@dataclass(frozen=True)
class InvokeFailed:
    request_id: int
    error_type: str
    message: str


@dataclass(frozen=True)
class WorkerReady:
    pid: int
    load_time_s: float


@dataclass(frozen=True)
class LoadFailed:
    error_type: str
    message: str


@dataclass(frozen=True)
class Stop:
    pass


class WireError(ValueError):
    """A frame that is not one of these messages."""


_CODEC = MessageCodec(
    messages=(Invocation, Reply, InvokeRequest, InvokeResult, InvokeFailed, WorkerReady, LoadFailed, Stop),
    error=WireError,
)
encode_header = _CODEC.encode
decode_header = _CODEC.decode


def send(conn, message: Any, payload: bytes = b"") -> None:
    """Write one message (header frame + payload frame). Callers serialise sends."""
    conn.send_bytes(encode_header(message))
    conn.send_bytes(payload)


def receive(conn) -> tuple[Any, bytes]:
    """Read one message; EOFError/OSError when the peer is gone."""
    header = decode_header(conn.recv_bytes())
    return header, conn.recv_bytes()
