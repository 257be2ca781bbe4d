"""Configuration: frozen dataclasses, validated on construction.

Every environment variable the container understands is named in this module
and read in one ``from_env()`` call at start-up, never at import time. The
other images' names (TGI's, LMI's, vLLM's ``SM_VLLM_*``) are named here too;
``serve`` writes them under ours before anything reads them (config_aliases.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from .memory import container_memory

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
ENV_PREFILL_CHUNK_TOKENS = "LLM_BYOC_PREFILL_CHUNK_TOKENS"
ENV_MAX_MODEL_LEN = "LLM_BYOC_MAX_MODEL_LEN"
ENV_MAX_INPUT_TOKENS = "LLM_BYOC_MAX_INPUT_TOKENS"
ENV_MODEL_REVISION = "LLM_BYOC_MODEL_REVISION"
ENV_DOWNLOAD_DIR = "LLM_BYOC_DOWNLOAD_DIR"
ENV_MAX_NEW_TOKENS = "LLM_BYOC_MAX_NEW_TOKENS_LIMIT"
ENV_MAX_WAITING = "LLM_BYOC_MAX_WAITING"
ENV_NUM_THREADS = "LLM_BYOC_NUM_THREADS"
ENV_LINEAR_BACKEND = "LLM_BYOC_LINEAR_BACKEND"
ENV_DECODER = "LLM_BYOC_DECODER"
ENV_STEP_TIMEOUT = "LLM_BYOC_STEP_TIMEOUT"
ENV_WORKER_NICE = "LLM_BYOC_WORKER_NICE"
ENV_THREADS_ADAPT = "LLM_BYOC_THREADS_ADAPT"
ENV_TRUST_REMOTE_CODE = "LLM_BYOC_TRUST_REMOTE_CODE"
ENV_KV_CACHE_MEMORY = "LLM_BYOC_KV_CACHE_MEMORY"
ENV_KV_CACHE_COMMIT = "LLM_BYOC_KV_CACHE_COMMIT"
ENV_KV_CACHE_HUGE_PAGES = "LLM_BYOC_KV_CACHE_HUGE_PAGES"
ENV_GPU_MEMORY_UTILIZATION = "LLM_BYOC_GPU_MEMORY_UTILIZATION"
ENV_KV_BLOCK_SIZE = "LLM_BYOC_KV_BLOCK_SIZE"
ENV_PREFIX_CACHING = "LLM_BYOC_PREFIX_CACHING"
ENV_MAX_LORAS = "LLM_BYOC_MAX_LORAS"
ENV_MAX_CPU_LORAS = "LLM_BYOC_MAX_CPU_LORAS"
ENV_MAX_LORA_RANK = "LLM_BYOC_MAX_LORA_RANK"
ENV_ADAPTERS_DIR = "LLM_BYOC_ADAPTERS_DIR"
ENV_ADAPTERS_OPTIONAL = "LLM_BYOC_ADAPTERS_OPTIONAL"
ENV_ADAPTER_ROOTS = "LLM_BYOC_ADAPTER_ROOTS"
ENV_SESSION_KV_SHARE = "LLM_BYOC_SESSION_KV_SHARE"
ENV_SESSION_TTL = "LLM_BYOC_SESSION_TTL"
# Which engine runs the model (engine/engine_choice.py), and vLLM's own settings
ENV_ENGINE = "LLM_BYOC_ENGINE"
ENV_TENSOR_PARALLEL_SIZE = "LLM_BYOC_TENSOR_PARALLEL_SIZE"
ENV_PIPELINE_PARALLEL_SIZE = "LLM_BYOC_PIPELINE_PARALLEL_SIZE"
ENV_QUANTIZATION = "LLM_BYOC_QUANTIZATION"
ENV_SPECULATIVE_CONFIG = "LLM_BYOC_SPECULATIVE_CONFIG"
ENV_SPECULATIVE = "LLM_BYOC_SPECULATIVE"
ENV_NUM_SPECULATIVE_TOKENS = "LLM_BYOC_NUM_SPECULATIVE_TOKENS"
ENV_NGRAM_MIN = "LLM_BYOC_NGRAM_MIN"
ENV_NGRAM_MAX = "LLM_BYOC_NGRAM_MAX"
ENV_SPECULATIVE_MAX_NUM_SEQS = "LLM_BYOC_SPECULATIVE_MAX_NUM_SEQS"
ENV_SPECULATIVE_MIN_ACCEPTANCE = "LLM_BYOC_SPECULATIVE_MIN_ACCEPTANCE"
ENV_DRAFT_MODEL = "LLM_BYOC_DRAFT_MODEL"
ENV_VLLM_ENGINE_ARGS = "LLM_BYOC_VLLM_ENGINE_ARGS"
ENV_VLLM_ENABLE_LORA = "LLM_BYOC_VLLM_ENABLE_LORA"
# Server
ENV_MAX_CONNECTIONS = "LLM_BYOC_MAX_CONNECTIONS"
ENV_ENGINE_SOCKET = "LLM_BYOC_ENGINE_SOCKET"
ENV_GRACEFUL_TIMEOUT = "LLM_BYOC_GRACEFUL_TIMEOUT"
ENV_LOG_LEVEL = "LLM_BYOC_LOG_LEVEL"
ENV_SERVED_MODEL_NAME = "LLM_BYOC_SERVED_MODEL_NAME"
ENV_REASONING_PARSER = "LLM_BYOC_REASONING_PARSER"  # auto | none: reasoning_content for <think> models
ENV_TOOL_CALL_PARSER = "LLM_BYOC_TOOL_CALL_PARSER"  # auto | json | hermes | llama3 | mistral
REASONING_PARSERS = ("auto", "none")
TOOL_CALL_PARSERS = ("auto", "json", "hermes", "llama3", "mistral")
# Multi-model
ENV_MODEL_ROOT = "LLM_BYOC_MODEL_ROOT"
ENV_MEMORY_BUDGET = "LLM_BYOC_MEMORY_BUDGET"
ENV_MULTI_MODEL_BACKEND = "LLM_BYOC_MULTI_MODEL_BACKEND"
ENV_WORKER_START = "LLM_BYOC_WORKER_START"
# Multi-model on Triton (LLM_BYOC_MULTI_MODEL_BACKEND=triton)
ENV_TRITON_SERVER = "LLM_BYOC_TRITON_SERVER"
ENV_TRITON_REPOSITORY = "LLM_BYOC_TRITON_REPOSITORY"
ENV_TRITON_HTTP_PORT = "LLM_BYOC_TRITON_HTTP_PORT"
ENV_TRITON_GRPC_PORT = "LLM_BYOC_TRITON_GRPC_PORT"
ENV_TRITON_LOAD_TIMEOUT = "LLM_BYOC_TRITON_LOAD_TIMEOUT"
ENV_TRITON_MAX_BATCH_SIZE = "LLM_BYOC_TRITON_MAX_BATCH_SIZE"
ENV_TRITON_BATCH_DELAY_US = "LLM_BYOC_TRITON_BATCH_DELAY_US"
ENV_TRITON_INSTANCES = "LLM_BYOC_TRITON_INSTANCES"
# Other images' names for the same settings (config_aliases.py maps each onto ours)
# Hugging Face TGI
ENV_HF_MODEL_ID = "HF_MODEL_ID"
ENV_HF_MODEL_REVISION = "HF_MODEL_REVISION"
ENV_HF_TOKEN = "HF_TOKEN"  # read by the hub download only, never logged
ENV_HF_TOKEN_OLD = "HUGGING_FACE_HUB_TOKEN"
ENV_SM_NUM_GPUS = "SM_NUM_GPUS"
ENV_TGI_MAX_INPUT_TOKENS = "MAX_INPUT_TOKENS"
ENV_TGI_MAX_INPUT_LENGTH = "MAX_INPUT_LENGTH"
ENV_TGI_MAX_TOTAL_TOKENS = "MAX_TOTAL_TOKENS"
ENV_TGI_MAX_BATCH_PREFILL_TOKENS = "MAX_BATCH_PREFILL_TOKENS"
ENV_TGI_MAX_BATCH_TOTAL_TOKENS = "MAX_BATCH_TOTAL_TOKENS"
ENV_HF_MODEL_QUANTIZE = "HF_MODEL_QUANTIZE"
ENV_HF_MODEL_TRUST_REMOTE_CODE = "HF_MODEL_TRUST_REMOTE_CODE"
# AWS LMI (DJL Serving)
ENV_OPTION_MODEL_ID = "OPTION_MODEL_ID"
ENV_OPTION_TENSOR_PARALLEL_DEGREE = "OPTION_TENSOR_PARALLEL_DEGREE"
ENV_OPTION_MAX_ROLLING_BATCH_SIZE = "OPTION_MAX_ROLLING_BATCH_SIZE"
ENV_OPTION_MAX_MODEL_LEN = "OPTION_MAX_MODEL_LEN"
ENV_OPTION_DTYPE = "OPTION_DTYPE"
ENV_OPTION_ENABLE_LORA = "OPTION_ENABLE_LORA"
ENV_OPTION_ROLLING_BATCH = "OPTION_ROLLING_BATCH"
# vLLM's SageMaker entrypoint: SM_VLLM_<ARG> is the engine argument <arg>
ENV_SM_VLLM_PREFIX = "SM_VLLM_"

DEFAULT_MODEL_DIR = "/opt/ml/model"
DEFAULT_ADAPTERS_DIR = "/opt/ml/model/adapters"
DEFAULT_ADAPTER_ROOTS = ("/opt/ml",)
DEFAULT_MODEL_ROOT = "/opt/ml/models"
DEFAULT_DOWNLOAD_DIR = "/tmp/llm_byoc/model"

_DTYPES = ("auto", "float32", "float16", "bfloat16")
LINEAR_BACKENDS = ("auto", "packed", "onednn", "aten")  # see worker/linear.py
NATIVE_QUANTIZATIONS = ("int8",)  # LLM_BYOC_QUANTIZATION for our engine (worker/quant.py); vLLM's names are vLLM's
DECODER_PATHS = ("auto", "native", "generic")  # auto: native where the family has one (worker/models/__init__.py)
_DEVICES = ("auto", "cpu", "cuda")
MULTI_MODEL_BACKENDS = ("native", "triton")
ENGINES = ("auto", "native", "vllm")  # auto: vllm where a CUDA device is present and vLLM is installed
WORKER_START_METHODS = ("auto", "forkserver", "spawn")  # see process/launcher.py


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


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None


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


KV_COMMIT_MODES = ("ahead", "load", "lazy")


def _kv_commit(value: str | None, default: str) -> str:
    """``LLM_BYOC_KV_CACHE_COMMIT``: a mode, or the booleans it took before ``ahead`` (true: load, false: lazy)."""
    value = (value or "").strip().lower()
    if not value:
        return default
    return {"true": "load", "1": "load", "yes": "load", "false": "lazy", "0": "lazy", "no": "lazy"}.get(value, value)


def _json_object(name: str, text: str) -> dict | None:
    """A setting that holds a JSON object ("" is None); ConfigError naming it otherwise."""
    if not text:
        return None
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object, not {type(value).__name__}")
    return value


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


SPECULATIVE_METHODS = ("off", "ngram", "draft")

DEFAULT_MAX_MODEL_LEN = 4096  # the context when LLM_BYOC_MAX_MODEL_LEN is not set: the model's own, capped here


@dataclass(frozen=True)
class EngineConfig:
    """Settings of the single-model engine (scheduler, worker, model)."""

    model: str = DEFAULT_MODEL_DIR
    dtype: str = "auto"  # auto: bfloat16/float16 on CUDA, float32 on CPU
    device: str = "auto"  # auto: cuda when available, else cpu
    max_num_seqs: int = 0  # sequences in one step's batch; 0: auto (worker/loading.py); memory is the KV cache's business
    max_batched_tokens: int = 256  # tokens computed in one step (prefill chunks + decodes); 256 halves TTFT vs 512 at equal throughput on CPU
    prefill_chunk_tokens: int = 0  # beside decodes, a step's prompt tokens beyond its first prompt (wider for a long queue, engine/scheduler.py); 0: 64 on a CPU, no cap on CUDA
    max_model_len: int | None = None  # None: the model's own limit, capped at 4096
    max_input_tokens: int = 0  # prompt tokens a request may send; 0: max_model_len - 1
    model_revision: str = ""  # a hub id's branch, tag or commit (the download at start, models/fetch.py)
    download_dir: str = DEFAULT_DOWNLOAD_DIR  # where an s3:// model is copied at start
    max_new_tokens_limit: int = 2048
    max_waiting: int = 256  # queued sequences beyond this are refused (429)
    num_threads: int = 0  # torch intra-op threads in the worker; 0 = OMP_NUM_THREADS, else the usable cores (cpu.py)
    worker_nice: int = 10  # nice increment of every model process: HTTP and engine threads get a core first (process/threads.py)
    threads_adapt: bool = True  # the worker steps with fewer threads while other processes keep cores busy (process/cpu_share.py)
    linear_backend: str = "auto"  # auto: packed (our kernel) for CPU fp32, oneDNN for CPU bf16, else F.linear
    decoder: str = "auto"  # our engine's decoder: native (fused, per family) | generic (transformers' modules) | auto
    step_timeout_s: int = 300  # a worker that does not finish one step in this long is hung: stop it; 0 = never
    trust_remote_code: bool = False
    kv_cache_memory: str = "auto"  # CPU: bytes ("2GiB") or a fraction of the container's memory; see worker/kv_sizing.py
    kv_cache_commit: str = "ahead"  # CPU: when the pool's pages are written: ahead of use in the background, at load, or lazy (first use in a step); see worker/kv_cache.py
    kv_cache_huge_pages: bool = True  # CPU, a committed pool: in transparent huge pages (faster decode, slower load)
    gpu_memory_utilization: float = 0.90  # CUDA: the share of the GPU's memory weights + activations + KV may use
    kv_block_size: int = 16  # tokens per KV cache block
    enable_prefix_caching: bool = True
    max_loras: int = 8  # LoRA adapters one step's batch may use
    max_cpu_loras: int = 32  # adapters kept loaded in the worker's memory (least recently used go)
    max_lora_rank: int = 64
    adapters_dir: str = DEFAULT_ADAPTERS_DIR  # every <name>/ folder here is registered at start-up
    adapters_optional: bool = False  # False: an adapter folder there that cannot be registered fails the start
    adapter_roots: tuple[str, ...] = DEFAULT_ADAPTER_ROOTS  # a registered adapter's src must lie under one
    session_kv_share: float = 0.5  # of the KV cache, at most, kept for open sessions' prefixes
    session_ttl_s: int = 1200  # a session idle this long is closed (SageMaker's default)
    engine: str = "auto"  # native | vllm | auto (engine/engine_choice.py)
    tensor_parallel_size: int = 0  # vllm: GPUs one model is split over; 0: every GPU the container sees
    pipeline_parallel_size: int = 1  # vllm
    quantization: str = ""  # native: "" or int8 (CPU, worker/quant.py); vllm: vLLM's method, "" the checkpoint's
    speculative_config: str = ""  # vllm: JSON passed through as its speculative_config
    speculative_method: str = "off"  # off | ngram (prompt lookup, engine/speculative.py) | draft (worker/draft.py)
    draft_model: str = ""  # draft: a local model folder with the target's vocabulary (LLM_BYOC_DRAFT_MODEL)
    num_speculative_tokens: int = 4  # tokens proposed per sequence and step
    ngram_min: int = 1  # prompt lookup: the shortest suffix matched (vLLM's prompt_lookup_min)
    ngram_max: int = 4  # the longest (vLLM's prompt_lookup_max); longer matches are tried first
    speculative_max_num_seqs: int = 8  # native: speculate only while at most this many sequences run
    speculative_min_acceptance: float = 0.2  # native: a sequence's proposals stop below this acceptance rate
    vllm_engine_args: str = ""  # vllm: JSON object of further vLLM EngineArgs (ours win where both set one)
    vllm_enable_lora: str = "auto"  # vllm: auto (on when LLM_BYOC_ADAPTERS_DIR holds adapters at start), true, false

    def __post_init__(self) -> None:
        _require(bool(self.model), f"{ENV_MODEL} must name a model source")
        _require(self.dtype in _DTYPES, f"{ENV_DTYPE} must be one of {_DTYPES}, not {self.dtype!r}")
        _require(self.device in _DEVICES, f"{ENV_DEVICE} must be one of {_DEVICES}, not {self.device!r}")
        _require(self.max_num_seqs >= 0, f"{ENV_MAX_NUM_SEQS} must be >= 1, or 0 for the device's default")
        _require(self.max_batched_tokens >= 16, f"{ENV_MAX_BATCHED_TOKENS} must be >= 16")
        _require(self.prefill_chunk_tokens >= 0,
                 f"{ENV_PREFILL_CHUNK_TOKENS} must be >= 1, or 0 for the device's default")
        _require(
            self.max_model_len is None or self.max_model_len >= 16,
            f"{ENV_MAX_MODEL_LEN} must be >= 16",
        )
        _require(self.max_input_tokens >= 0, f"{ENV_MAX_INPUT_TOKENS} must be >= 1, or 0 for the context window")
        _require(
            not (self.max_input_tokens and self.max_model_len and self.max_input_tokens >= self.max_model_len),
            f"{ENV_MAX_INPUT_TOKENS} ({self.max_input_tokens}) must be below {ENV_MAX_MODEL_LEN} ({self.max_model_len})",
        )
        _require(self.max_new_tokens_limit >= 1, f"{ENV_MAX_NEW_TOKENS} must be >= 1")
        _require(self.max_waiting >= 0, f"{ENV_MAX_WAITING} must be >= 0")
        _require(self.num_threads >= 0, f"{ENV_NUM_THREADS} must be >= 0")
        _require(0 <= self.worker_nice <= 19, f"{ENV_WORKER_NICE} must be from 0 to 19")
        _require(self.step_timeout_s >= 0, f"{ENV_STEP_TIMEOUT} must be >= 0")
        _require(
            self.linear_backend in LINEAR_BACKENDS,
            f"{ENV_LINEAR_BACKEND} must be one of {LINEAR_BACKENDS}, not {self.linear_backend!r}",
        )
        _require(
            0 < self.gpu_memory_utilization <= 1,
            f"{ENV_GPU_MEMORY_UTILIZATION} must be in (0, 1], not {self.gpu_memory_utilization}",
        )
        _require(1 <= self.kv_block_size <= 1024, f"{ENV_KV_BLOCK_SIZE} must be from 1 to 1024")
        _require(self.max_loras >= 1, f"{ENV_MAX_LORAS} must be >= 1")
        _require(self.max_cpu_loras >= self.max_loras, f"{ENV_MAX_CPU_LORAS} must be >= {ENV_MAX_LORAS}")
        _require(1 <= self.max_lora_rank <= 512, f"{ENV_MAX_LORA_RANK} must be from 1 to 512")
        _require(bool(self.adapter_roots), f"{ENV_ADAPTER_ROOTS} must name at least one folder")
        _require(0 <= self.session_kv_share <= 1, f"{ENV_SESSION_KV_SHARE} must be from 0 to 1")
        _require(self.session_ttl_s >= 1, f"{ENV_SESSION_TTL} must be >= 1 (seconds)")
        _require(self.kv_cache_commit in KV_COMMIT_MODES,
                 f"{ENV_KV_CACHE_COMMIT} must be one of {', '.join(KV_COMMIT_MODES)} (or true/false), "
                 f"not {self.kv_cache_commit!r}")
        if self.kv_cache_memory != "auto":
            parse_memory_size(self.kv_cache_memory, 1, ENV_KV_CACHE_MEMORY)  # the form is checked here
        _require(self.decoder in DECODER_PATHS,
                 f"{ENV_DECODER} must be one of {', '.join(DECODER_PATHS)}, not {self.decoder!r}")
        _require(self.engine in ENGINES, f"{ENV_ENGINE} must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        _require(self.tensor_parallel_size >= 0, f"{ENV_TENSOR_PARALLEL_SIZE} must be >= 1, or 0 for every GPU")
        _require(self.pipeline_parallel_size >= 1, f"{ENV_PIPELINE_PARALLEL_SIZE} must be >= 1")
        _require(self.vllm_enable_lora in ("auto", "true", "false"),
                 f"{ENV_VLLM_ENABLE_LORA} must be auto, true or false, not {self.vllm_enable_lora!r}")
        _require(self.speculative_method in SPECULATIVE_METHODS,
                 f"{ENV_SPECULATIVE} must be one of {', '.join(SPECULATIVE_METHODS)}, not {self.speculative_method!r}")
        _require(self.speculative_method != "draft" or bool(self.draft_model),
                 f"{ENV_SPECULATIVE}=draft needs {ENV_DRAFT_MODEL}: a model folder sharing the model's tokenizer")
        _require(1 <= self.num_speculative_tokens <= 16, f"{ENV_NUM_SPECULATIVE_TOKENS} must be from 1 to 16")
        _require(1 <= self.ngram_min <= self.ngram_max <= 32,
                 f"{ENV_NGRAM_MIN} and {ENV_NGRAM_MAX} must satisfy 1 <= min <= max <= 32")
        _require(self.speculative_max_num_seqs >= 1, f"{ENV_SPECULATIVE_MAX_NUM_SEQS} must be >= 1")
        _require(0 <= self.speculative_min_acceptance <= 1, f"{ENV_SPECULATIVE_MIN_ACCEPTANCE} must be from 0 to 1")
        for name, text in ((ENV_SPECULATIVE_CONFIG, self.speculative_config),
                           (ENV_VLLM_ENGINE_ARGS, self.vllm_engine_args)):
            _json_object(name, text)

    @property
    def speculative(self) -> dict | None:
        return _json_object(ENV_SPECULATIVE_CONFIG, self.speculative_config)

    @property
    def vllm_args(self) -> dict:
        return _json_object(ENV_VLLM_ENGINE_ARGS, self.vllm_engine_args) or {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, commit_default: str = "ahead") -> "EngineConfig":
        """``commit_default``: the KV pool's commit when ``LLM_BYOC_KV_CACHE_COMMIT`` is unset (multi-model: lazy)."""
        env = os.environ if env is None else env
        max_len = _int(env, ENV_MAX_MODEL_LEN, 0)
        return cls(
            model=env.get(ENV_MODEL) or DEFAULT_MODEL_DIR,
            dtype=env.get(ENV_DTYPE, "auto") or "auto",
            device=env.get(ENV_DEVICE, "auto") or "auto",
            max_num_seqs=_int(env, ENV_MAX_NUM_SEQS, 0),
            max_batched_tokens=_int(env, ENV_MAX_BATCHED_TOKENS, 256),
            prefill_chunk_tokens=_int(env, ENV_PREFILL_CHUNK_TOKENS, 0),
            max_model_len=max_len or None,
            max_input_tokens=_int(env, ENV_MAX_INPUT_TOKENS, 0),
            model_revision=(env.get(ENV_MODEL_REVISION) or "").strip(),
            download_dir=env.get(ENV_DOWNLOAD_DIR) or DEFAULT_DOWNLOAD_DIR,
            max_new_tokens_limit=_int(env, ENV_MAX_NEW_TOKENS, 2048),
            max_waiting=_int(env, ENV_MAX_WAITING, 256),
            num_threads=_int(env, ENV_NUM_THREADS, 0),
            worker_nice=_int(env, ENV_WORKER_NICE, 10),
            threads_adapt=_bool(env, ENV_THREADS_ADAPT, True),
            linear_backend=env.get(ENV_LINEAR_BACKEND, "auto") or "auto",
            decoder=(env.get(ENV_DECODER) or "auto").strip().lower(),
            step_timeout_s=_int(env, ENV_STEP_TIMEOUT, 300),
            trust_remote_code=_bool(env, ENV_TRUST_REMOTE_CODE, False),
            kv_cache_memory=(env.get(ENV_KV_CACHE_MEMORY) or "auto").strip(),
            kv_cache_commit=_kv_commit(env.get(ENV_KV_CACHE_COMMIT), commit_default),
            kv_cache_huge_pages=_bool(env, ENV_KV_CACHE_HUGE_PAGES, True),
            gpu_memory_utilization=_float(env, ENV_GPU_MEMORY_UTILIZATION, 0.90),
            kv_block_size=_int(env, ENV_KV_BLOCK_SIZE, 16),
            enable_prefix_caching=_bool(env, ENV_PREFIX_CACHING, True),
            max_loras=_int(env, ENV_MAX_LORAS, 8),
            max_cpu_loras=_int(env, ENV_MAX_CPU_LORAS, max(32, _int(env, ENV_MAX_LORAS, 8))),
            max_lora_rank=_int(env, ENV_MAX_LORA_RANK, 64),
            adapters_dir=env.get(ENV_ADAPTERS_DIR) or DEFAULT_ADAPTERS_DIR,
            adapters_optional=_bool(env, ENV_ADAPTERS_OPTIONAL, False),
            adapter_roots=tuple(p for p in (env.get(ENV_ADAPTER_ROOTS) or ":".join(DEFAULT_ADAPTER_ROOTS)).split(":") if p),
            session_kv_share=_float(env, ENV_SESSION_KV_SHARE, 0.5),
            session_ttl_s=_int(env, ENV_SESSION_TTL, 1200),
            engine=(env.get(ENV_ENGINE) or "auto").strip().lower(),
            tensor_parallel_size=_int(env, ENV_TENSOR_PARALLEL_SIZE, 0),
            pipeline_parallel_size=_int(env, ENV_PIPELINE_PARALLEL_SIZE, 1),
            quantization=(env.get(ENV_QUANTIZATION) or "").strip(),
            speculative_config=(env.get(ENV_SPECULATIVE_CONFIG) or "").strip(),
            speculative_method=(env.get(ENV_SPECULATIVE) or "off").strip().lower(),
            draft_model=(env.get(ENV_DRAFT_MODEL) or "").strip(),
            num_speculative_tokens=_int(env, ENV_NUM_SPECULATIVE_TOKENS, 4),
            ngram_min=_int(env, ENV_NGRAM_MIN, 1),
            ngram_max=_int(env, ENV_NGRAM_MAX, 4),
            speculative_max_num_seqs=_int(env, ENV_SPECULATIVE_MAX_NUM_SEQS, 8),
            speculative_min_acceptance=_float(env, ENV_SPECULATIVE_MIN_ACCEPTANCE, 0.2),
            vllm_engine_args=(env.get(ENV_VLLM_ENGINE_ARGS) or "").strip(),
            vllm_enable_lora=(env.get(ENV_VLLM_ENABLE_LORA) or "auto").strip().lower(),
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
    served_model_name: str = ""  # the base model's name in responses and OpenAI "model"; "": the folder's name
    reasoning_parser: str = "auto"  # auto: reasoning_content when the chat template mentions </think>; none: off
    tool_call_parser: str = "auto"  # auto: the chat template's own tool-call format; or that format

    def __post_init__(self) -> None:
        _require(0 < self.port < 65536, f"{ENV_BIND_PORT} must be a TCP port, not {self.port}")
        _require(self.workers >= 1, f"{ENV_SERVER_WORKERS} must be >= 1")
        _require(self.max_connections >= 1, f"{ENV_MAX_CONNECTIONS} must be >= 1")
        _require(self.timeout_s >= 1, f"{ENV_SERVER_TIMEOUT} must be >= 1")
        _require(self.max_payload_bytes >= 1, f"{ENV_MAX_PAYLOAD_MB} must be >= 1")
        _require(self.graceful_timeout_s >= 0, f"{ENV_GRACEFUL_TIMEOUT} must be >= 0")
        _require(self.reasoning_parser in REASONING_PARSERS,
                 f"{ENV_REASONING_PARSER} must be one of {', '.join(REASONING_PARSERS)}, not {self.reasoning_parser!r}")
        _require(self.tool_call_parser in TOOL_CALL_PARSERS,
                 f"{ENV_TOOL_CALL_PARSER} must be one of {', '.join(TOOL_CALL_PARSERS)}, not {self.tool_call_parser!r}")

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
            served_model_name=(env.get(ENV_SERVED_MODEL_NAME) or "").strip(),
            reasoning_parser=(env.get(ENV_REASONING_PARSER) or "auto").strip().lower(),
            tool_call_parser=(env.get(ENV_TOOL_CALL_PARSER) or "auto").strip().lower(),
        )


