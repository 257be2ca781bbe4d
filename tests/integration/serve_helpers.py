"""Helpers for tests that run the real server: `serve` as a subprocess, free ports, child processes
(streams are read with ``fixtures.sse_events``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from benchmarks.serve_process import stop_process
from fixtures.ports import free_port

REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "container" / "serve"
STARTUP_S = 180


def wait_for_ping(url: str, timeout_s: float, proc=None, consecutive: int = 10) -> None:
    """Wait for ``consecutive`` 200s in a row: each HTTP worker connects to the
    engine on its own, so with several workers one may be ready before another."""
    deadline = time.monotonic() + timeout_s
    last, streak = None, 0
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode} before /ping said 200")
        try:
            # a new connection each time, so gunicorn may hand it to any worker
            last = requests.get(f"{url}/ping", timeout=2, headers={"Connection": "close"})
            streak = streak + 1 if last.status_code == 200 else 0
            if streak >= consecutive:
                return
        except requests.RequestException as exc:
            last, streak = exc, 0
        time.sleep(0.5 if streak == 0 else 0.05)
    raise AssertionError(f"/ping never said 200 {consecutive} times in a row: {last}")


def started(server: "Server", consecutive: int = 3) -> "Server":
    """``server`` once /ping says 200 ``consecutive`` times; stopped, with its log in the error, if it never does."""
    try:
        wait_for_ping(server.url, STARTUP_S, server.proc, consecutive=consecutive)
    except AssertionError:
        server.stop()
        raise AssertionError(server.log()) from None
    return server


def children_of(pid: int) -> dict[int, str]:
    """{pid: command line} of the direct children of ``pid`` (Linux /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    return out


def serve_env(model_dir: Path, port: int, socket_path: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        LLM_BYOC_MODEL=str(model_dir),
        SAGEMAKER_BIND_TO_PORT=str(port),
        LLM_BYOC_ENGINE_SOCKET=socket_path,
        LLM_BYOC_NUM_THREADS="1",
        LLM_BYOC_LOG_LEVEL="info",
    )
    env.update(extra)
    return env


class Server:
    """The real ``serve`` as a subprocess on a free port (``command`` replaces it, e.g. FAKE_SERVE)."""

    def __init__(self, model_dir: Path, log_path: Path, command: list[str] | None = None, **env: str):
        self.model_dir = model_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        socket_path = os.path.join(tempfile.mkdtemp(prefix="llmb"), "engine.sock")
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            command or [sys.executable, str(SERVE), "serve"],
            env=serve_env(model_dir, self.port, socket_path, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def engine_pid(self) -> int:
        return next(pid for pid, cmd in children_of(self.proc.pid).items() if "engine_server" in cmd or
                    "llm_byoc.engine.server" in cmd)

    def model_worker_pid(self) -> int:
        """The engine's model worker (a multiprocessing child of the engine process)."""
        return next(pid for pid, cmd in children_of(self.engine_pid()).items() if "resource_tracker" not in cmd)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        stop_process(self.proc, 60)
        self._log.close()


def fake_serve(model_dir: Path, log_path: Path, step_delay_s: float = 0.0, **env: str) -> Server:
    """``serve`` with everything real but the model worker (tests/fakes/fake_serve.py):
    ``model_dir`` only lends its tokenizer (384 tokens, as the fake's vocabulary)."""
    command = [sys.executable, "-m", "fakes.fake_serve", "--model", str(model_dir), "--vocab-size", "384",
               "--step-delay", str(step_delay_s)]
    tests = str(REPO / "tests")
    pythonpath = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), tests) if p)
    return Server(model_dir, log_path, command=command, PYTHONPATH=pythonpath, **env)
