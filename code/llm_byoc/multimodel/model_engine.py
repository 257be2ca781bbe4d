"""Model engine: picks the handler for a model's kind and starts its worker process.

``create_handler`` runs inside the worker process (it imports the heavy
framework only for the kind it needs, so an ONNX worker never imports torch);
``ProcessWorkerFactory`` is what the model manager calls in the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import EngineConfig
from ..errors import ModelLoadError
from .store import Framework, ModelSpec, Task
from .worker_client import ModelWorker


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
    """Starts one worker process per model (the manager's ``worker_factory``)."""

    engine: EngineConfig
    load_timeout_s: float = 600.0

    def __call__(self, spec: ModelSpec) -> ModelWorker:
        worker = ModelWorker(spec, num_threads=self.engine.num_threads, engine=self.engine)
        worker.start(timeout_s=self.load_timeout_s)
        return worker
