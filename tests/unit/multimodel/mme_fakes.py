"""An in-process fake of a model worker, for manager and route tests (no processes)."""

from __future__ import annotations

import json
import threading
import time

from llm_byoc.errors import ModelLoadError, ServingError
from llm_byoc.multimodel.messages import InvokeReply, InvokeRequest
from llm_byoc.multimodel.store import ModelSpec


class FakeWorker:
    def __init__(self, spec: ModelSpec, memory_bytes: int, gate: threading.Event | None = None):
        self.spec = spec
        self.load_time_s = 0.0
        self._memory = memory_bytes
        self._alive = True
        self.stopped = False
        self.gate = gate  # invokes block until it is set (a request in flight)
        self.calls = 0

    @property
    def alive(self) -> bool:
        return self._alive

    def die(self) -> None:
        self._alive = False

    def invoke(self, invocation: InvokeRequest, body: bytes, timeout_s: float = 60.0) -> tuple[InvokeReply, bytes]:
        if not self._alive:
            raise ServingError.from_wire("engine_dead", f"worker of {self.spec.name} died")
        if self.gate is not None and not self.gate.wait(timeout_s):
            raise ServingError.from_wire("timeout", "gate never opened")
        self.calls += 1
        return InvokeReply(), json.dumps({"model": self.spec.name, "echo": body.decode()}).encode()

    def memory_bytes(self) -> int:
        return self._memory if self._alive else 0

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stopped = True
        self._alive = False


class FakeFactory:
    """Counts loads per model; ``memory`` per name (default: the spec's size)."""

    def __init__(self, memory: dict[str, int] | None = None, load_delay_s: float = 0.0):
        self.memory = memory or {}
        self.load_delay_s = load_delay_s
        self.loads: list[str] = []
        self.workers: dict[str, FakeWorker] = {}
        self.fail: set[str] = set()
        self.gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def __call__(self, spec: ModelSpec) -> FakeWorker:
        time.sleep(self.load_delay_s)
        with self._lock:
            self.loads.append(spec.name)
        if spec.name in self.fail:
            raise ModelLoadError(f"{spec.name}: corrupt weights")
        worker = FakeWorker(spec, self.memory.get(spec.name, spec.size_bytes), self.gates.get(spec.name))
        self.workers[spec.name] = worker
        return worker
