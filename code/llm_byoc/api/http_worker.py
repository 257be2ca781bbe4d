"""The gunicorn worker: gthread with a thread for every connection it holds.

Stock gthread hands accepted connections to a pool of ``--threads`` threads
through an unbounded queue: with every thread busy streaming, a new
connection (a ``/ping`` included) waits there unseen, and the app's own
limits never see it. This worker keeps gthread's event loop and HTTP
handling and changes five things:

* **admission in the event loop** (``loop_admission.py``): a generation
  request is seen the moment its connection is readable (a new connection
  waits in the poller until its request arrives, not in a thread); room is
  taken there (the app's ``CapacityGate``: sequences, or invokes per model)
  and handed to the serving thread, and beyond capacity the loop writes the
  429 itself, so in a burst a refused client does not wait for the threads of
  the admitted ones;
* **no hidden queue**: the pool has a thread for each of the
  ``max_connections`` (= ``--threads``) connections it admits, so a request
  starts the moment it arrives, and capacity is the app's decision (429),
  never a wait for a thread. Every admitted socket gets kernel send and
  receive timeouts (gunicorn's ``--timeout``), so a client that stalls
  cannot hold its thread forever;
* **beyond the limit, an answer, not a backlog**: up to
  ``--worker-connections - --threads`` more connections are accepted and
  served by a few threads of their own, one request each: ``/ping`` is
  answered as usual, anything else gets an immediate 429
  (``environ[OVER_CAPACITY]`` tells the app), then the connection closes.
  Only past that second limit do connections wait in the kernel's backlog;
* **a clean end at shutdown**: on SIGTERM, requests still running shortly
  before the graceful timeout ends are ended with a last answer (``drain``);
* **gunicorn's own errors are JSON** (a bad request line, a header too large):
  the same ``{"error", "type"}`` shape as the app's, with gunicorn's status
  (its 501 for an unknown transfer coding becomes a 400: bad input is never a 5xx).
"""

from __future__ import annotations

import errno
import gc
import json
import selectors
import socket
import struct
import threading
import time
from concurrent import futures
from functools import partial

from gunicorn import util
from gunicorn.workers.gthread import DEFAULT_WORKER_DATA_TIMEOUT, ThreadWorker, TConn

from ..errors import QueueFull
from ..metrics import observe_request
from . import drain
from .loop_admission import (
    ADMISSION_EXTENSION, TICKET, Draining, invoked_model, peek_route, refusal, send_refusal,
)

OVER_CAPACITY = "llm_byoc.over_capacity"  # environ key: this connection is over the limit
OVERFLOW_THREADS = 4
BURST_WINDOW_S = 0.03  # how long a turn of the loop may go on dispatching a burst before threads are woken
BURST_GAP_S = 0.003  # a burst has ended when nothing more arrives in this long
OVERFLOW_DATA_TIMEOUT_S = 1.0  # an over-limit connection that sends nothing in this long is closed
OVERFLOW_IO_TIMEOUT_S = 2.0  # and one that trickles its request or stalls reading is cut off

_ERROR_TYPES = {
    400: "invalid_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "header_too_large",
}

_thread_state = threading.local()  # per serving thread: over_capacity (an over-limit connection), ticket


