"""The engine's model executor: its handle on the model worker process, one batched step per call.

The worker loads the model in the background (LOADING), says WorkerReady or
WorkerFailure (READY or DEAD), then answers each StepBatch with one StepOutput
(``worker/main.py``). The process mechanism is the shared one
(``process.WorkerHandle``): a killed worker is noticed at once, whether a step
is in flight or the engine is idle, the pending step raises EngineDead and
``on_dead`` fires once. A worker alive but stuck (no answer to a step within
``config.step_timeout_s``) is killed and treated the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .. import protocol
from ..config import EngineConfig
from ..errors import EngineDead, EngineNotReady, ServingError
from ..process import CallTimeout, WorkerHandle, get_context
from ..protocol import EngineState, ModelInfo, Shutdown, StepBatch, StepOutput, WorkerFailure, WorkerReady

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


class ModelExecutor:
    """The engine's handle on the model worker process; ``execute`` is called by one thread at a time (the step loop)."""

    def __init__(
        self,
        config: EngineConfig,
        target: WorkerTarget | None = None,
        on_dead: Callable[[str], None] | None = None,
    ):
        self.config = config
        self._target = target or _default_target()
        # 'spawn': the engine's worker is one per engine, and may use CUDA.
        self._handle = WorkerHandle(
            "the model worker", protocol, WorkerReady, get_context("spawn"), on_dead=on_dead, daemon=True
        )

    def start(self) -> None:
        self._handle.start(self._target, self.config)

    @property
    def pid(self) -> int | None:
        return self._handle.pid

    @property
    def state(self) -> EngineState:
        return self._handle.state

    @property
    def detail(self) -> str:
        if self._handle.state is EngineState.LOADING:
            return "loading the model"
        return self._handle.detail

    @property
    def info(self) -> ModelInfo | None:
        return self._handle.ready.info if self._handle.ready is not None else None

    def has_exited(self, timeout_s: float = 0) -> bool:
        return self._handle.has_exited(timeout_s)

    def wait_ready(self, timeout_s: float | None = None) -> ModelInfo:
        """Block until loaded; raises EngineDead, or EngineNotReady after ``timeout_s``."""
        try:
            return self._handle.wait_ready(timeout_s).info
        except EngineNotReady:
            raise EngineNotReady(f"the model is still loading after {timeout_s} s") from None

    def execute(self, batch: StepBatch) -> StepOutput:
        """Run one step in the worker; raises EngineDead or StepFailed."""
        timeout_s = self.config.step_timeout_s or None
        try:
            message, _ = self._handle.call(batch, timeout_s=timeout_s)
        except CallTimeout:
            self._handle.kill(
                f"the model worker did not finish a step in {self.config.step_timeout_s} s (hung); it was stopped"
            )
            raise EngineDead(self._handle.detail) from None
        if isinstance(message, StepOutput):
            return message
        if isinstance(message, WorkerFailure):
            if message.fatal:
                self._handle.kill(f"the model worker failed: {message.message}")
                raise EngineDead(self._handle.detail)
            raise StepFailed(message)
        self._handle.kill(f"unexpected reply {type(message).__name__} to a step")
        raise EngineDead(self._handle.detail)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit; kill it if it does not within ``timeout_s``."""
        self._handle.stop(Shutdown(), timeout_s)
