"""Messages between the model manager and a model's process.

They travel on a ``process.Channel``: a typed JSON header (rebuilt only from
the classes named here, never unpickled) with a call id, and a raw payload
(the request or response body, bytes as they came). Failures and the stop are
the process mechanism's own ``protocol.WorkerFailure`` and ``protocol.Shutdown``;
a failure's (error_type, message) is rebuilt with ``ServingError.from_wire``.

    model process -> ModelLoaded            or WorkerFailure(fatal=True), then it exits
    InvokeRequest + body -> InvokeReply + body, or WorkerFailure
    Shutdown -> (exit)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol import Shutdown, WorkerFailure
from ..wire import MessageCodec


@dataclass(frozen=True)
class InvokeRequest:
    """One invoke: the HTTP body's content type and options (the body is the payload)."""

    content_type: str = "application/json"
    accept: str = "application/json"
    params: dict[str, str] = field(default_factory=dict)  # query string (top_k=...)
    timeout_s: float = 60.0  # the handler gives up (and frees the work) after this


@dataclass(frozen=True)
class InvokeReply:
    content_type: str = "application/json"
    compute_s: float = 0.0  # time in the handler, measured in the model process


@dataclass(frozen=True)
class ModelLoaded:
    """The handshake of a model process."""

    pid: int
    load_time_s: float


class WireError(ValueError):
    """A frame that is not one of these messages."""


_CODEC = MessageCodec(
    messages=(InvokeRequest, InvokeReply, ModelLoaded, WorkerFailure, Shutdown),
    error=WireError,
)
encode = _CODEC.encode
decode = _CODEC.decode
