"""The parent's handle on one model's process (what the model manager holds).

Built on ``process.WorkerHandle``: one future per call, and when the process
dies (crash, kill, out of memory) every pending call fails with EngineDead and
``alive`` turns False, so the manager drops it and the next invoke starts a
fresh one. ``stop`` ends the process and its children (the LLM engine's own
worker) and waits for them, so the memory is back before it returns.

Memory: ``memory_bytes`` is the USS of the process tree (pages that are its
own). A process forked from the zygote shares torch's and transformers' pages
with it; those are counted once, as the zygote's (``shared_bytes``).
"""

from __future__ import annotations

import dataclasses
import logging

from ..config import EngineConfig
from ..errors import EngineNotReady, ModelLoadError, RequestTimeout, ServingError
from ..process import CallTimeout, WorkerHandle, WorkerStartFailed, get_context, procfs
from ..process.launcher import resolve, zygote_pid
from ..protocol import Shutdown, WorkerFailure
from . import messages
from .handlers import PRELOADED_HANDLERS
from .model_entry import run_model_process
from .store import ModelSpec

log = logging.getLogger(__name__)


class ModelProcess:
    def __init__(self, spec: ModelSpec, num_threads: int = 0, engine: EngineConfig | None = None,
                 start_method: str = "spawn"):
        self.spec = spec
        self._num_threads = num_threads
        self._engine = engine
        self.start_method = resolve(start_method, engine.device if engine else "auto")
        self._handle = WorkerHandle(
            f"model {spec.name!r}", messages, messages.ModelLoaded,
            get_context(self.start_method, preload=PRELOADED_HANDLERS),
        )
        self.load_time_s = 0.0

    @property
    def pid(self) -> int | None:
        return self._handle.pid

    @property
    def alive(self) -> bool:
        return self._handle.alive

    def start(self, timeout_s: float = 600.0) -> None:
        engine_plain = dataclasses.asdict(self._engine) if self._engine else None
        self._handle.start(
            run_model_process, self.spec.to_plain(), self._num_threads, engine_plain, logging.getLogger().level
        )
        try:
            loaded = self._handle.wait_ready(timeout_s)
        except EngineNotReady:
            self.stop(timeout_s=2.0)
            raise RequestTimeout(f"model {self.spec.name!r} did not load within {timeout_s:.0f} s") from None
        except WorkerStartFailed as exc:
            self.stop(timeout_s=2.0)
            if exc.failure is not None:
                raise ServingError.from_wire(exc.failure.error_type, exc.failure.message) from None
            raise ModelLoadError(
                f"the process of {self.spec.name!r} exited while loading (exit code {self._handle.exitcode})"
            ) from None
        self.load_time_s = loaded.load_time_s

    def invoke(self, request: messages.InvokeRequest, body: bytes,
               timeout_s: float = 60.0) -> tuple[messages.InvokeReply, bytes]:
        try:
            reply, out = self._handle.call(request, body, timeout_s)
        except CallTimeout:
            raise RequestTimeout(f"model {self.spec.name!r} did not answer within {timeout_s:.0f} s") from None
        if isinstance(reply, WorkerFailure):
            raise ServingError.from_wire(reply.error_type, reply.message)
        return reply, out

    def footprint(self) -> procfs.Footprint:
        return self._handle.memory()

    def memory_bytes(self) -> int:
        """What this model holds on its own: the USS of its process tree."""
        return self.footprint().uss

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the process tree and wait for it; idempotent."""
        self._handle.stop(Shutdown(), timeout_s)


def shared_bytes() -> int:
    """The zygote's resident memory: the library pages every forked model shares, counted once
    (read on every multi-model /ping: the cheap counter, not smaps_rollup)."""
    pid = zygote_pid()
    return procfs.rss(pid) if pid else 0