class ThreadPerConnectionWorker(ThreadWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_connections = self.cfg.threads
        self.max_keepalived = self.cfg.threads  # kept-alive connections are admitted ones too
        self.overflow_pool: futures.ThreadPoolExecutor | None = None
        self.admission = None  # the app's loop admission, once loaded (None: the app admits alone)
        self.draining = Draining()
        self._admitted: list[TConn] = []  # this turn's connections, handed to threads at its end

    @classmethod
    def check_config(cls, cfg, log):
        pass  # gthread warns that threads == worker-connections leaves no keep-alive: not so here

    def init_process(self):
        self.overflow_pool = futures.ThreadPoolExecutor(OVERFLOW_THREADS, thread_name_prefix="overflow")
        super().init_process()

    def load_wsgi(self):
        super().load_wsgi()
        gc.freeze()  # the app, tokenizer and libraries: never scanned again by the cyclic GC
        self.admission = getattr(self.wsgi, "extensions", {}).get(ADMISSION_EXTENSION)
        self.wsgi = _thread_environ(self.wsgi)

    def accept(self, listener):
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        client_sock.setblocking(True)
        admitted = self.nr_conns <= self.max_connections
        # A client that stops sending its request, or stops reading the answer, is cut off.
        set_io_timeouts(client_sock, self.cfg.timeout if admitted else OVERFLOW_IO_TIMEOUT_S)
        conn = TConn(self.cfg, client_sock, client_addr, listener.getsockname())
        if admitted:
            if self._admits_in_loop() and not _has_data(client_sock):
                self._wait_for_request(conn)
            else:
                self.enqueue_req(conn)
            return
        done = self.overflow_pool.submit(self._serve_overflow, conn)
        done.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    # --- admission in the event loop ------------------------------------------------------------

    def _admits_in_loop(self) -> bool:
        return self.admission is not None and self.alive and not self.cfg.is_ssl

    def _wait_for_request(self, conn: TConn) -> None:
        """A new connection waits in the poller (gunicorn's pending connections) until it is readable."""
        conn.timeout = time.monotonic() + DEFAULT_WORKER_DATA_TIMEOUT + self.cfg.keepalive  # gthread's own total
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn))

    def enqueue_req(self, conn):
        """Every request reaches a thread through here (new, kept-alive and pending connections).
        An admitted generation request's thread is woken only once the turn's events are all
        dispatched (``wait_for_and_dispatch_events``): a woken thread takes the GIL from the loop,
        and in a burst the refusals would wait behind every admitted request's start."""
        buffered = conn.parser is not None and conn.parser.unreader.buf.getvalue()
        route = peek_route(conn.sock) if self._admits_in_loop() and not buffered else None
        try:
            ticket = self.admission.reserve(route) if route is not None else None
        except QueueFull as exc:
            self._refuse(conn, route, exc)
            return
        if ticket is None:
            super().enqueue_req(conn)  # not admitted here (a health check, ...): its thread starts now
            return
        conn.llm_byoc_ticket = ticket
        self._admitted.append(conn)

    def wait_for_and_dispatch_events(self, timeout):
        """One turn: wait for events and dispatch them; then, if generation requests were admitted,
        while more keep arriving (the rest of a burst) dispatch those too, for up to
        ``BURST_WINDOW_S``; only then wake the threads of the requests admitted (a lone request
        waits ``BURST_GAP_S`` for company). A woken thread takes the GIL from this loop, and in a
        burst the loop would see the rest (and refuse what is beyond capacity) only after every
        admitted request's thread had started."""
        try:
            self._dispatch(timeout)
            window_ends = time.monotonic() + BURST_WINDOW_S
            while self._admitted and (left := window_ends - time.monotonic()) > 0:
                if not self._dispatch(min(BURST_GAP_S, left)):
                    break
        finally:
            admitted, self._admitted = self._admitted, []
            for conn in admitted:
                super().enqueue_req(conn)

    def _dispatch(self, timeout: float) -> int:
        """gthread's dispatch of one select; the number of events."""
        try:
            events = self.poller.select(timeout)
            for key, _ in events:
                key.data(key.fileobj)
        except OSError as exc:
            if exc.errno != errno.EINTR:
                raise
            return 0
        return len(events)

    def _refuse(self, conn: TConn, route: str, exc: QueueFull) -> None:
        started = time.perf_counter()
        if not send_refusal(conn.sock, refusal(route, exc)):
            self.nr_conns -= 1
            conn.close()
            return
        rule = "/models/<name>/invoke" if invoked_model(route) else route  # the app's own label
        observe_request(rule, 429, time.perf_counter() - started)
        self.draining.add(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_draining_readable, conn))

    def _on_draining_readable(self, conn: TConn, _sock) -> None:
        if self.draining.readable(conn):  # the client has closed its end
            self.draining.remove(conn)
            self._close_drained(conn)

    def _close_drained(self, conn: TConn) -> None:
        try:
            self.poller.unregister(conn.sock)
        except (OSError, KeyError, ValueError):
            pass
        self.nr_conns -= 1
        conn.close()

    def murder_pending(self):
        super().murder_pending()
        for conn in self.draining.expired():
            self._close_drained(conn)

    def handle(self, conn):
        """The event loop's ticket goes to this request's environ (``_thread_environ``); one the app
        did not take (an error before the route, another route) is given back when it ends."""
        ticket = getattr(conn, "llm_byoc_ticket", None)
        conn.llm_byoc_ticket = None
        _thread_state.ticket = ticket
        try:
            return super().handle(conn)
        finally:
            _thread_state.ticket = None
            if ticket is not None:
                ticket.release()  # idempotent: a no-op once the route has released it

    def _serve_overflow(self, conn: TConn) -> bool:
        """One request, answered at once, then the connection closes (False)."""
        if not conn.wait_for_data(OVERFLOW_DATA_TIMEOUT_S):
            return False
        _thread_state.over_capacity = True
        try:
            self.handle(conn)
        finally:
            _thread_state.over_capacity = False
        return False

    def handle_error(self, req, client, addr, exc):
        """gunicorn picks the status and logs as usual; the body it writes is replaced by our JSON."""
        captured = _CapturedWrite()
        super().handle_error(req, captured, addr, exc)
        status, reason = captured.status()
        if status == 501:  # a transfer coding gunicorn does not know: the client's doing, so a 4xx
            status, reason = 400, "Bad Request"
        error_type = _ERROR_TYPES.get(status, "internal_error")
        message = f"{reason}: {exc}" if error_type != "internal_error" else "internal server error"
        try:
            util.write_nonblock(client, json_error_response(status, reason, message, error_type))
        except Exception:
            self.log.debug("Failed to send error message.")

    def handle_exit(self, sig, frame):
        if self.alive:
            drain.drain_later(self.cfg.graceful_timeout)  # streams still open then end cleanly
        super().handle_exit(sig, frame)

    def handle_quit(self, sig, frame):
        if self.overflow_pool is not None:
            self.overflow_pool.shutdown(wait=False)
        super().handle_quit(sig, frame)


