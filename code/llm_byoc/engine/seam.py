"""The engine seam: what the HTTP front end asks of an engine, and nothing more.

``api/`` types its engine as ``ServingEngine``; ``LLMEngine`` (this package:
in process, or the front end of the engine server, connected in the
background) implements it. A second engine backend (vLLM) plugs in here. The rules every engine keeps:

- ``health()`` never blocks for long: it is what ``/ping`` and ``/metrics`` read
  (state, detail, the model's info once loaded, queue and KV-cache figures).
- ``submit`` checks the prompts (InvalidRequest), queues every prompt of the
  request and returns its stream. The engine's refusal of a sequence (QueueFull,
  AdapterNotFound, too many new tokens) is raised either by ``submit`` or by the
  stream's first event: callers wait for the first event before they answer 200.
- A stream's events are ``TokenEvent``s, ending with each prompt's finish reason;
  stop strings are the engine's job (a stopped prompt ends with reason STOP and
  its text cut before the stop string). Closing the iterator, ``abort()`` or a
  timeout frees the request's work in the engine.
- Errors are ``ServingError``s (``llm_byoc.errors``): the HTTP layer maps them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ..adapters.messages import AdapterStatus
from ..protocol import HealthReport, SamplingParams
from .outputs import GenerationResult, TokenEvent

Prompts = list[str] | list[list[int]]


class RequestStream(Protocol):
    """One submitted request: iterate its events from one thread, or wait for its results."""

    request_id: str

    def events(self, timeout_s: float | None = None) -> Iterator[TokenEvent]: ...

    def result(self, timeout_s: float | None = None) -> list[GenerationResult]: ...

    def abort(self) -> None: ...


class ServingEngine(Protocol):
    def health(self) -> HealthReport: ...

    def engine_metrics(self) -> str:
        """The engine's own Prometheus series, appended to ``/metrics`` (vLLM's ``vllm:*``; "" for ours)."""

    @property
    def tokenizer(self) -> Any:
        """The served model's tokenizer (chat templates, token counts); EngineNotReady until loaded."""

    def submit(self, prompts: Prompts, params: SamplingParams | list[SamplingParams], request_id: str | None = None,
               adapter: str | None = None, session_id: str | None = None) -> RequestStream: ...

    def register_adapter(self, name: str, src: str, preload: bool = False) -> list[AdapterStatus]: ...

    def unregister_adapter(self, name: str) -> list[AdapterStatus]: ...

    def list_adapters(self) -> list[AdapterStatus]: ...

    def open_session(self) -> tuple[str, float]: ...

    def close_session(self, session_id: str) -> None: ...

    def shutdown(self) -> None: ...
