"""The settings of the images users come from (TGI, LMI, vLLM's SageMaker entrypoint), onto ours.

``serve`` calls ``adopt_aliases(os.environ)`` first thing, so that every ``from_env`` (its own and its
children's, which inherit the environment) reads them. ``resolve_aliases(env)`` returns the environment as ``from_env`` reads it: every alias that is set
is written under our name (``ALIASES``), in our terms (``OPTION_DTYPE=fp16`` is ``float16``), and
removed. Ours win where both are set to the same value; two settings that name the same thing with
different values are a ``ConfigError`` naming both, at start-up. vLLM's ``SM_VLLM_<ARG>`` is the
engine argument ``<arg>``: the ones we have a setting for land there, every other one in
``LLM_BYOC_VLLM_ENGINE_ARGS`` (a key set there too, to another value, is again an error). Settings
with no meaning here are dropped, each with a note that ``serve`` logs (``IGNORED``). Values in notes
and errors go through ``logging_setup.redact_value``: a secret (``SM_VLLM_HF_TOKEN``, a token in a
model's URL) is never shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from . import config as c
from .logging_setup import redact_value

_DTYPE_NAMES = {"fp16": "float16", "half": "float16", "float16": "float16", "bf16": "bfloat16",
                "bfloat16": "bfloat16", "fp32": "float32", "float": "float32", "float32": "float32", "auto": "auto"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _dtype(name: str) -> Callable[[str], str]:
    def convert(value: str) -> str:
        out = _DTYPE_NAMES.get(value.strip().lower())
        if out is None:
            raise c.ConfigError(f"{name}={redact_value(name, value)!r} is not a dtype we serve "
                                f"({', '.join(sorted(_DTYPE_NAMES))})")
        return out
    return convert


def _tensor_parallel(value: str) -> str:
    """LMI's ``max`` (every GPU) is our 0."""
    return "0" if value.strip().lower() == "max" else value.strip()


def _boolean(value: str) -> str:
    lowered = value.strip().lower()
    return "true" if lowered in _TRUE else "false" if lowered in _FALSE else value.strip()


def _plain(value: str) -> str:
    return value.strip()


@dataclass(frozen=True)
class Alias:
    name: str  # the other image's variable
    ours: str  # the setting it sets
    convert: Callable[[str], str] = _plain  # its value in our terms


ALIASES: tuple[Alias, ...] = (
    # TGI (text-generation-inference's launcher, as SageMaker's Hugging Face LLM image sets it)
    Alias(c.ENV_HF_MODEL_ID, c.ENV_MODEL),
    Alias(c.ENV_HF_MODEL_REVISION, c.ENV_MODEL_REVISION),
    Alias(c.ENV_SM_NUM_GPUS, c.ENV_TENSOR_PARALLEL_SIZE),
    Alias(c.ENV_TGI_MAX_INPUT_TOKENS, c.ENV_MAX_INPUT_TOKENS),
    Alias(c.ENV_TGI_MAX_INPUT_LENGTH, c.ENV_MAX_INPUT_TOKENS),
    Alias(c.ENV_TGI_MAX_TOTAL_TOKENS, c.ENV_MAX_MODEL_LEN),
    Alias(c.ENV_TGI_MAX_BATCH_PREFILL_TOKENS, c.ENV_MAX_BATCHED_TOKENS),
    Alias(c.ENV_HF_MODEL_QUANTIZE, c.ENV_QUANTIZATION),
    Alias(c.ENV_HF_MODEL_TRUST_REMOTE_CODE, c.ENV_TRUST_REMOTE_CODE, _boolean),
    # LMI (DJL Serving)
    Alias(c.ENV_OPTION_MODEL_ID, c.ENV_MODEL),
    Alias(c.ENV_OPTION_TENSOR_PARALLEL_DEGREE, c.ENV_TENSOR_PARALLEL_SIZE, _tensor_parallel),
    Alias(c.ENV_OPTION_MAX_ROLLING_BATCH_SIZE, c.ENV_MAX_NUM_SEQS),
    Alias(c.ENV_OPTION_MAX_MODEL_LEN, c.ENV_MAX_MODEL_LEN),
    Alias(c.ENV_OPTION_DTYPE, c.ENV_DTYPE, _dtype(c.ENV_OPTION_DTYPE)),
    Alias(c.ENV_OPTION_ENABLE_LORA, c.ENV_VLLM_ENABLE_LORA, _boolean),
)

