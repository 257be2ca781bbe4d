"""Helpers for tests that run the real server: `serve` as a subprocess, free ports, SSE over HTTP, child processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
SERVE = REPO / "container" / "serve"
STARTUP_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def sse_payloads(response: requests.Response) -> list:
    """The events of a streamed response, read as they arrive."""
    events = []
    for line in response.iter_lines(decode_unicode=True):
        if not line:
            continue
        assert line.startswith("data: "), line
        data = line[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


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
    """``container/serve serve`` as a subprocess, its output in ``log_path``; ``stop`` sends SIGTERM."""

    def __init__(self, model_dir: Path, log_path: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        socket_path = os.path.join(tempfile.mkdtemp(prefix="llmb"), "engine.sock")
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVE), "serve"],
            env=serve_env(model_dir, self.port, socket_path, **env),
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout_s: float = STARTUP_S) -> "Server":
        """Until /ping says 200; if it never does, stop the server and fail with its log."""
        try:
            wait_for_ping(self.url, timeout_s, self.proc)
        except AssertionError:
            self.stop()
            raise AssertionError(self.log()) from None
        return self

    def engine_pid(self) -> int:
        return next(pid for pid, cmd in children_of(self.proc.pid).items() if "llm_byoc.engine.server" in cmd)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