def hub_token(env: Mapping[str, str] | None = None) -> str | None:
    """The hub token TGI's image reads (HF_TOKEN, or its older name): for the download only."""
    env = os.environ if env is None else env
    return (env.get(ENV_HF_TOKEN) or env.get(ENV_HF_TOKEN_OLD) or "").strip() or None


def parse_memory_size(raw: str, total_bytes: int, name: str = ENV_MEMORY_BUDGET) -> int:
    """'4GiB', '512MB', '2000000000' (bytes) or '0.6' (a fraction of ``total_bytes``)."""
    text = raw.strip()
    units = {"kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "b": 1}
    lowered = text.lower()
    for suffix, factor in units.items():
        if lowered.endswith(suffix):
            number = lowered[: -len(suffix)].strip()
            try:
                value = int(float(number) * factor)
            except ValueError:
                raise ConfigError(f"{name}={raw!r} is not a size") from None
            if value <= 0:
                raise ConfigError(f"{name}={raw!r} must be positive")
            return value
    try:
        value = float(lowered)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a size or a fraction") from None
    if 0 < value <= 1:
        return int(value * total_bytes)
    if value > 1:
        return int(value)
    raise ConfigError(f"{name}={raw!r} must be positive")


def is_fraction(raw: str) -> bool:
    """True for a memory setting given as a share ('0.2'), not a size."""
    try:
        return 0 < float(raw.strip()) <= 1
    except ValueError:
        return False


def parse_memory_budget(raw: str, total_bytes: int) -> int:
    return parse_memory_size(raw, total_bytes, ENV_MEMORY_BUDGET)


@dataclass(frozen=True)
class TritonConfig:
    """Triton Inference Server as the multi-model backend (see ``llm_byoc/multimodel/triton``)."""

    server: str = ""  # the tritonserver binary; "": on PATH, else the one in nvidia-pytriton
    repository: str = "/tmp/llm_byoc_triton"  # the model repository our layer writes
    http_port: int = 8000  # bound to 127.0.0.1: only this container talks to Triton
    grpc_port: int = 8001
    load_timeout_s: int = 120  # a model not loaded by then is a 504 and is unloaded
    max_batch_size: int = 8  # dynamic batching: requests Triton may run as one batch
    batch_delay_us: int = 2000  # how long Triton holds a request to fill a batch
    instances: int = 1  # model instances (processes of the Python backend) per model

    def __post_init__(self) -> None:
        for name, port in ((ENV_TRITON_HTTP_PORT, self.http_port), (ENV_TRITON_GRPC_PORT, self.grpc_port)):
            _require(0 < port < 65536, f"{name} must be a TCP port, not {port}")
        _require(self.http_port != self.grpc_port, f"{ENV_TRITON_HTTP_PORT} and {ENV_TRITON_GRPC_PORT} must differ")
        _require(self.load_timeout_s >= 1, f"{ENV_TRITON_LOAD_TIMEOUT} must be >= 1")
        _require(self.max_batch_size >= 1, f"{ENV_TRITON_MAX_BATCH_SIZE} must be >= 1")
        _require(self.batch_delay_us >= 0, f"{ENV_TRITON_BATCH_DELAY_US} must be >= 0")
        _require(self.instances >= 1, f"{ENV_TRITON_INSTANCES} must be >= 1")
        _require(bool(self.repository), f"{ENV_TRITON_REPOSITORY} must name a folder")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "TritonConfig":
        env = os.environ if env is None else env
        return cls(
            server=env.get(ENV_TRITON_SERVER) or "",
            repository=env.get(ENV_TRITON_REPOSITORY) or "/tmp/llm_byoc_triton",
            http_port=_int(env, ENV_TRITON_HTTP_PORT, 8000),
            grpc_port=_int(env, ENV_TRITON_GRPC_PORT, 8001),
            load_timeout_s=_int(env, ENV_TRITON_LOAD_TIMEOUT, 120),
            max_batch_size=_int(env, ENV_TRITON_MAX_BATCH_SIZE, 8),
            batch_delay_us=_int(env, ENV_TRITON_BATCH_DELAY_US, 2000),
            instances=_int(env, ENV_TRITON_INSTANCES, 1),
        )


@dataclass(frozen=True)
class MultiModelConfig:
    """Settings of multi-model mode (SAGEMAKER_MULTI_MODEL=true)."""

    model_root: str = DEFAULT_MODEL_ROOT  # every model path must stay under this folder
    memory_budget_bytes: int = 4 * 1024**3
    # a model's KV pool is committed as it is used: the manager measures each model as it grows
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(max_num_seqs=8, kv_cache_commit="lazy"))
    backend: str = "native"  # native: a process per model; triton: Triton hosts the models
    start_method: str = "auto"  # model processes: forkserver (zygote), spawn; auto: spawn on CUDA
    triton: TritonConfig = field(default_factory=TritonConfig)

    def __post_init__(self) -> None:
        _require(self.memory_budget_bytes > 0, f"{ENV_MEMORY_BUDGET} must be positive")
        _require(
            self.backend in MULTI_MODEL_BACKENDS,
            f"{ENV_MULTI_MODEL_BACKEND} must be one of {MULTI_MODEL_BACKENDS}, not {self.backend!r}",
        )
        _require(
            self.start_method in WORKER_START_METHODS,
            f"{ENV_WORKER_START} must be one of {WORKER_START_METHODS}, not {self.start_method!r}",
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "MultiModelConfig":
        env = os.environ if env is None else env
        # a share of the container's limit, not of the host
        budget = parse_memory_budget(env.get(ENV_MEMORY_BUDGET) or "0.6", container_memory())
        return cls(
            model_root=env.get(ENV_MODEL_ROOT) or DEFAULT_MODEL_ROOT,
            memory_budget_bytes=budget,
            engine=EngineConfig.from_env(env, commit_default="lazy"),
            backend=(env.get(ENV_MULTI_MODEL_BACKEND) or "native").lower(),
            start_method=(env.get(ENV_WORKER_START) or "auto").lower(),
            triton=TritonConfig.from_env(env),
        )
