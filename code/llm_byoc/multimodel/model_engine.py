"""The native backend's worker factory: one process per model.

``ProcessWorkerFactory`` is what the model manager calls in the server; the
handler for a model's kind is picked inside that process
(``handlers/by_kind.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from multiprocessing import forkserver

from ..config import EngineConfig
from ..process import get_context
from ..process.launcher import resolve
from .handlers import PRELOADED_HANDLERS
from .model_process import ModelProcess, shared_bytes
from .store import ModelSpec


@dataclass(frozen=True)
class ProcessWorkerFactory:
    """Starts one process per model (the manager's ``worker_factory``): the native backend."""

    engine: EngineConfig
    load_timeout_s: float = 600.0
    start_method: str = "auto"  # forkserver (from the zygote) or spawn; see process/launcher.py

    def __call__(self, spec: ModelSpec) -> ModelProcess:
        worker = ModelProcess(spec, self.engine.num_threads, self.engine, self.start_method)
        worker.start(timeout_s=self.load_timeout_s)
        return worker

    def warm_up(self) -> None:
        """Start the zygote now, in the background, so that the first load does not wait for it."""
        if resolve(self.start_method, self.engine.device) == "forkserver":
            get_context("forkserver", preload=PRELOADED_HANDLERS)  # sets the preload list
            threading.Thread(target=forkserver.ensure_running, name="zygote-start", daemon=True).start()

    def shared_bytes(self) -> int:
        """Memory every model process shares (the zygote's), counted once in the budget."""
        return shared_bytes()

    def healthy(self) -> bool:
        return True

    def close(self) -> None:
        pass
