"""Pieces the overload, soak and disconnect benchmarks share: the real ``serve``
on a loopback port, a ``/ping`` prober in a process of its own, and idle
keep-alive connections that hold the server's connection slots.

Everything talks to 127.0.0.1 only and is bounded in time.
"""

from __future__ import annotations

import datetime
import http.client
import multiprocessing
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from llm_byoc.process.procfs import footprint, process_tree
from llm_byoc.bench.report import write_json
from llm_byoc.bench.stats import distribution

SERVE = [sys.executable, "-m", "llm_byoc.api.serve"]
PING_TIMEOUT_S = 30.0
RESULTS = Path("benchmarks/results")


def save_result(kind: str, args, **figures) -> Path:
    """benchmarks/results/KIND-LABEL.json (or ``args.out``): the settings, the figures, the machine's load."""
    out = args.out or RESULTS / f"{kind}-{args.label}.json"
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "out"}
    write_json({
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "loadavg_at_end": os.getloadavg(),  # other work on the machine skews every figure
        "config": config,
        **figures,
    }, out)
    print(f"wrote {out}")
    return out


def stop_process(proc: subprocess.Popen, timeout_s: float, log=None) -> int:
    """SIGTERM, then SIGKILL after ``timeout_s``; closes the process's ``log`` file if given; its exit status.
    The benchmarks' servers and the integration tests' stop their processes with this."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if log is not None:
        log.close()
    return proc.returncode


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """``serve`` as a child process; ``code_dir`` runs another checkout's code (a baseline)."""

    def __init__(self, env: dict[str, str], log_path: Path, code_dir: str | None = None, python: str | None = None):
        """``python``: the interpreter to run it with (another venv, e.g. one with vLLM)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = dict(os.environ, SAGEMAKER_BIND_TO_PORT=str(self.port), **env)
        if code_dir:
            full_env["PYTHONPATH"] = code_dir
            # an older checkout names its socket in /tmp; give it a private one
            full_env.setdefault("LLM_BYOC_ENGINE_SOCKET", os.path.join(tempfile.mkdtemp(prefix="llmb-"), "e.sock"))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        command = [python, *SERVE[1:]] if python else SERVE
        self.proc = subprocess.Popen(command, env=full_env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 300.0) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if ping_once("127.0.0.1", self.port, 2.0)[0] == 200:
                    return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"/ping never said 200 within {timeout_s:.0f} s; see {self.log_path}")

    def memory(self) -> dict[str, int]:
        """RSS of every process of the server, by command and pid."""
        out = {}
        for pid in process_tree(self.proc.pid):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            out[f"{_role(cmd)}[{pid}]"] = footprint(pid).rss
        return out

    def stop(self, timeout_s: float = 90.0) -> int:
        return stop_process(self.proc, timeout_s, self._log)


def _role(cmd: str) -> str:
    if "llm_byoc.engine.server" in cmd:
        return "engine"
    if "gunicorn" in cmd:
        return "gunicorn"
    if "resource_tracker" in cmd:
        return "resource-tracker"
    if "multiprocessing" in cmd or "spawn_main" in cmd:
        return "model-worker"
    if "llm_byoc.api.serve" in cmd or "container/serve" in cmd:
        return "serve"
    return cmd.split(" ", 1)[0].rsplit("/", 1)[-1]


def ping_once(host: str, port: int, timeout_s: float) -> tuple[int, float]:
    """(status, seconds) of one GET /ping on a fresh connection."""
    return _request_once(host, port, "GET", "/ping", None, timeout_s)


def _request_once(host: str, port: int, method: str, path: str, body: bytes | None, timeout_s: float) -> tuple[int, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        headers = {"Connection": "close", "Content-Type": "application/json"}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        conn.close()


def _probe_loop(port: int, request: tuple, interval_s: float, timeout_s: float, stop, out) -> None:
    samples = []  # (seconds since start, latency, status or error)
    start = time.monotonic()
    while not stop.is_set():
        sent = time.monotonic()
        try:
            status, latency = _request_once("127.0.0.1", port, *request, timeout_s)
        except OSError as exc:  # a timeout too: no answer within timeout_s
            status, latency = type(exc).__name__, time.monotonic() - sent
        samples.append((sent - start, latency, status))
        stop.wait(max(0.0, interval_s - (time.monotonic() - sent)))
    out.send(samples)
    out.close()


class Probe:
    """One request every ``interval_s`` from a separate process (the load generator's
    own threads must not delay it), each on a fresh connection as a health checker's.

    ``Probe.ping(port)``: ``GET /ping``. ``Probe.invoke(port, body)``: a small
    ``POST`` that meets whatever state the server is in (a 429 when full); one
    not answered within ``timeout_s`` is given up (the client leaves).
    """

    def __init__(self, port: int, request: tuple, interval_s: float, timeout_s: float = PING_TIMEOUT_S):
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._recv, send = context.Pipe(duplex=False)
        self._timeout_s = timeout_s
        args = (port, request, interval_s, timeout_s, self._stop, send)
        self._proc = context.Process(target=_probe_loop, args=args, daemon=True)
        self.samples: list[tuple[float, float, object]] = []

    @classmethod
    def ping(cls, port: int, interval_s: float = 0.1) -> Probe:
        return cls(port, ("GET", "/ping", None), interval_s)

    @classmethod
    def invoke(cls, port: int, path: str, body: bytes, interval_s: float = 0.1, timeout_s: float = 2.0) -> Probe:
        return cls(port, ("POST", path, body), interval_s, timeout_s)

    def __enter__(self) -> Probe:
        self._proc.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._recv.poll(self._timeout_s + 5):
            self.samples = self._recv.recv()
        self._proc.join(5)

    def latencies(self, status: object = None) -> list[float]:
        return [latency for _, latency, s in self.samples if status is None or s == status]

    def summary(self) -> dict:
        latencies = self.latencies()
        dist = distribution(latencies).to_dict()
        return {
            "count": len(self.samples),
            "by_status": dict(Counter(str(s[2]) for s in self.samples)),
            "not_200": sum(1 for s in self.samples if s[2] != 200),
            "over_2s": sum(1 for latency in latencies if latency > 2.0),
            **{k: dist[k] for k in ("p50", "p90", "p99", "max", "mean")},
        }


class ConnectionHolders:
    """``count`` keep-alive connections, each asking ``GET /ping`` every ``every_s``
    (inside the server's keep-alive window) so the server keeps them open."""

    REQUEST = b"GET /ping HTTP/1.1\r\nHost: bench\r\n\r\n"

    def __init__(self, port: int, count: int, every_s: float = 4.0):
        self._port = port
        self._count = count
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="holders", daemon=True)
        self.open_counts: list[int] = []
        self.answers = 0
        self.reconnects = 0

    def __enter__(self) -> ConnectionHolders:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _connect(self, selector: selectors.BaseSelector, stagger_s: float) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self._port), timeout=5)
        except OSError:
            self.reconnects += 1
            return
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, {"due": time.monotonic() + stagger_s, "buf": b""})

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for i in range(self._count):
            self._connect(selector, stagger_s=self._every_s * i / self._count)
        next_count = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            for key in list(selector.get_map().values()):
                if key.data["due"] <= now:
                    self._send(selector, key)
            for key, _ in selector.select(timeout=0.05):
                self._read(selector, key)
            missing = self._count - len(selector.get_map())
            for _ in range(missing):
                self.reconnects += 1
                self._connect(selector, stagger_s=self._every_s)
            if now >= next_count:
                self.open_counts.append(len(selector.get_map()))
                next_count = now + 1.0
        for key in list(selector.get_map().values()):
            selector.unregister(key.fileobj)
            key.fileobj.close()

    def _send(self, selector, key) -> None:
        key.data["due"] = time.monotonic() + self._every_s
        try:
            key.fileobj.send(self.REQUEST)
        except OSError:
            self._drop(selector, key)

    def _read(self, selector, key) -> None:
        try:
            data = key.fileobj.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(selector, key)
            return
        key.data["buf"] += data
        while b"\r\n\r\n" in key.data["buf"]:  # the ping answers are small, one per request
            head, rest = key.data["buf"].split(b"\r\n\r\n", 1)
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            if len(rest) < length:
                break
            key.data["buf"] = rest[length:]
            self.answers += 1

    def _drop(self, selector, key) -> None:
        selector.unregister(key.fileobj)
        key.fileobj.close()

    def summary(self) -> dict:
        counts = self.open_counts or [0]
        return {"asked": self._count, "open_min": min(counts), "open_max": max(counts),
                "answers": self.answers, "reconnects": self.reconnects}
