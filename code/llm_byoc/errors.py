"""One error hierarchy. Every error a client can see carries its HTTP status.

The HTTP layer turns a ServingError into ``{"error": message, "type": name}``
with ``status_code``; anything else becomes a generic 500 (details in the log).
Across a process boundary an error travels as (type, message, status) plain
data and is rebuilt here with ``from_wire``; foreign classes are never unpickled.
"""

from __future__ import annotations


class ServingError(Exception):
    status_code: int = 500
    error_type: str = "internal_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict:
        return {"error": self.message, "type": self.error_type}

    @staticmethod
    def from_wire(error_type: str, message: str) -> "ServingError":
        cls = _BY_TYPE.get(error_type, ServingError)
        return cls(message)


class InvalidRequest(ServingError):
    status_code = 400
    error_type = "invalid_request"


class ClientTimeout(ServingError):
    """The client stopped sending its request body (or went away while sending it)."""

    status_code = 408
    error_type = "client_timeout"


class ModelNotFound(ServingError):
    status_code = 404
    error_type = "model_not_found"


class ModelAlreadyLoaded(ServingError):
    status_code = 409
    error_type = "model_already_loaded"


class AdapterNotFound(ServingError):
    status_code = 404
    error_type = "adapter_not_found"


class AdapterExists(ServingError):
    status_code = 409
    error_type = "adapter_exists"


class SessionNotFound(ServingError):
    """A stateful session id that is not open on this instance (closed, expired, never opened)."""

    status_code = 404
    error_type = "session_not_found"


class PayloadTooLarge(ServingError):
    status_code = 413
    error_type = "payload_too_large"


class UnsupportedMediaType(ServingError):
    status_code = 415
    error_type = "unsupported_media_type"


class QueueFull(ServingError):
    """Running + waiting sequences are at capacity (answered with ``Retry-After``)."""

    status_code = 429
    error_type = "queue_full"


class TooManyConnections(ServingError):
    """An HTTP worker holds its limit of open connections (answered with ``Retry-After``)."""

    status_code = 429
    error_type = "too_many_connections"


class EngineNotReady(ServingError):
    status_code = 503
    error_type = "engine_not_ready"


class EngineDead(ServingError):
    status_code = 503
    error_type = "engine_dead"


class ShuttingDown(ServingError):
    """The server stopped (SIGTERM) before the request could finish."""

    status_code = 503
    error_type = "shutting_down"


class RequestTimeout(ServingError):
    status_code = 504
    error_type = "timeout"


class InsufficientMemory(ServingError):
    status_code = 507
    error_type = "insufficient_memory"


class ModelLoadError(ServingError):
    """A model folder that cannot be loaded (corrupt, unsupported, unsafe)."""

    status_code = 500
    error_type = "model_load_error"


_BY_TYPE: dict[str, type[ServingError]] = {
    cls.error_type: cls
    for cls in (
        ServingError,
        InvalidRequest,
        ClientTimeout,
        ModelNotFound,
        ModelAlreadyLoaded,
        AdapterNotFound,
        AdapterExists,
        SessionNotFound,
        PayloadTooLarge,
        UnsupportedMediaType,
        QueueFull,
        TooManyConnections,
        EngineNotReady,
        EngineDead,
        ShuttingDown,
        RequestTimeout,
        InsufficientMemory,
        ModelLoadError,
    )
}
