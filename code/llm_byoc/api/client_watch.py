"""Noticing clients that leave while their request waits or streams.

A request waiting for its sequences (queued in the engine, or generating a
long non-streamed answer) writes nothing to its socket, so a client that
closed its connection goes unseen until the answer is ready, and a stream
queued behind others notices only at its first token. ``ClientWatch`` keeps
the sockets of requests in flight in one epoll set, watched by one thread per
process: a client's FIN or RST fires its callback (the request's abort) at
once, wherever the request is. Sockets are registered for hang-ups only
(``EPOLLRDHUP``), never for data, so a client that pipelines its next request
does not wake the watch. A client that half-closes its side (shutdown(SHUT_WR))
while still reading counts as gone: HTTP clients do not do that.

The request thread always unregisters its socket before gunicorn closes it or
takes it back for keep-alive, so a file descriptor number reused by a later
connection is never mistaken for this one; a late event is checked against a
non-blocking peek before anything is aborted. Linux only (epoll); elsewhere
``watch`` does nothing.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_GONE = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)


class ClientWatch:
    def __init__(self):
        self._lock = threading.Lock()
        self._watched: dict[int, _Entry] = {}
        self._epoll = None
        self._wake_r = self._wake_w = -1

    @property
    def supported(self) -> bool:
        return hasattr(select, "epoll")

    def watch(self, sock: socket.socket | None, on_gone: Callable[[], None]) -> Callable[[], None]:
        """Call ``on_gone`` (from the watch thread) if the client hangs up; returns the unwatch."""
        if sock is None or not self.supported:
            return _nothing
        fd = sock.fileno()
        with self._lock:
            self._start()
            self._watched[fd] = _Entry(sock, on_gone)
            self._epoll.register(fd, _GONE | select.EPOLLONESHOT)
        return lambda: self._unwatch(fd, on_gone)

    def _unwatch(self, fd: int, on_gone: Callable[[], None]) -> None:
        with self._lock:
            entry = self._watched.get(fd)
            if entry is None or entry.on_gone is not on_gone:
                return  # fired already (or never registered)
            del self._watched[fd]
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass

    def _start(self) -> None:
        if self._epoll is not None:
            return
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        self._epoll.register(self._wake_r, select.EPOLLIN)
        threading.Thread(target=self._run, name="client-watch", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                events = self._epoll.poll()
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return  # closed
            for fd, _mask in events:
                if fd != self._wake_r:
                    self._fire(fd)

    def _fire(self, fd: int) -> None:
        with self._lock:
            entry = self._watched.get(fd)
            if entry is None:
                return
            if not (_hung_up(entry.sock) or entry.fired_before):
                # The socket is open: a stale event of an earlier connection on this fd number,
                # or a client that sent more and then half-closed (that one fires again: gone).
                entry.fired_before = True
                self._epoll.modify(fd, _GONE | select.EPOLLONESHOT)
                return
            del self._watched[fd]
            try:
                self._epoll.unregister(fd)
            except OSError:
                pass
        try:
            entry.on_gone()
        except Exception:
            log.exception("aborting the request of a client that left failed")

    def __len__(self) -> int:
        with self._lock:
            return len(self._watched)


class _Entry:
    def __init__(self, sock: socket.socket, on_gone: Callable[[], None]):
        self.sock = sock
        self.on_gone = on_gone
        self.fired_before = False


def _hung_up(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing to read
    except OSError:
        return True  # reset, or closed under us


def _nothing() -> None:
    pass
