"""Configuration: frozen dataclasses, validated on construction.

Every environment variable the container understands is named in this module
and read in one ``from_env()`` call at start-up, never at import time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

# --- environment variable names (the one place they are spelled) ----------
# SageMaker hosting contract
ENV_BIND_PORT = "SAGEMAKER_BIND_TO_PORT"
ENV_MAX_PAYLOAD_MB = "SAGEMAKER_MAX_PAYLOAD_IN_MB"
ENV_SERVER_TIMEOUT = "SAGEMAKER_MODEL_SERVER_TIMEOUT"
ENV_SERVER_WORKERS = "SAGEMAKER_MODEL_SERVER_WORKERS"
ENV_MULTI_MODEL = "SAGEMAKER_MULTI_MODEL"
# Engine
ENV_MODEL = "LLM_BYOC_MODEL"
ENV_DTYPE = "LLM_BYOC_DTYPE"
ENV_DEVICE = "LLM_BYOC_DEVICE"
ENV_MAX_NUM_SEQS = "LLM_BYOC_MAX_NUM_SEQS"
ENV_MAX_BATCHED_TOKENS = "LLM_BYOC_MAX_BATCHED_TOKENS"
ENV_MAX_MODEL_LEN = "LLM_BYOC_MAX_MODEL_LEN"
ENV_MAX_NEW_TOKENS = "LLM_BYOC_MAX_NEW_TOKENS_LIMIT"
ENV_MAX_WAITING = "LLM_BYOC_MAX_WAITING"
ENV_NUM_THREADS = "LLM_BYOC_NUM_THREADS"
ENV_LINEAR_BACKEND = "LLM_BYOC_LINEAR_BACKEND"
ENV_STEP_TIMEOUT = "LLM_BYOC_STEP_TIMEOUT"
ENV_TRUST_REMOTE_CODE = "LLM_BYOC_TRUST_REMOTE_CODE"
# Server
ENV_MAX_CONNECTIONS = "LLM_BYOC_MAX_CONNECTIONS"
ENV_ENGINE_SOCKET = "LLM_BYOC_ENGINE_SOCKET"
ENV_GRACEFUL_TIMEOUT = "LLM_BYOC_GRACEFUL_TIMEOUT"
ENV_LOG_LEVEL = "LLM_BYOC_LOG_LEVEL"
# Multi-model
ENV_MODEL_ROOT = "LLM_BYOC_MODEL_ROOT"
ENV_MEMORY_BUDGET = "LLM_BYOC_MEMORY_BUDGET"

DEFAULT_MODEL_DIR = "/opt/ml/model"
DEFAULT_MODEL_ROOT = "/opt/ml/models"

_DTYPES = ("auto", "float32", "float16", "bfloat16")
LINEAR_BACKENDS = ("auto", "onednn", "aten")  # see worker/linear.py
_DEVICES = ("auto", "cpu", "cuda")


class ConfigError(ValueError):
    """A setting that cannot work; raised at start-up with the variable named."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (true/false)")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


