"""Our side of Triton's gRPC API (``tritonclient.grpc``, whose calls are thread-safe).

Triton's errors become ours: the server unreachable is EngineDead (503), a
deadline is RequestTimeout (504), a model whose stub died is EngineDead (its
next invoke reloads it), anything else a 500 with Triton's message.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable

import numpy as np

from ...config import TritonConfig
from ...errors import EngineDead, EngineNotReady, ModelLoadError, RequestTimeout, ServingError
from ...process import procfs

log = logging.getLogger(__name__)


def _grpc():
    import tritonclient.grpc as grpcclient

    return grpcclient


def as_serving_error(exc: Exception, what: str) -> ServingError:
    status = str(getattr(exc, "status", lambda: "")() or "")
    text = getattr(exc, "message", lambda: str(exc))() or str(exc)
    if "UNAVAILABLE" in status or "failed to connect" in text.lower():
        return EngineDead(f"{what}: the Triton server is not answering ({text})")
    if "DEADLINE_EXCEEDED" in status or "Deadline Exceeded" in text:
        return RequestTimeout(f"{what}: Triton did not answer in time")
    if "is not healthy" in text:
        return EngineDead(f"{what}: {text}")
    return ServingError(f"{what}: {text}")


class TritonGrpc:
    def __init__(self, config: TritonConfig):
        self.config = config
        self._client = _grpc().InferenceServerClient(f"127.0.0.1:{config.grpc_port}")
        self._server: tuple[int, int | None] | None = None  # pid, start time

    def close(self) -> None:
        self._client.close()

    # --- the server ---------------------------------------------------------------

    def ready(self, timeout_s: float = 2.0) -> bool:
        try:
            return bool(self._client.is_server_ready(client_timeout=timeout_s))
        except Exception:  # noqa: BLE001 - any failure to answer is "not ready"
            return False

    def wait_ready(self, timeout_s: float, still_running: Callable[[], bool] = lambda: True) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready(1.0):
                return
            if not still_running():
                raise EngineDead("tritonserver exited before it was ready")
            time.sleep(0.2)
        raise EngineNotReady(f"tritonserver was not ready within {timeout_s:.0f} s")

    def check_health(self) -> None:
        """EngineDead unless the server answers ready within 1 s (/ping answers within 2 s)."""
        if not self.ready(1.0):
            raise EngineDead("the Triton server is not ready or not answering")

    def server_pid(self) -> int | None:
        """The tritonserver serving our repository (a sibling under ``serve``, or our child)."""
        if self._server is not None and procfs.start_time(self._server[0]) == self._server[1]:
            return self._server[0]
        needle = f"--model-repository={self.config.repository}".encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    args = handle.read().split(b"\0")
            except OSError:
                continue
            if args and args[0].endswith(b"tritonserver") and needle in args:
                self._server = (int(entry), procfs.start_time(int(entry)))
                return self._server[0]
        return None

    def stub_pids(self, model: str) -> list[int]:
        """The Python backend's stub processes of ``model`` (children of the server)."""
        pid = self.server_pid()
        if pid is None:
            return []
        marker = f"{self.config.repository.rstrip('/')}/{model}/".encode()
        stubs = []
        for child in procfs.process_tree(pid)[1:]:
            try:
                with open(f"/proc/{child}/cmdline", "rb") as handle:
                    if marker in handle.read():
                        stubs.append(child)
            except OSError:
                continue
        return stubs

    # --- models --------------------------------------------------------------------

    def load(self, model: str, timeout_s: float) -> None:
        try:
            self._client.load_model(model, client_timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - tritonclient's own exception type
            error = as_serving_error(exc, f"loading {model!r} in Triton")
            if isinstance(error, (EngineDead, RequestTimeout)):
                raise error from None
            raise ModelLoadError(error.message) from None

    def unload(self, model: str, timeout_s: float = 30.0) -> None:
        try:
            self._client.unload_model(model, client_timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001
            log.warning("unloading %s from Triton: %s", model, exc)

    def model_ready(self, model: str) -> bool:
        try:
            return bool(self._client.is_model_ready(model, client_timeout=2.0))
        except Exception:  # noqa: BLE001
            return False

    def infer(self, model: str, inputs: dict[str, np.ndarray], output: str, timeout_s: float) -> np.ndarray:
        return self.infer_many(model, [inputs], output, timeout_s)[0]

    def infer_many(self, model: str, requests: list[dict[str, np.ndarray]], output: str,
                   timeout_s: float) -> list[np.ndarray]:
        """Send every request at once (Triton's dynamic batcher may run them as one batch)."""
        grpc = _grpc()
        done = threading.Condition()
        results: list = [None] * len(requests)

        def finished(index: int, result, error) -> None:
            with done:
                results[index] = (result, error)
                done.notify_all()

        for index, inputs in enumerate(requests):
            tensors = []
            for name, array in inputs.items():
                tensor = grpc.InferInput(name, list(array.shape), _DTYPES[array.dtype.name])
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            self._client.async_infer(
                model, tensors, functools.partial(finished, index),
                outputs=[grpc.InferRequestedOutput(output)], client_timeout=timeout_s,
            )
        with done:
            if not done.wait_for(lambda: all(r is not None for r in results), timeout_s + 5):
                raise RequestTimeout(f"model {model!r}: Triton did not answer in time")
        arrays = []
        for result, error in results:
            if error is not None:
                raise as_serving_error(error, f"model {model!r}")
            arrays.append(result.as_numpy(output))
        return arrays

    def statistics(self, model: str) -> dict:
        """Triton's counters for ``model``: inferences and executions (batches) run."""
        stats = self._client.get_inference_statistics(model, as_json=True)
        model_stats = (stats.get("model_stats") or [{}])[0]
        return {
            "inference_count": int(model_stats.get("inference_count", 0)),
            "execution_count": int(model_stats.get("execution_count", 0)),
        }


_DTYPES = {"float32": "FP32", "uint8": "UINT8", "int64": "INT64", "int32": "INT32", "float16": "FP16"}
