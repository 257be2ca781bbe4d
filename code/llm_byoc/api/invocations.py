"""``POST /invocations`` (and the OpenAI routes) in front of one engine: admit, submit, then answer or stream.

Each route is an ``InvocationRoute`` with its own parser (``schemas/dispatch.py``);
they share one ``CapacityGate`` and one ``ClientWatch``, so what follows holds
for every generation route alike.

One request, in order:
  1. take room for one sequence in this worker, or 429 at once (body unread);
  2. parse (400/413/415), grow the room to its prompts (429), submit (the engine
     may still refuse: 429, or 503 while loading / after its death);
  3. watch the client's socket: a client that leaves aborts its sequences at
     once, queued or running, streaming or not;
  4. plain: wait for the results within what is left of the budget (504 after);
     streamed: wait for the first event first, so an error before any token
     (the budget spent while queued, the engine gone) is still a proper HTTP
     status, then stream.
The budget (``SAGEMAKER_MODEL_SERVER_TIMEOUT``) runs from the request's arrival.
Whatever ends the request gives its room back and stops the watch, once. A
worker about to exit (``drain``) stops what still runs: a 503, or a last
``shutting_down`` event.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

from flask import Response, g, jsonify, request, stream_with_context

from ..config import ServerConfig
from ..engine.seam import RequestStream, ServingEngine
from ..errors import ShuttingDown
from ..schemas.dispatch import Parser, parse_invocation
from ..schemas.sse import SSE_MIMETYPE, sse_headers
from . import drain
from .adapters import chosen_adapter
from .admission import CapacityGate, Deadline, Ticket
from .body import read_json
from .client_watch import ClientWatch
from .loop_admission import TICKET
from .request_log import RequestLog
from .sessions import answer_session_request, session_of, session_request
from .streaming import stream_frames

CLIENT_SOCKET = "gunicorn.socket"  # the connection's socket, in gunicorn's environ


class InFlight:
    """What a submitted request holds: its handle, its room, its socket watch."""

    def __init__(self, handle: RequestStream, ticket: Ticket | None, unwatch: Callable[[], None], forget: Callable):
        self.handle = handle
        self.stop_reason: str | None = None  # set when the server ends it (shutting down)
        self._ticket = ticket
        self._unwatch = unwatch
        self._forget = forget
        self._ended = threading.Event()

    def stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.handle.abort()

    def raise_if_stopped(self) -> None:
        if self.stop_reason is not None:
            raise ShuttingDown(self.stop_reason)

    def end(self) -> None:
        """Idempotent: stop watching the socket and give the room back."""
        if self._ended.is_set():
            return
        self._ended.set()
        self._unwatch()
        self._forget(self)
        if self._ticket is not None:
            self._ticket.release()


class InvocationRoute:
    def __init__(self, engine: ServingEngine, config: ServerConfig, model: Any, gate: CapacityGate | None, watch: ClientWatch,
                 parse: Parser = parse_invocation):
        self._engine = engine
        self._parse = parse
        self._config = config
        self._model = model  # _ModelFacts: the ResponseContext of each answer
        self._gate = gate
        self._watch = watch
        self._flights: set[InFlight] = set()
        self._flights_lock = threading.Lock()
        drain.register(self.stop_all)

    def stop_all(self, reason: str) -> None:
        """End every request still running (the worker is about to exit)."""
        with self._flights_lock:
            flights = list(self._flights)
        for flight in flights:
            flight.stop(reason)

    def __call__(self) -> Response:
        deadline: Deadline = g.deadline
        request_log: RequestLog = g.request_log
        request_log.generation = True
        ticket = request.environ.pop(TICKET, None)  # the HTTP worker's event loop may have admitted it
        if ticket is None and self._gate is not None:
            ticket = self._gate.reserve()  # 429 before the body is read
        try:
            body = read_json(request, self._config.max_payload_bytes)
            session_kind = session_request(body)
            if session_kind is not None:  # open or close a stateful session: no generation
                request_log.generation = False
                if ticket is not None:
                    ticket.release()
                return answer_session_request(self._engine, session_kind, request.headers)
            invocation = self._parse(body, lambda: self._engine.tokenizer)
            if ticket is not None:
                ticket.resize(len(invocation.prompts))
            ctx = self._model.context(request_log.request_id)
            flight = self._submit(invocation, ticket, request_log, deadline)
        except BaseException:
            if ticket is not None:
                ticket.release()
            raise
        try:
            if invocation.stream:
                return self._stream(flight, invocation, ctx, deadline, request_log)
            results = flight.handle.result(timeout_s=deadline.remaining())
            flight.raise_if_stopped()
        except BaseException:
            flight.handle.abort()
            flight.end()
            raise
        flight.end()
        request_log.on_results(results)
        return jsonify(invocation.response(results, ctx))

    def _submit(self, invocation: Any, ticket: Ticket | None, request_log: RequestLog, deadline: Deadline) -> InFlight:
        engine_id = f"{request_log.request_id}-{secrets.token_hex(4)}"  # unique even if a caller reuses ids
        adapter = chosen_adapter(request.headers, invocation.adapter, invocation.model, self._model.base_names())
        request_log.adapter = adapter
        deadline.remaining()  # tokenizing may have spent it
        handle = self._engine.submit(invocation.prompts, invocation.params, request_id=engine_id, adapter=adapter,
                                     session_id=session_of(request.headers))
        unwatch = self._watch.watch(request.environ.get(CLIENT_SOCKET), handle.abort)
        flight = InFlight(handle, ticket, unwatch, self._forget)
        with self._flights_lock:
            self._flights.add(flight)
        return flight

    def _forget(self, flight: InFlight) -> None:
        with self._flights_lock:
            self._flights.discard(flight)

    def _stream(self, flight: InFlight, invocation: Any, ctx: Any, deadline: Deadline, request_log: RequestLog) -> Response:
        events = first_event_received(flight.handle.events(timeout_s=deadline.remaining()))
        flight.raise_if_stopped()
        g.streaming = True
        frames = stream_frames(events, flight, invocation.stream_writer(ctx), deadline, request_log)
        response = Response(stream_with_context(_ending(frames, flight)), mimetype=SSE_MIMETYPE, headers=sse_headers())
        response.call_on_close(lambda: _closed(flight, request_log))
        return response


def first_event_received(events: Iterator[Any]) -> Iterator[Any]:
    """Wait for the first event here, so that an error before it raises (an HTTP status) now."""
    try:
        first = next(events)
    except StopIteration:
        return iter(())
    return itertools.chain([first], events)


def _ending(frames: Iterator[bytes], flight: InFlight) -> Iterator[bytes]:
    try:
        yield from frames
    finally:
        flight.end()


def _closed(flight: InFlight, request_log: RequestLog) -> None:
    """A body closed before its first chunk never runs the generators' cleanup:
    abort and log here too (no-ops once the stream itself ended)."""
    flight.handle.abort()
    flight.end()
    request_log.finish(200, stream_status="closed_unread")
