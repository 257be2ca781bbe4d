"""Multi-model mode (SAGEMAKER_MULTI_MODEL=true): the SageMaker MME API over an
LRU cache of models, each in its own worker process.

    routes.py         Flask routes of the MME API
    manager.py        LRU cache under a memory budget: lazy load once, evict idle LRU, 507
    store.py          model metadata (llm_byoc_model.json or inferred) and path safety
    model_engine.py   picks the handler for a model's kind; the native backend's factory
    model_process.py  parent side of a model's process (on process.WorkerHandle)
    model_entry.py    child side: load, then answer invokes (process.serve_calls)
    messages.py       typed plain-data messages on the model process's pipe
    handlers/         causal LM (LLMEngine), text (transformers), image (ONNX Runtime)
    demo_repository.py, mobilenet.py   the offline demo repository
    bench.py          cold start and warm overhead figures; ``--backends`` runs
    bench_backends.py the backends side by side (cold load, p50/p99, req/s, memory)

The Triton backend (LLM_BYOC_MULTI_MODEL_BACKEND=triton) lives in ``llm_byoc.triton``.
"""

from __future__ import annotations

__all__ = ["register_multi_model_routes"]


def __getattr__(name: str):
    # Lazy: a worker process imports this package and needs neither Flask nor the routes.
    if name == "register_multi_model_routes":
        from .routes import register_multi_model_routes

        return register_multi_model_routes
    raise AttributeError(name)