def json_error_response(status: int, reason: str, message: str, error_type: str) -> bytes:
    body = json.dumps({"error": message, "type": error_type}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def set_io_timeouts(sock: socket.socket, seconds: float) -> None:
    """Kernel-level send and receive timeouts: they hold even while gunicorn
    keeps the socket in blocking mode (``settimeout`` would be undone)."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


def _has_data(sock: socket.socket) -> bool:
    """Bytes (or the client's close) are waiting on ``sock``."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True  # a thread meets the error
    return True


def _thread_environ(app):
    """What the worker knows of a request, put into its environ: the event loop's ticket, and
    whether its connection is over the limit."""
    def wsgi(environ, start_response):
        ticket = getattr(_thread_state, "ticket", None)
        if ticket is not None:
            _thread_state.ticket = None
            environ[TICKET] = ticket
        if getattr(_thread_state, "over_capacity", False):
            environ[OVER_CAPACITY] = True
            response = getattr(start_response, "__self__", None)  # gunicorn's Response
            if hasattr(response, "force_close"):
                response.force_close()  # answer "Connection: close"
        return app(environ, start_response)

    return wsgi


class _CapturedWrite:
    """Stands in for the client socket while gunicorn writes its HTML error page."""

    def __init__(self):
        self.data = b""

    def gettimeout(self):
        return 0.0

    def setblocking(self, _flag):
        pass

    def sendall(self, data):
        self.data += data

    def send(self, data):
        self.data += data
        return len(data)

    def status(self) -> tuple[int, str]:
        first = self.data.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        try:
            return int(first[1]), first[2] if len(first) > 2 else ""
        except (IndexError, ValueError):
            return 500, "Internal Server Error"
