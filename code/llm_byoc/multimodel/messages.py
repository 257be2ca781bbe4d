"""Messages between the model manager and a model's worker process.

Each message is two frames on a ``multiprocessing`` pipe: a JSON header (a
small dataclass, rebuilt only from the classes named here, never unpickled)
and a raw payload (the request or response body, bytes as they came). Errors
travel as (error_type, message) and are rebuilt with ``ServingError.from_wire``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


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


_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (Invocation, Reply, InvokeRequest, InvokeResult, InvokeFailed, WorkerReady, LoadFailed, Stop)
}


class WireError(ValueError):
    """A frame that is not one of these messages."""


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__t": type(value).__name__}
        for f in dataclasses.fields(value):
            out[f.name] = _to_plain(getattr(value, f.name))
        return out
    return value


def _from_plain(value: Any) -> Any:
    if isinstance(value, dict) and "__t" in value:
        cls = _TYPES.get(value["__t"])
        if cls is None:
            raise WireError(f"unknown message type {value['__t']!r}")
        kwargs = {k: _from_plain(v) for k, v in value.items() if k != "__t"}
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise WireError(f"bad fields for {value['__t']}: {exc}") from None
    return value


def encode_header(message: Any) -> bytes:
    if type(message).__name__ not in _TYPES:
        raise WireError(f"{type(message).__name__} is not a worker message")
    return json.dumps(_to_plain(message), separators=(",", ":")).encode()


def decode_header(data: bytes) -> Any:
    try:
        plain = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    message = _from_plain(plain)
    if type(message).__name__ not in _TYPES:
        raise WireError("a frame must hold a typed message")
    return message


def send(conn, message: Any, payload: bytes = b"") -> None:
    """Write one message (header frame + payload frame). Callers serialise sends."""
    conn.send_bytes(encode_header(message))
    conn.send_bytes(payload)


def receive(conn) -> tuple[Any, bytes]:
    """Read one message; EOFError/OSError when the peer is gone."""
    header = decode_header(conn.recv_bytes())
    return header, conn.recv_bytes()
