"""Worker processes: one mechanism for every process that serves a model.

    handle.py    parent side: ``WorkerHandle`` starts a process, waits for its typed
                 handshake, keeps one future per call, fails every pending call when
                 the process dies, and stops it (its descendants too)
    entry.py     child side: ``serve_calls``, the answer loop every worker runs
    channel.py   frames on the pipe: (call id, typed JSON message, raw payload); no pickle
    launcher.py  how a process starts: 'spawn' (a fresh Python) or 'forkserver' (forked
                 from a zygote that has imported torch and transformers once)
    zygote.py    what the zygote imports, with the thread rules that make forking safe
                 (the caller names its own modules to preload after it)
    threads.py   OpenMP / BLAS settings applied before torch loads
    procfs.py    /proc: a process tree, its RSS and its own (unique) memory
    privileges.py  who ``serve`` runs as: root given up for the image's user when it can read the model
    supervisor.py  child programs (engine, gunicorn, tritonserver): own process group, die with
                 the parent, SIGTERM then SIGKILL after a grace period

The engine's model worker (``engine.model_executor.ModelExecutor`` + ``worker.main``) and each model of
multi-model mode (``multimodel.ModelProcess`` + ``multimodel.model_entry``) use it.
"""

from .channel import BadFrame, Channel
from .entry import serve_calls
from .handle import CallTimeout, WorkerHandle, WorkerStartFailed
from .launcher import START_METHODS, get_context

__all__ = [
    "BadFrame",
    "CallTimeout",
    "Channel",
    "START_METHODS",
    "WorkerHandle",
    "WorkerStartFailed",
    "get_context",
    "serve_calls",
]