# vLLM engine arguments we have a setting of our own for, which vllm_mapping.engine_args hands to vLLM:
# SM_VLLM_<ARG> sets that setting (the others, max_num_batched_tokens and block_size included, go to vLLM as they are)
VLLM_ARG_SETTINGS: dict[str, tuple[str, Callable[[str], str]]] = {
    "model": (c.ENV_MODEL, _plain),
    "revision": (c.ENV_MODEL_REVISION, _plain),
    "served_model_name": (c.ENV_SERVED_MODEL_NAME, _plain),
    "max_model_len": (c.ENV_MAX_MODEL_LEN, _plain),
    "max_num_seqs": (c.ENV_MAX_NUM_SEQS, _plain),
    "tensor_parallel_size": (c.ENV_TENSOR_PARALLEL_SIZE, _plain),
    "pipeline_parallel_size": (c.ENV_PIPELINE_PARALLEL_SIZE, _plain),
    "dtype": (c.ENV_DTYPE, _dtype("SM_VLLM_DTYPE")),
    "quantization": (c.ENV_QUANTIZATION, _plain),
    "trust_remote_code": (c.ENV_TRUST_REMOTE_CODE, _boolean),
    "gpu_memory_utilization": (c.ENV_GPU_MEMORY_UTILIZATION, _plain),
    "enable_prefix_caching": (c.ENV_PREFIX_CACHING, _boolean),
    "enable_lora": (c.ENV_VLLM_ENABLE_LORA, _boolean),
    "max_loras": (c.ENV_MAX_LORAS, _plain),
    "max_cpu_loras": (c.ENV_MAX_CPU_LORAS, _plain),
    "max_lora_rank": (c.ENV_MAX_LORA_RANK, _plain),
    "speculative_config": (c.ENV_SPECULATIVE_CONFIG, _plain),
}

IGNORED: dict[str, str] = {
    c.ENV_TGI_MAX_BATCH_TOTAL_TOKENS: f"the KV cache is sized from memory ({c.ENV_KV_CACHE_MEMORY}, "
                                      f"{c.ENV_GPU_MEMORY_UTILIZATION})",
    c.ENV_OPTION_ROLLING_BATCH: "every engine here batches continuously",
}


# Options of vLLM's OpenAI API server, not of its engine: this server answers instead
VLLM_SERVER_ARGS = ("host", "port", "api_key", "uvicorn_log_level", "disable_log_requests", "disable_uvicorn_access_log",
                    "root_path", "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "allowed_origins", "allowed_methods",
                    "allowed_headers", "allow_credentials", "middleware", "chat_template", "response_role",
                    "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "lora_modules",
                    "return_tokens_as_token_ids", "max_log_len")


@dataclass(frozen=True)
class Resolved:
    env: dict[str, str]  # what from_env reads
    notes: list[str] = field(default_factory=list)  # one line each for the log: what was read as what


def resolve_aliases(env: Mapping[str, str]) -> Resolved:
    """``env`` with every alias set written under our name; ConfigError on a conflicting pair."""
    out = dict(env)
    notes: list[str] = []
    wanted: dict[str, tuple[str, str]] = {}  # our name -> (value, the alias that set it)
    for name, ours, value in _alias_values(env):
        if name in out and name != ours:
            del out[name]
        if not value:
            continue
        _claim(wanted, out, ours, value, name)
        notes.append(f"{name} read as {ours}={redact_value(name, value)}")
    for name in sorted(env):
        if _vllm_arg(name) in VLLM_SERVER_ARGS and (env.get(name) or "").strip():
            out.pop(name, None)
            notes.append(f"{name} is ignored: an option of vLLM's API server, not of its engine (this server "
                         "answers instead)")
    extra = _vllm_extra_args(env)
    if extra:
        for arg in extra:
            out.pop(f"{c.ENV_SM_VLLM_PREFIX}{arg.upper()}", None)
        out[c.ENV_VLLM_ENGINE_ARGS] = _merged_engine_args(env, extra)
        notes.append(f"{', '.join(f'{c.ENV_SM_VLLM_PREFIX}{k.upper()}' for k in extra)} read into "
                     f"{c.ENV_VLLM_ENGINE_ARGS}")
    for name, why in IGNORED.items():
        if (env.get(name) or "").strip():
            out.pop(name, None)
            notes.append(f"{name} is ignored: {why}")
    for ours, (value, _) in wanted.items():
        out[ours] = value
    return Resolved(out, notes)


