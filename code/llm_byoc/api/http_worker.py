"""The gunicorn worker: gthread with a thread for every connection it holds.

Stock gthread hands accepted connections to a pool of ``--threads`` threads
through an unbounded queue: with every thread busy streaming, a new
connection (a ``/ping`` included) waits there unseen, and the app's own
limits never see it. This worker keeps gthread's event loop and HTTP
handling and changes four things:

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
import json
import socket
import struct
import threading
from concurrent import futures

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker, TConn

from . import drain

OVER_CAPACITY = "llm_byoc.over_capacity"  # environ key: this connection is over the limit
OVERFLOW_THREADS = 4
OVERFLOW_DATA_TIMEOUT_S = 1.0  # an over-limit connection that sends nothing in this long is closed
OVERFLOW_IO_TIMEOUT_S = 2.0  # and one that trickles its request or stalls reading is cut off

_ERROR_TYPES = {
    400: "invalid_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "header_too_large",
}

_overflow = threading.local()  # set on the threads serving over-limit connections


class ThreadPerConnectionWorker(ThreadWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_connections = self.cfg.threads
        self.max_keepalived = self.cfg.threads  # kept-alive connections are admitted ones too
        self.overflow_pool: futures.ThreadPoolExecutor | None = None

    @classmethod
    def check_config(cls, cfg, log):
        pass  # gthread warns that threads == worker-connections leaves no keep-alive: not so here

    def init_process(self):
        self.overflow_pool = futures.ThreadPoolExecutor(OVERFLOW_THREADS, thread_name_prefix="overflow")
        super().init_process()

    def load_wsgi(self):
        super().load_wsgi()
        self.wsgi = _mark_overflow(self.wsgi)

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
            self.enqueue_req(conn)
            return
        done = self.overflow_pool.submit(self._serve_overflow, conn)
        done.add_done_callback(lambda fut: self.method_queue.defer(self.finish_request, conn, fut))

    def _serve_overflow(self, conn: TConn) -> bool:
        """One request, answered at once, then the connection closes (False)."""
        if not conn.wait_for_data(OVERFLOW_DATA_TIMEOUT_S):
            return False
        _overflow.active = True
        try:
            self.handle(conn)
        finally:
            _overflow.active = False
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


def _mark_overflow(app):
    def wsgi(environ, start_response):
        if getattr(_overflow, "active", False):
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
