"""The Triton backend behind our model cache: the manager's worker factory and workers.

The manager (LRU order, the budget, 404/409/507, lazy loads) is the same as
with the native backend; only what a "worker" is changes. Loading writes the
model's folder into the repository and asks Triton to load it (repository
API, explicit model-control mode); a load that fails or does not finish in
``LLM_BYOC_TRITON_LOAD_TIMEOUT`` is unloaded, its folder removed, and is a
500 / 504, so the cache never holds a half-loaded model. A model's memory is
the USS of its stub processes (Python backend), or for Triton's native
backends the server's growth over the load. A model whose stub died is not
``alive``: the manager drops it and the next invoke reloads it. Causal LMs
are served by the native backend (the continuous-batching engine) here too.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ...config import MultiModelConfig
from ...errors import ModelLoadError, RequestTimeout, ServingError
from ..messages import InvokeReply, InvokeRequest
from ..model_engine import ProcessWorkerFactory
from ..store import ModelSpec, Task
from ...process import procfs
from . import repository
from .grpc_api import TritonGrpc
from .kinds import Adapter, model_io
from .server import find_install

log = logging.getLogger(__name__)
LOAD_GRACE_S = 10.0


class TritonModel:
    """One model hosted by Triton, as the manager sees it."""

    def __init__(self, spec: ModelSpec, grpc: TritonGrpc, adapter: Adapter, stubs: list[int],
                 server_growth: int, load_time_s: float, unload_timeout_s: float):
        self.spec = spec
        self.load_time_s = load_time_s
        self._grpc = grpc
        self._adapter = adapter
        self._stubs = {pid: procfs.start_time(pid) for pid in stubs}
        self._server_growth = server_growth  # native backends: what the server grew by at load
        self._unload_timeout_s = unload_timeout_s
        self._stopped = False

    @property
    def pid(self) -> int | None:
        return next(iter(self._stubs), None) or self._grpc.server_pid()

    @property
    def alive(self) -> bool:
        if self._stopped or self._grpc.server_pid() is None:
            return False
        return all(procfs.is_running(pid, started) for pid, started in self._stubs.items())

    def invoke(self, request: InvokeRequest, body: bytes, timeout_s: float = 60.0) -> tuple[InvokeReply, bytes]:
        started = time.perf_counter()
        reply, out = self._adapter.invoke(self._grpc, request, body, min(timeout_s, request.timeout_s))
        return InvokeReply(reply.content_type, compute_s=time.perf_counter() - started), out

    def footprint(self) -> procfs.Footprint:
        """Its stub processes' RSS / PSS / USS."""
        return procfs.tree_footprint([p for p, s in self._stubs.items() if procfs.is_running(p, s)])

    def memory_bytes(self) -> int:
        return self.footprint().uss + self._server_growth

    def stop(self, timeout_s: float = 10.0) -> None:
        """Unload from Triton and wait for its stubs to exit (killed after ``timeout_s``)."""
        if self._stopped:
            return
        self._stopped = True
        self._grpc.unload(self.spec.name, self._unload_timeout_s)
        deadline = time.monotonic() + timeout_s
        while any(procfs.is_running(p, s) for p, s in self._stubs.items()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid, started in self._stubs.items():
            procfs.kill_if_same(pid, started)
        repository.remove_model(Path(self._grpc.config.repository), self.spec.name)


class TritonWorkerFactory:
    def __init__(self, config: MultiModelConfig, grpc: TritonGrpc):
        self.config = config
        self.grpc = grpc
        self.repository = Path(config.triton.repository)
        self.repository.mkdir(parents=True, exist_ok=True)
        self.backends = find_install(config.triton.server).backend_names()
        self.native = ProcessWorkerFactory(config.engine, start_method=config.start_method)

    @classmethod
    def from_config(cls, config: MultiModelConfig) -> "TritonWorkerFactory":
        return cls(config, TritonGrpc(config.triton))

    def __call__(self, spec: ModelSpec):
        if spec.task is Task.CAUSAL_LM:
            return self.native(spec)  # the continuous-batching engine, in its own process
        started = time.monotonic()
        io = model_io(spec)
        backend = repository.choose_backend(spec, self.backends)
        server_before = self._server_uss() if backend != "python" else 0
        repository.write_model(self.repository, spec, io, self.config.triton, backend, self.config.engine.num_threads)
        try:
            # Triton's own stub timeout (the load timeout) answers first, with its reason; this is the backstop.
            self.grpc.load(spec.name, float(self.config.triton.load_timeout_s) + LOAD_GRACE_S)
        except BaseException as exc:
            self._give_up(spec.name)
            if isinstance(exc, RequestTimeout):
                raise RequestTimeout(
                    f"model {spec.name!r} did not load in Triton within {self.config.triton.load_timeout_s} s"
                ) from None
            raise
        stubs = self.grpc.stub_pids(spec.name) if backend == "python" else []
        if backend == "python" and not stubs:
            self._give_up(spec.name)
            raise ModelLoadError(f"model {spec.name!r} loaded in Triton but none of its stub processes is running")
        growth = max(0, self._server_uss() - server_before) if backend != "python" else 0
        log.info("loaded %s in Triton (%s backend, stubs %s)", spec.name, backend, stubs)
        return TritonModel(spec, self.grpc, Adapter(spec, io), stubs, growth, time.monotonic() - started,
                           float(self.config.triton.load_timeout_s))

    def _give_up(self, name: str) -> None:
        """After a failed load: nothing of it may stay (Triton's model, its stubs, its folder)."""
        stubs = {pid: procfs.start_time(pid) for pid in self.grpc.stub_pids(name)}
        self.grpc.unload(name, 10.0)
        for pid, started in stubs.items():
            procfs.kill_if_same(pid, started)
        repository.remove_model(self.repository, name)

    def _server_uss(self) -> int:
        pid = self.grpc.server_pid()
        return procfs.footprint(pid).uss if pid else 0

    def check_health(self) -> None:
        """/ping: 503 while Triton is not ready or gone."""
        self.grpc.check_health()

    def shared_bytes(self) -> int:
        """tritonserver itself and the zygote (the causal LMs'), counted once, outside the budget."""
        pid = self.grpc.server_pid()
        return (procfs.rss(pid) if pid else 0) + self.native.shared_bytes()

    def close(self) -> None:
        try:
            self.grpc.close()
        except ServingError:
            pass
