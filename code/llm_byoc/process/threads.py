"""Thread settings applied before the heavy libraries load.

In multi-model processes OpenMP worker threads spin only briefly between
parallel regions, then sleep: several model processes share the cores.
Measured on the 2-core dev VM (SmolLM2-135M, 16 concurrent, 2 threads):
torch's default (long spins) collapses to 370-2800 ms per decode step when
another process is busy; OMP_WAIT_POLICY=PASSIVE avoids that but pays a wake-up
per region (engine bench 96-125 tok/s); a bounded spin of 50k iterations keeps
back-to-back regions hot and still yields between steps (120-122 tok/s, ITL
p50 113 ms). libgomp reads this once, when torch loads, so torch is imported
only after it is set. An operator's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "50000"}  # processes that share the cores with others of their kind
# The engine's one model worker: libgomp's own default spin. Its back-to-back 1-row regions stay hot (on the
# 2-core dev VM, SmolLM2-135M fp32, one client: ITL p50 33.0 ms against 42.5 ms at 50k; 16 clients 183 against
# 167 tok/s), and a busy neighbour is met by stepping with fewer threads (process/cpu_share.py), not by sleeping.
WORKER_OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "300000"}
_OPENMP_OVERRIDES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# numpy's OpenBLAS starts its thread pool when numpy is imported. A zygote must
# not hold threads when it forks, and our handlers use numpy only for
# element-wise work (torch and ONNX Runtime bring their own thread pools).
ZYGOTE_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}


def prepare_threads(defaults: dict[str, str] = OPENMP_DEFAULTS) -> None:
    """Apply ``defaults`` (OpenMP settings) unless torch is loaded already or the operator chose."""
    if "torch" in sys.modules:
        log.debug("torch already loaded: OpenMP settings left as they are")
        return
    if any(os.environ.get(name) for name in _OPENMP_OVERRIDES):
        return
    os.environ.update(defaults)


def native_thread_count() -> int:
    """Threads of this process, native ones included (Linux; 1 elsewhere)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def lower_priority(increment: int) -> None:
    """Give this process (and every thread it starts from now on) a nice ``increment``.

    Model processes run below the HTTP worker and the engine, so that their short
    bursts of work (a health check, a 429, writing a token) never wait for a core
    behind a step's OpenMP threads: on the 2-core dev VM, 400 streams sent at once,
    /ping p99 34 ms with the model worker at nice 10 against 59-63 ms at 0
    (``python -m benchmarks.overload``). Called before torch starts its threads,
    which inherit it (on Linux the nice value is per thread).
    """
    if increment > 0:
        os.nice(increment)
