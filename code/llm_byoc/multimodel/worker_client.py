"""The parent's handle on one model's worker process.

One future per request id, resolved as replies arrive (read by the waiting
callers themselves, see ``_await``). When the worker dies (crash, kill, out of
memory) the pipe closes, every pending future fails with EngineDead and the
handle reports not alive,
so the manager drops it and the next invoke starts a fresh worker. ``stop``
ends the process and its children (the LLM engine's own worker) and joins it,
so its memory is back before it returns.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import multiprocessing
import multiprocessing.util
import os
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import wait

from ..config import EngineConfig
from ..errors import EngineDead, ModelLoadError, QueueFull, RequestTimeout, ServingError
from . import messages as wire
from .store import ModelSpec
from .worker_process import worker_main

log = logging.getLogger(__name__)
# multiprocessing joins live non-daemon children in an atexit hook that it
# registers when multiprocessing.util is first imported. Importing it here,
# before the model manager registers its own atexit shutdown, makes that
# shutdown run first (atexit is last-in first-out); otherwise the exit would
# wait forever on workers that were never told to stop.
_SPAWN = multiprocessing.get_context("spawn")


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(p) for p in handle.read().split())
    except OSError:
        pass
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc)."""
    tree, queue = [], [pid]
    while queue:
        current = queue.pop()
        tree.append(current)
        queue.extend(_children(current))
    return tree


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (tells a reused pid apart)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class ModelWorker:
    max_pending = 256  # requests sent and not answered; more is 429, not an ever-growing queue

    def __init__(self, spec: ModelSpec, num_threads: int = 0, engine: EngineConfig | None = None):
        self.spec = spec
        self._num_threads = num_threads
        self._engine = engine
        self._conn = None
        self._process = None
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()  # guards _pending, _reading, _dead_reason
        self._send_lock = threading.Lock()
        self._reading = False  # a caller is reading the pipe for everyone
        self._dead_reason: str | None = None
        self._descendants: dict[int, int | None] = {}  # pid -> start time, seen while alive
        self.load_time_s = 0.0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        """False as soon as the process has exited, even before the reader sees EOF.

        The sentinel is ready once the process is gone; ``is_alive()`` instead
        calls ``waitpid``, and with several threads asking, the one that loses
        the race to reap a dead child reads it as alive (and sends it work).
        """
        if self._dead_reason is not None or self._process is None:
            return False
        return not _has_exited(self._process)

    def start(self, timeout_s: float = 600.0) -> None:
        parent_conn, child_conn = _SPAWN.Pipe(duplex=True)
        engine_plain = dataclasses.asdict(self._engine) if self._engine else None
        self._process = _SPAWN.Process(
            target=worker_main,
            args=(child_conn, self.spec.to_plain(), self._num_threads, engine_plain, logging.getLogger().level),
            name=f"mme-{self.spec.name}",
        )
        self._process.start()
        child_conn.close()
        self._conn = parent_conn
        try:
            self._await_ready(timeout_s)
        except BaseException:
            self.stop(timeout_s=2.0)
            raise

    def _await_ready(self, timeout_s: float) -> None:
        if not self._conn.poll(timeout_s):
            raise RequestTimeout(f"model {self.spec.name!r} did not load within {timeout_s:.0f} s")
        try:
            header, _ = wire.receive(self._conn)
        except (EOFError, OSError):
            self._process.join(1.0)
            raise ModelLoadError(
                f"worker for {self.spec.name!r} exited while loading (exit code {self._process.exitcode})"
            ) from None
        if isinstance(header, wire.LoadFailed):
            raise ServingError.from_wire(header.error_type, header.message)
        if not isinstance(header, wire.WorkerReady):
            raise ModelLoadError(f"worker for {self.spec.name!r} sent {type(header).__name__} first")
        self.load_time_s = header.load_time_s

    def invoke(self, invocation: wire.Invocation, body: bytes, timeout_s: float = 60.0) -> tuple[wire.Reply, bytes]:
        future: Future = Future()
        with self._cond:
            if self._dead_reason is not None:
                raise EngineDead(self._dead_reason)
            if len(self._pending) >= self.max_pending:
                raise QueueFull(f"model {self.spec.name!r} has {len(self._pending)} requests waiting")
            request_id = next(self._ids)
            self._pending[request_id] = future
        try:
            with self._send_lock:
                wire.send(self._conn, wire.InvokeRequest(request_id, invocation), body)
        except (OSError, ValueError, AttributeError) as exc:
            self._forget(request_id)
            raise EngineDead(f"worker of model {self.spec.name!r} is gone: {exc}") from None
        self._await(future, time.monotonic() + timeout_s)
        if not future.done():
            self._forget(request_id)
            raise RequestTimeout(f"model {self.spec.name!r} did not answer within {timeout_s:.0f} s")
        return future.result()

    def _await(self, future: Future, deadline: float) -> None:
        """Wait for ``future``; whoever waits and finds no reader reads the pipe for everyone.

        No reader thread: a lone caller reads its own reply (one wake-up less
        per request); concurrent callers take turns, each reply going to the
        future of its request id.
        """
        while not future.done() and time.monotonic() < deadline:
            with self._cond:
                if future.done():
                    return
                if self._reading:
                    self._cond.wait(deadline - time.monotonic())
                    continue
                self._reading = True
            try:
                self._read_until(future, deadline)
            finally:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()

    def _read_until(self, future: Future, deadline: float) -> None:
        while not future.done():
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0 or not self._conn.poll(remaining):
                    return
                header, body = wire.receive(self._conn)
            except (EOFError, OSError, ValueError, wire.WireError) as exc:
                self._fail_all(f"worker of model {self.spec.name!r} exited ({type(exc).__name__})")
                return
            self._dispatch(header, body)

    def _dispatch(self, header, body: bytes) -> None:
        with self._cond:
            future = self._pending.pop(getattr(header, "request_id", -1), None)
            if future is None:
                return  # its caller timed out and left
            if isinstance(header, wire.InvokeResult):
                future.set_result((header.reply, body))
            else:
                future.set_exception(ServingError.from_wire(header.error_type, header.message))
            self._cond.notify_all()

    def _forget(self, request_id: int) -> None:
        with self._cond:
            self._pending.pop(request_id, None)

    def _fail_all(self, reason: str) -> None:
        with self._cond:
            if self._dead_reason is None:
                self._dead_reason = reason
            pending, self._pending = self._pending, {}
            for future in pending.values():
                future.set_exception(EngineDead(reason))
            self._cond.notify_all()
        if pending:
            log.warning("%s; failed %d pending request(s)", reason, len(pending))

    def memory_bytes(self) -> int:
        """Resident memory of the worker and its children (the LLM engine's worker)."""
        if self._process is None or _has_exited(self._process):
            return 0
        tree = process_tree(self._process.pid)
        for pid in tree[1:]:
            self._descendants.setdefault(pid, start_time(pid))
        return sum(rss_bytes(pid) for pid in tree)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the process tree and join it; idempotent."""
        process = self._process
        if process is None:
            return
        if not _has_exited(process):
            self.memory_bytes()  # records the current children
        # A sender stuck on a full pipe (a hung worker) must not block the stop: then it is killed.
        if self._send_lock.acquire(timeout=1.0):
            try:
                wire.send(self._conn, wire.Stop())
            except (OSError, ValueError, AttributeError):
                pass
            finally:
                self._send_lock.release()
        process.join(timeout_s)
        if not _has_exited(process):
            log.warning("worker of %s did not stop in %.0f s; killing it", self.spec.name, timeout_s)
            process.kill()
            process.join(5.0)
        for pid, started in self._descendants.items():
            _kill_if_same(pid, started)  # children orphaned by a crash or a kill
        self._fail_all(f"model {self.spec.name!r} was unloaded")
        if self._conn is not None:
            self._conn.close()


def _has_exited(process, timeout_s: float = 0) -> bool:
    return bool(wait([process.sentinel], timeout_s))


def _kill_if_same(pid: int, started: int | None) -> None:
    if started is None or start_time(pid) != started:
        return  # gone already, or the pid now belongs to another process
    try:
        os.kill(pid, 9)
    except OSError:
        pass
