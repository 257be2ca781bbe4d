"""Model engine: picks the handler for a model's kind and starts its process.

``create_handler`` runs inside the model process (it imports the heavy
framework only for the kind it needs: a spawned ONNX process never imports
torch; a forked one finds it imported already, shared with the zygote);
``ProcessWorkerFactory`` is what the model manager calls in the server.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from multiprocessing import forkserver

from ..config import EngineConfig
from ..errors import ModelLoadError
from ..process import get_context
from ..process.launcher import resolve
from .store import Framework, ModelSpec, Task
from .model_process import ModelProcess, shared_bytes


def create_handler(spec: ModelSpec, num_threads: int = 0, engine: EngineConfig | None = None):
    """The handler for ``spec``'s task and framework, with its model loaded."""
    kind = (spec.task, spec.framework)
    if kind == (Task.IMAGE_CLASSIFICATION, Framework.ONNX):
        from .handlers.image import ImageClassificationHandler

        return ImageClassificationHandler(spec, num_threads)
    if kind == (Task.TEXT_EMBEDDING, Framework.PYTORCH):
        from .handlers.text import TextEmbeddingHandler

        return TextEmbeddingHandler(spec, num_threads)
    if kind == (Task.TEXT_CLASSIFICATION, Framework.PYTORCH):
        from .handlers.text import TextClassificationHandler

        return TextClassificationHandler(spec, num_threads)
    if kind == (Task.CAUSAL_LM, Framework.PYTORCH):
        from .handlers.causal_lm import CausalLMHandler

        return CausalLMHandler(spec, engine or EngineConfig(model=spec.path))
    raise ModelLoadError(f"{spec.name!r}: no handler for task {spec.task.value} on {spec.framework.value}")


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
            get_context("forkserver")  # sets the preload list
            threading.Thread(target=forkserver.ensure_running, name="zygote-start", daemon=True).start()

    def shared_bytes(self) -> int:
        """Memory every model process shares (the zygote's), counted once in the budget."""
        return shared_bytes()

    def healthy(self) -> bool:
        return True

    def close(self) -> None:
        pass
