"""Starts the model worker process and talks to it over a pipe.

The worker loads the model in the background (LOADING), says WorkerReady or
WorkerFailure (READY or DEAD), then answers each StepBatch with one StepOutput.
Only JSON protocol messages cross the pipe (send_bytes/recv_bytes, never pickle).

The process is watched through its sentinel (a handle that becomes readable
when it exits), so a killed worker is noticed at once, whether a step is in
flight or the engine is idle: the pending call raises EngineDead and
``on_dead`` fires once. A worker alive but stuck (no answer to a step within
``config.step_timeout_s``) is killed and treated the same way.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import wait

from .. import protocol
from ..config import EngineConfig
from ..errors import EngineDead, EngineNotReady, ServingError
from ..protocol import (
    EngineState,
    ModelInfo,
    Shutdown,
    StepBatch,
    StepOutput,
    WorkerFailure,
    WorkerReady,
)

log = logging.getLogger(__name__)

WorkerTarget = Callable[..., None]  # (conn, config) -> None, run in the child process


def _default_target() -> WorkerTarget:
    from ..worker.main import run_worker

    return run_worker


class StepFailed(ServingError):
    """The worker could not run one step; it lives on (WorkerFailure, fatal=False)."""

    def __init__(self, failure: WorkerFailure):
        super().__init__(failure.message)
        self.error_type = failure.error_type


class WorkerProcess:
    """One model worker process; ``execute`` is called by one thread at a time."""

    def __init__(
        self,
        config: EngineConfig,
        target: WorkerTarget | None = None,
        on_dead: Callable[[str], None] | None = None,
    ):
        self.config = config
        self._target = target or _default_target()
        self._on_dead = on_dead
        self._lock = threading.Lock()  # one call in flight on the pipe
        self._state_changed = threading.Condition()
        self.state = EngineState.LOADING
        self.detail = "loading the model"
        self.info: ModelInfo | None = None
        self._closing = False
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self._process = ctx.Process(
            target=self._target, args=(child_conn, self.config), name="llm-byoc-worker", daemon=True
        )
        self._process.start()
        child_conn.close()
        self._conn = parent_conn
        threading.Thread(target=self._watch, name="worker-watch", daemon=True).start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    # --- lifecycle -------------------------------------------------------------

    def _watch(self) -> None:
        """Wait for the first message (ready or failed), then for the process to end."""
        try:
            ready = wait([self._conn, self._process.sentinel])
            if self._conn in ready:
                message = protocol.decode(self._conn.recv_bytes())
                if isinstance(message, WorkerReady):
                    self._set_state(EngineState.READY, "ready", message.info)
                elif isinstance(message, WorkerFailure):
                    self._mark_dead(f"the model failed to load: {message.message}")
                else:
                    self._mark_dead(f"unexpected first message {type(message).__name__}")
        except (EOFError, OSError, protocol.ProtocolError) as exc:
            self._mark_dead(f"the model worker failed while loading: {exc}")
        wait([self._process.sentinel])
        self._process.join(timeout=1)
        self._mark_dead(f"the model worker exited (exit code {self._process.exitcode})")

    def _has_exited(self, timeout_s: float) -> bool:
        return bool(wait([self._process.sentinel], timeout_s))

    def _set_state(self, state: EngineState, detail: str, info: ModelInfo | None = None) -> None:
        with self._state_changed:
            self.state, self.detail = state, detail
            if info is not None:
                self.info = info
            self._state_changed.notify_all()

    def _mark_dead(self, detail: str) -> None:
        with self._state_changed:
            if self.state is EngineState.DEAD:
                return
            if self._closing:
                detail = "the engine is shut down"
            self.state, self.detail = EngineState.DEAD, detail
            self._state_changed.notify_all()
        if self._process is not None and not self._has_exited(0):
            self._process.kill()  # a worker that failed must not linger
        if not self._closing:
            log.error("%s", detail)
            if self._on_dead is not None:
                self._on_dead(detail)

    def wait_ready(self, timeout_s: float | None = None) -> ModelInfo:
        """Block until loaded; raises EngineDead, or EngineNotReady after ``timeout_s``."""
        with self._state_changed:
            self._state_changed.wait_for(lambda: self.state is not EngineState.LOADING, timeout_s)
            if self.state is EngineState.READY:
                return self.info
            if self.state is EngineState.DEAD:
                raise EngineDead(self.detail)
        raise EngineNotReady(f"the model is still loading after {timeout_s} s")

    # --- steps -------------------------------------------------------------------

    def execute(self, batch: StepBatch) -> StepOutput:
        """Run one step in the worker; raises EngineDead or StepFailed."""
        with self._lock:
            if self.state is not EngineState.READY:
                raise EngineDead(self.detail)
            try:
                self._conn.send_bytes(protocol.encode(batch))
                ready = wait([self._conn, self._process.sentinel], self.config.step_timeout_s or None)
                if not ready:
                    self._mark_dead(
                        f"the model worker did not finish a step in {self.config.step_timeout_s} s "
                        "(hung); it was stopped"
                    )
                    raise EngineDead(self.detail)
                if self._conn not in ready:
                    raise EOFError("the worker process exited")
                message = protocol.decode(self._conn.recv_bytes())
            except (EOFError, OSError, protocol.ProtocolError) as exc:
                self._mark_dead(f"the model worker died during a step: {exc}")
                raise EngineDead(self.detail) from None
        if isinstance(message, StepOutput):
            return message
        if isinstance(message, WorkerFailure):
            if message.fatal:
                self._mark_dead(f"the model worker failed: {message.message}")
                raise EngineDead(self.detail)
            raise StepFailed(message)
        self._mark_dead(f"unexpected reply {type(message).__name__} to a step")
        raise EngineDead(self.detail)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not within ``timeout_s``.

        Only the watch thread reaps the process (two threads calling ``join``
        race on ``waitpid`` and one then sees a dead process as alive), so
        here we wait on its sentinel, which is ready once the process is gone.
        """
        self._closing = True
        if self._process is None:
            return
        if not self._has_exited(0):
            acquired = self._lock.acquire(timeout=timeout_s)
            try:
                self._conn.send_bytes(protocol.encode(Shutdown()))
            except (OSError, ValueError):
                pass
            finally:
                if acquired:
                    self._lock.release()
            if not self._has_exited(timeout_s):
                log.warning("the model worker did not exit in %.0f s; killing it", timeout_s)
                self._process.kill()
                self._has_exited(5)
        self._mark_dead("the engine is shut down")
        self._conn.close()
