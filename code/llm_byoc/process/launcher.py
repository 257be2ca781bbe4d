"""How a worker process starts: 'spawn' or 'forkserver' (a zygote).

'spawn' starts a fresh Python that imports everything itself: safe anywhere,
and what the engine's own model worker uses. 'forkserver' forks each worker
from one server process (the zygote, started on first use) that has imported
torch, transformers, tokenizers, numpy and Pillow once (``zygote.py``, then
the modules the caller names: the multi-model handlers); a
worker then pays only for reading its weights, and the libraries' pages stay
shared between all workers (counted once, not per model). The zygote never
runs a torch op or starts a thread, so a fork never copies a half-initialised
OpenMP pool or a held lock; each worker sets its own thread counts after the
fork. CUDA must not be initialised before a fork: where the GPU is used
(LLM_BYOC_DEVICE=cuda), 'auto' means 'spawn'.

Both are ``multiprocessing`` contexts: a worker's start arguments (its target
and plain-data settings) are handed over by multiprocessing itself, and every
message after that is a typed JSON frame (``channel.py``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util  # noqa: F401 - see below
from collections.abc import Sequence
from multiprocessing.context import BaseContext

# multiprocessing joins live non-daemon children in an atexit hook that it
# registers when multiprocessing.util is first imported. Importing it here,
# before a model manager registers its own atexit shutdown, makes that shutdown
# run first (atexit is last-in first-out); otherwise the exit would wait
# forever on workers that were never told to stop.

START_METHODS = ("auto", "forkserver", "spawn")
ZYGOTE_MODULE = "llm_byoc.process.zygote"


def resolve(method: str, device: str = "auto") -> str:
    """'auto' -> 'forkserver', or 'spawn' where the GPU is used."""
    if method not in START_METHODS:
        raise ValueError(f"start method must be one of {START_METHODS}, not {method!r}")
    if method == "auto":
        return "spawn" if device == "cuda" else "forkserver"
    return method


def get_context(method: str = "spawn", device: str = "auto", preload: Sequence[str] = ()) -> BaseContext:
    """The context for ``method``; a fork server imports ``zygote.py`` and then ``preload``.

    ``preload`` names the caller's modules (the multi-model handlers): the caller
    knows what its workers run, so ``process/`` stays below the code it starts.
    """
    method = resolve(method, device)
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload([ZYGOTE_MODULE, *preload])
    return context


def zygote_pid() -> int | None:
    """The fork server's pid once it runs (None before, or with 'spawn')."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)
