"""The handler for a model's kind (task and framework), with its model loaded.

Runs inside the model process (``model_entry.py``) and in Triton's Python
backend stub (``triton/kinds.py``). The handler modules import their heavy
framework only when a model loads: a spawned ONNX process never imports torch;
a forked one finds it imported already, shared with the zygote.
"""

from __future__ import annotations

from ...config import EngineConfig
from ...errors import ModelLoadError
from ..store import Framework, ModelSpec, Task
from . import image, text
from .causal_lm import CausalLMHandler


def create_handler(spec: ModelSpec, num_threads: int = 0, engine: EngineConfig | None = None):
    """The handler for ``spec``'s task and framework, with its model loaded."""
    kind = (spec.task, spec.framework)
    if kind == (Task.IMAGE_CLASSIFICATION, Framework.ONNX):
        return image.ImageClassificationHandler(spec, num_threads)
    if kind == (Task.TEXT_EMBEDDING, Framework.PYTORCH):
        return text.TextEmbeddingHandler(spec, num_threads)
    if kind == (Task.TEXT_CLASSIFICATION, Framework.PYTORCH):
        return text.TextClassificationHandler(spec, num_threads)
    if kind == (Task.CAUSAL_LM, Framework.PYTORCH):
        return CausalLMHandler(spec, engine or EngineConfig(model=spec.path))
    raise ModelLoadError(f"{spec.name!r}: no handler for task {spec.task.value} on {spec.framework.value}")
