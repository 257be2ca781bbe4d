"""The parent's handle on one worker process.

Life of a worker: ``start`` (LOADING) -> its first message, the typed handshake:
the ready message (READY) or a WorkerFailure (DEAD) -> calls -> ``stop``. Each
call gets a call id and a Future, resolved by whichever waiting caller is
reading the pipe at the time (no reader thread: a lone caller reads its own
reply, one wake-up less per call; concurrent callers take turns, and each
waits on an event of its own: a reply wakes its caller only, and a reader that
leaves hands the pipe to one other caller, never a wake-up of every waiting
thread for each reply: with 256 invokes pending on one model, the
multi-model overload benchmark's /ping p50 went from 57 to 39 ms). A watch
thread waits on the process's sentinel, so a death is noticed at once, busy
or idle: every pending call fails with EngineDead and ``on_dead`` fires once.
A call that is not answered within its timeout raises CallTimeout; the caller
decides (the engine kills a hung worker, a model call is a 504).

Only the watch thread reaps the process: two threads calling ``join`` race on
``waitpid`` and one then sees a dead process as alive. Everyone else asks the
sentinel, which is ready once the process is gone.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import wait
from multiprocessing.context import BaseContext
from typing import Any

from ..errors import EngineDead, EngineNotReady
from ..protocol import EngineState, WorkerFailure
from . import procfs
from .channel import BadFrame, Channel, Codec

log = logging.getLogger(__name__)


class CallTimeout(Exception):
    """The worker did not answer a call within its timeout (it may still be working)."""


class WorkerStartFailed(EngineDead):
    """The worker died before its handshake; ``failure`` is what it said, if anything."""

    def __init__(self, message: str, failure: WorkerFailure | None = None):
        super().__init__(message)
        self.failure = failure


class WorkerHandle:
    def __init__(
        self,
        name: str,
        codec: Codec,
        ready_type: type,
        context: BaseContext,
        on_dead: Callable[[str], None] | None = None,
        daemon: bool = False,
    ):
        self.name = name
        self._codec = codec
        self._ready_type = ready_type
        self._context = context
        self._on_dead = on_dead
        self._daemon = daemon
        self._cond = threading.Condition()  # guards state, _pending, _wakes, _reading
        self.state = EngineState.LOADING
        self.detail = "loading"
        self.ready: Any = None  # the handshake message
        self.failure: WorkerFailure | None = None
        self._pending: dict[int, Future] = {}
        self._wakes: dict[int, threading.Event] = {}  # call id -> its caller's wake-up (its reply, or its turn)
        self._ids = itertools.count(1)
        self._reading = False
        self._closing = False
        self._process = None
        self._channel: Channel | None = None
        self._watcher: threading.Thread | None = None
        self._descendants: dict[int, int | None] = {}  # pid -> start time, seen while alive
        self._started: int | None = None  # the process's start time (tells a reused pid apart)

    # --- start and handshake ----------------------------------------------------

    def start(self, target: Callable[..., None], *args: Any) -> None:
        """Run ``target(conn, *args)`` in a new process; returns at once (LOADING)."""
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        self._process = self._context.Process(
            target=target, args=(child_conn, *args), name=self.name, daemon=self._daemon
        )
        self._process.start()
        self._started = procfs.start_time(self._process.pid)
        child_conn.close()
        self._channel = Channel(parent_conn, self._codec)
        self._watcher = threading.Thread(target=self._watch, name=f"watch {self.name}", daemon=True)
        self._watcher.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode if self._process else None

    def _watch(self) -> None:
        """Wait for the handshake, then for the process to end; then reap it."""
        try:
            if self._channel.conn in wait([self._channel.conn, self._process.sentinel]):
                _, message, _ = self._channel.receive()
                if isinstance(message, WorkerFailure):
                    self.failure = message
                    self._die(f"{self.name} failed to load: {message.message}")
                elif isinstance(message, self._ready_type):
                    with self._cond:
                        if self.state is EngineState.LOADING:
                            self.state, self.detail, self.ready = EngineState.READY, "ready", message
                        self._cond.notify_all()
                else:
                    self._die(f"{self.name} sent {type(message).__name__} before it was ready")
        except (EOFError, OSError, BadFrame) as exc:
            self._die(f"{self.name} failed while loading: {type(exc).__name__} {exc}")
        wait([self._process.sentinel])
        self._process.join(timeout=1)
        self._die(f"{self.name} exited (exit code {self._process.exitcode})")

    def wait_ready(self, timeout_s: float | None = None) -> Any:
        """The handshake message; WorkerStartFailed, or EngineNotReady after ``timeout_s``."""
        with self._cond:
            self._cond.wait_for(lambda: self.state is not EngineState.LOADING, timeout_s)
            if self.state is EngineState.READY:
                return self.ready
            if self.state is EngineState.DEAD:
                raise WorkerStartFailed(self.detail, self.failure)
        raise EngineNotReady(f"{self.name} is still loading after {timeout_s} s")

    def has_exited(self, timeout_s: float = 0) -> bool:
        return self._process is not None and bool(wait([self._process.sentinel], timeout_s))

    @property
    def alive(self) -> bool:
        """Ready and running; False as soon as the process has exited, even before anyone reads EOF.

        The sentinel of a forked-from-the-zygote process is a pipe the zygote
        closes only after it has reaped the process, a moment later: /proc
        tells at once (an exited process is a zombie or gone).
        """
        if self.state is not EngineState.READY or self.has_exited():
            return False
        return self._started is None or procfs.is_running(self._process.pid, self._started)

    # --- calls ---------------------------------------------------------------------

    def call(self, message: Any, payload: bytes = b"", timeout_s: float | None = None) -> tuple[Any, bytes]:
        """Send ``message`` and wait for its reply: (message, payload).

        EngineDead if the worker is not running or dies meanwhile, CallTimeout after
        ``timeout_s`` (None: no limit). How many calls may wait is the caller's to bound
        (the multi-model routes' per-model gate, ``api/admission.py``).
        """
        future: Future = Future()
        with self._cond:
            if self.state is not EngineState.READY:
                raise EngineDead(self.detail)
            call_id = next(self._ids)
            self._pending[call_id] = future
            wake = self._wakes[call_id] = threading.Event()
        try:
            self._channel.send(call_id, message, payload)
        except (OSError, ValueError, EOFError) as exc:
            self._die(f"{self.name} is gone: {exc}")
            raise EngineDead(self.detail) from None
        self._await(call_id, future, wake, None if timeout_s is None else time.monotonic() + timeout_s)
        if not future.done():
            with self._cond:
                self._pending.pop(call_id, None)
            raise CallTimeout(f"{self.name} did not answer within {timeout_s:g} s")
        return future.result()

    def _await(self, call_id: int, future: Future, wake: threading.Event, deadline: float | None) -> None:
        """Wait for ``future``; whoever waits and finds no reader reads the pipe for everyone."""
        try:
            self._take_turns(call_id, future, wake, deadline)
        finally:
            with self._cond:
                self._wakes.pop(call_id, None)
                if not self._reading:  # (a caller that gives up may just have been handed the pipe)
                    self._hand_over(call_id)

    def _hand_over(self, leaving: int) -> None:
        """The pipe to one other waiting caller (under the lock)."""
        other = next((e for i, e in self._wakes.items() if i != leaving), None)
        if other is not None:
            other.set()

    def _take_turns(self, call_id: int, future: Future, wake: threading.Event, deadline: float | None) -> None:
        while not future.done() and (deadline is None or time.monotonic() < deadline):
            with self._cond:
                if future.done():
                    return
                reading = not self._reading
                if reading:
                    self._reading = True
                else:
                    wake.clear()  # under the lock: a reply or a hand-over from now on sets it
            if not reading:
                wake.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
                continue
            try:
                self._read_until(future, deadline)
            finally:
                with self._cond:
                    self._reading = False
                    self._hand_over(call_id)

    def _read_until(self, future: Future, deadline: float | None) -> None:
        while not future.done():
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                if remaining is not None and remaining <= 0:
                    return
                ready = wait([self._channel.conn, self._process.sentinel], remaining)
                if not ready:
                    return
                if self._channel.conn not in ready:
                    raise EOFError("the process exited")
                call_id, message, payload = self._channel.receive()
            except (EOFError, OSError, BadFrame) as exc:
                self._die(f"{self.name} died during a call ({type(exc).__name__})")
                return
            self._resolve(call_id, message, payload)

    def _resolve(self, call_id: int, message: Any, payload: bytes) -> None:
        with self._cond:
            future = self._pending.pop(call_id, None)
            if future is not None:  # None: its caller timed out and left
                future.set_result((message, payload))
            wake = self._wakes.pop(call_id, None)
            if wake is not None:
                wake.set()

    # --- death and stop ---------------------------------------------------------------

    def _die(self, detail: str) -> None:
        """Mark DEAD (once), fail every pending call, kill the process if it lingers."""
        with self._cond:
            first = self.state is not EngineState.DEAD
            if first:
                self.state = EngineState.DEAD
                self.detail = "the worker was stopped" if self._closing else detail
            pending, self._pending = self._pending, {}
            for future in pending.values():
                future.set_exception(EngineDead(self.detail))
            wakes, self._wakes = self._wakes, {}
            for wake in wakes.values():
                wake.set()
            self._cond.notify_all()
        if not first:
            return
        if self._process is not None and not self.has_exited():
            self._process.kill()  # a worker that failed must not linger
        if pending:
            log.warning("%s; failed %d pending call(s)", self.detail, len(pending))
        if not self._closing:
            log.error("%s", detail)
            if self._on_dead is not None:
                self._on_dead(detail)

    def kill(self, detail: str) -> None:
        """Treat the worker as dead now (a hung worker): kill it and fail its calls."""
        self._die(detail)

    def memory(self) -> procfs.Footprint:
        """RSS / PSS / USS of the process and its descendants (recorded, to be killed on stop)."""
        if self._process is None or self.has_exited():
            return procfs.Footprint()
        tree = procfs.process_tree(self._process.pid)
        for pid in tree[1:]:
            self._descendants.setdefault(pid, procfs.start_time(pid))
        return procfs.tree_footprint(tree)

    def stop(self, shutdown: Any, timeout_s: float = 10.0) -> None:
        """Send ``shutdown``; kill the process if it has not exited within ``timeout_s``. Idempotent.

        Returns once the process is reaped and its descendants (an LLM engine's
        own worker, orphaned by a crash or a kill) are gone.
        """
        self._closing = True
        if self._process is None:
            return
        if not self.has_exited():
            self.memory()  # records the current children
            try:  # a sender stuck on a full pipe (a hung worker) must not block the stop
                self._channel.send(0, shutdown, lock_timeout_s=1.0)
            except (OSError, ValueError):
                pass
            if not self.has_exited(timeout_s):
                log.warning("%s did not stop in %.0f s; killing it", self.name, timeout_s)
                self._process.kill()
                self.has_exited(5)
        self._die("the worker was stopped")
        self._watcher.join(5)
        for pid, started in self._descendants.items():
            procfs.kill_if_same(pid, started)
        self._channel.close()