def adopt_aliases(environ) -> list[str]:
    """Rewrite ``environ`` (``os.environ``) as ``resolve_aliases`` reads it; the lines to log."""
    resolved = resolve_aliases(environ)
    for name in [n for n in environ if n not in resolved.env]:
        del environ[name]
    environ.update(resolved.env)
    return resolved.notes


def _alias_values(env: Mapping[str, str]):
    """(alias name, our name, value in our terms) of each alias, set or not ("" when unset)."""
    for alias in ALIASES:
        raw = (env.get(alias.name) or "").strip()
        yield alias.name, alias.ours, alias.convert(raw) if raw else ""
    for name, raw in env.items():
        arg = _vllm_arg(name)
        if arg in VLLM_ARG_SETTINGS and (raw or "").strip():
            ours, convert = VLLM_ARG_SETTINGS[arg]
            yield name, ours, convert(raw)


def _claim(wanted: dict, env: dict, ours: str, value: str, name: str) -> None:
    own = (env.get(ours) or "").strip()
    if own and name != ours and _differs(own, value):
        raise c.ConfigError(f"{name}={redact_value(name, value)!r} and {ours}={redact_value(ours, own)!r} both "
                            f"set {ours} to different values: set one of them")
    if ours in wanted and _differs(wanted[ours][0], value):
        other = wanted[ours][1]
        raise c.ConfigError(f"{name} and {other} both set {ours}, to {redact_value(name, value)!r} and "
                            f"{redact_value(other, wanted[ours][0])!r}: set one of them")
    wanted[ours] = (own or value, name)


def _differs(a: str, b: str) -> bool:
    return _boolean(a).lower() != _boolean(b).lower()


def _vllm_arg(name: str) -> str | None:
    if not name.startswith(c.ENV_SM_VLLM_PREFIX) or len(name) == len(c.ENV_SM_VLLM_PREFIX):
        return None
    return name[len(c.ENV_SM_VLLM_PREFIX):].lower()


def _vllm_extra_args(env: Mapping[str, str]) -> dict:
    """The SM_VLLM_* arguments we have no setting for: vLLM's own, as its entrypoint hands them on."""
    extra = {}
    for name, raw in sorted(env.items()):
        arg = _vllm_arg(name)
        if arg is None or arg in VLLM_ARG_SETTINGS or arg in VLLM_SERVER_ARGS or not (raw or "").strip():
            continue
        extra[arg] = _vllm_value(raw.strip())
    return extra


def _vllm_value(text: str):
    """A number, boolean, list or object where the text is one in JSON (``true``, ``0.5``), else the string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def _merged_engine_args(env: Mapping[str, str], extra: dict) -> str:
    own_text = (env.get(c.ENV_VLLM_ENGINE_ARGS) or "").strip()
    own = c._json_object(c.ENV_VLLM_ENGINE_ARGS, own_text) or {}
    for key, value in extra.items():
        if key in own and own[key] != value:
            raise c.ConfigError(f"{c.ENV_SM_VLLM_PREFIX}{key.upper()}={redact_value(key, value)!r} and "
                                f"{c.ENV_VLLM_ENGINE_ARGS}'s {key!r}={redact_value(key, own[key])!r} differ: "
                                f"set one of them")
    return json.dumps({**extra, **own})