@dataclass(frozen=True)
class EngineConfig:
    """Settings of the single-model engine (scheduler, worker, model)."""

    model: str = DEFAULT_MODEL_DIR
    dtype: str = "auto"  # auto: bfloat16/float16 on CUDA, float32 on CPU
    device: str = "auto"  # auto: cuda when available, else cpu
    max_num_seqs: int = 16  # running batch size (KV cache slots)
    max_batched_tokens: int = 256  # tokens computed in one step (prefill chunks + decodes); 256 halves TTFT vs 512 at equal throughput on CPU
    max_model_len: int | None = None  # None: the model's own limit, capped at 4096
    max_new_tokens_limit: int = 2048
    max_waiting: int = 256  # queued sequences beyond this are refused (429)
    num_threads: int = 0  # torch intra-op threads in the worker; 0 = torch default
    linear_backend: str = "auto"  # auto: oneDNN prepacked weights on CPU (fp32/bf16), else F.linear
    step_timeout_s: int = 300  # a worker that does not finish one step in this long is hung: stop it; 0 = never
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        _require(bool(self.model), f"{ENV_MODEL} must name a model source")
        _require(self.dtype in _DTYPES, f"{ENV_DTYPE} must be one of {_DTYPES}, not {self.dtype!r}")
        _require(self.device in _DEVICES, f"{ENV_DEVICE} must be one of {_DEVICES}, not {self.device!r}")
        _require(self.max_num_seqs >= 1, f"{ENV_MAX_NUM_SEQS} must be >= 1")
        _require(self.max_batched_tokens >= 16, f"{ENV_MAX_BATCHED_TOKENS} must be >= 16")
        _require(
            self.max_model_len is None or self.max_model_len >= 16,
            f"{ENV_MAX_MODEL_LEN} must be >= 16",
        )
        _require(self.max_new_tokens_limit >= 1, f"{ENV_MAX_NEW_TOKENS} must be >= 1")
        _require(self.max_waiting >= 0, f"{ENV_MAX_WAITING} must be >= 0")
        _require(self.num_threads >= 0, f"{ENV_NUM_THREADS} must be >= 0")
        _require(self.step_timeout_s >= 0, f"{ENV_STEP_TIMEOUT} must be >= 0")
        _require(
            self.linear_backend in LINEAR_BACKENDS,
            f"{ENV_LINEAR_BACKEND} must be one of {LINEAR_BACKENDS}, not {self.linear_backend!r}",
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "EngineConfig":
        env = os.environ if env is None else env
        max_len = _int(env, ENV_MAX_MODEL_LEN, 0)
        return cls(
            model=env.get(ENV_MODEL) or DEFAULT_MODEL_DIR,
            dtype=env.get(ENV_DTYPE, "auto") or "auto",
            device=env.get(ENV_DEVICE, "auto") or "auto",
            max_num_seqs=_int(env, ENV_MAX_NUM_SEQS, 16),
            max_batched_tokens=_int(env, ENV_MAX_BATCHED_TOKENS, 256),
            max_model_len=max_len or None,
            max_new_tokens_limit=_int(env, ENV_MAX_NEW_TOKENS, 2048),
            max_waiting=_int(env, ENV_MAX_WAITING, 256),
            num_threads=_int(env, ENV_NUM_THREADS, 0),
            linear_backend=env.get(ENV_LINEAR_BACKEND, "auto") or "auto",
            step_timeout_s=_int(env, ENV_STEP_TIMEOUT, 300),
            trust_remote_code=_bool(env, ENV_TRUST_REMOTE_CODE, False),
        )


@dataclass(frozen=True)
class ServerConfig:
    """Settings of the HTTP front end and the `serve` supervisor."""

    host: str = "0.0.0.0"
    port: int = 8080
    workers: int = 1  # gunicorn worker processes (each a thin front end)
    max_connections: int = 1024  # open connections per worker, each with a thread of its own; more is 429
    timeout_s: int = 60  # SAGEMAKER_MODEL_SERVER_TIMEOUT: per-request budget, counted from arrival
    max_payload_bytes: int = 6 * 1024 * 1024
    multi_model: bool = False
    engine_socket: str = ""  # empty: serve makes a private (0700) directory for it
    graceful_timeout_s: int = 30  # SIGTERM: in-flight streams get this long to finish
    log_level: str = "info"

    def __post_init__(self) -> None:
        _require(0 < self.port < 65536, f"{ENV_BIND_PORT} must be a TCP port, not {self.port}")
        _require(self.workers >= 1, f"{ENV_SERVER_WORKERS} must be >= 1")
        _require(self.max_connections >= 1, f"{ENV_MAX_CONNECTIONS} must be >= 1")
        _require(self.timeout_s >= 1, f"{ENV_SERVER_TIMEOUT} must be >= 1")
        _require(self.max_payload_bytes >= 1, f"{ENV_MAX_PAYLOAD_MB} must be >= 1")
        _require(self.graceful_timeout_s >= 0, f"{ENV_GRACEFUL_TIMEOUT} must be >= 0")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ServerConfig":
        env = os.environ if env is None else env
        return cls(
            port=_int(env, ENV_BIND_PORT, 8080),
            workers=_int(env, ENV_SERVER_WORKERS, 1),
            max_connections=_int(env, ENV_MAX_CONNECTIONS, 1024),
            timeout_s=_int(env, ENV_SERVER_TIMEOUT, 60),
            max_payload_bytes=_int(env, ENV_MAX_PAYLOAD_MB, 6) * 1024 * 1024,
            multi_model=_bool(env, ENV_MULTI_MODEL, False),
            engine_socket=env.get(ENV_ENGINE_SOCKET) or "",
            graceful_timeout_s=_int(env, ENV_GRACEFUL_TIMEOUT, 30),
            log_level=(env.get(ENV_LOG_LEVEL) or "info").lower(),
        )


def parse_memory_budget(raw: str, total_bytes: int) -> int:
    """'4GiB', '512MB', '2000000000' (bytes) or '0.6' (a fraction of RAM)."""
    text = raw.strip()
    units = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "b": 1}
    lowered = text.lower()
    for suffix, factor in units.items():
        if lowered.endswith(suffix):
            number = lowered[: -len(suffix)].strip()
            try:
                return int(float(number) * factor)
            except ValueError:
                raise ConfigError(f"{ENV_MEMORY_BUDGET}={raw!r} is not a size") from None
    try:
        value = float(lowered)
    except ValueError:
        raise ConfigError(f"{ENV_MEMORY_BUDGET}={raw!r} is not a size or a fraction") from None
    if 0 < value <= 1:
        return int(value * total_bytes)
    if value > 1:
        return int(value)
    raise ConfigError(f"{ENV_MEMORY_BUDGET}={raw!r} must be positive")


def _total_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


@dataclass(frozen=True)
class MultiModelConfig:
    """Settings of multi-model mode (SAGEMAKER_MULTI_MODEL=true)."""

    model_root: str = DEFAULT_MODEL_ROOT  # every model path must stay under this folder
    memory_budget_bytes: int = 4 * 1024**3
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(max_num_seqs=8))

    def __post_init__(self) -> None:
        _require(self.memory_budget_bytes > 0, f"{ENV_MEMORY_BUDGET} must be positive")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "MultiModelConfig":
        env = os.environ if env is None else env
        budget = parse_memory_budget(env.get(ENV_MEMORY_BUDGET) or "0.6", _total_memory_bytes())
        return cls(
            model_root=env.get(ENV_MODEL_ROOT) or DEFAULT_MODEL_ROOT,
            memory_budget_bytes=budget,
            engine=EngineConfig.from_env(env),
        )
