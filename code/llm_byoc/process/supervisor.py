"""Child programs a parent starts, watches and stops (not workers: they speak no protocol).

Used by ``serve`` for its children (the engine, gunicorn, tritonserver;
``api/serve.py``) and by the Triton wrapper (``multimodel/triton/server.py``).

A child runs in its own process group, so a terminal's Ctrl-C reaches only the
parent, which stops its children in order, and ``os.killpg`` reaches whatever
the child started. It gets SIGTERM when the parent dies (Linux's
PR_SET_PDEATHSIG; the signal follows the *thread* that started the child, so a
child is started from a thread that lives as long as it should). Stopping is
SIGTERM, then SIGKILL after a grace period; the caller learns whether the
child stopped in time, which ``serve`` turns into its exit code.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import subprocess
import time
from collections.abc import Callable
from typing import IO

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
try:  # looked up here: the forked child, before exec, only calls it
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None  # not Linux: children then outlive a killed parent


def _die_with_parent() -> None:
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_child(name: str, command: list[str], env: dict[str, str] | None = None,
                output: int | IO | None = None) -> subprocess.Popen:
    """Start ``command`` in its own process group; ``output`` takes its stdout and stderr (default: ours)."""
    log.info("starting %s: %s", name, " ".join(command))
    stderr = subprocess.STDOUT if output is not None else None
    return subprocess.Popen(command, process_group=0, preexec_fn=_die_with_parent, env=env,
                            stdout=output, stderr=stderr)


def stop_child(name: str, proc: subprocess.Popen, grace_s: float,
               exited: Callable[[], bool] | None = None) -> bool:
    """SIGTERM, then SIGKILL after ``grace_s``; True when the child stopped in time.

    ``exited`` says whether the child is gone (default: ``proc.poll()``); ``serve``
    passes its own, as PID 1 reaps every child itself.
    """
    exited = exited or (lambda: proc.poll() is not None)
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while not exited() and time.monotonic() < deadline:
        time.sleep(0.1)
    if exited():
        return True
    log.error("%s did not stop within %.0f s; killing it", name, grace_s)
    proc.kill()
    while not exited():
        time.sleep(0.05)
    return False
