"""Multi-model mode (SAGEMAKER_MULTI_MODEL=true): the SageMaker MME API over an
LRU cache of models, each in its own worker process.

    manager.py        LRU cache under a memory budget: lazy load once, evict idle LRU, 507
    store.py          model metadata (llm_byoc_model.json or inferred) and path safety
    model_engine.py   the native backend's factory: a process per model
    model_process.py  parent side of a model's process (on process.WorkerHandle)
    model_entry.py    child side: load, then answer invokes (process.serve_calls)
    messages.py       typed plain-data messages on the model process's pipe
    handlers/         causal LM (LLMEngine), text (transformers), image (ONNX Runtime);
                      by_kind.py picks one for a model's kind, inside its process
    triton/           the Triton backend (LLM_BYOC_MULTI_MODEL_BACKEND=triton)
    demo_repository.py, mobilenet.py   the offline demo repository

The HTTP routes of the MME API are ``llm_byoc.api.multimodel_routes``; nothing
here imports Flask or ``llm_byoc.api``. Benchmarks: ``benchmarks.multimodel``.
"""
