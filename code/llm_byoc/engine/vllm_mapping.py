"""Our settings and messages in vLLM's terms, and vLLM's outputs in ours (``LLM_BYOC_ENGINE=vllm``).

Mapped, not reimplemented: every sampling field becomes the ``vllm.SamplingParams``
field that means the same thing, a grammar becomes its structured-output
request, an adapter a ``LoRARequest``, our engine settings its ``EngineArgs``.
vLLM is imported only here and in ``vllm_core.py``, and only when it is the
engine, so the CPU image without vLLM never touches it.

What stays ours on purpose: detokenizing, stop strings and the response
schemas (the front end's, as with our engine); vLLM is asked for token ids
only (``detokenize=False``), one sequence per request (the front end fans
``n`` out into sequences with their own seeds, as it does for our engine).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import (
    ENV_ENGINE,
    ENV_GPU_MEMORY_UTILIZATION,
    ENV_KV_CACHE_MEMORY,
    ENV_MAX_MODEL_LEN,
    ENV_PIPELINE_PARALLEL_SIZE,
    ENV_QUANTIZATION,
    ENV_TENSOR_PARALLEL_SIZE,
    ENV_TRUST_REMOTE_CODE,
    ConfigError,
    EngineConfig,
)
from ..errors import ModelLoadError
from ..protocol import FinishReason, PromptLogprobs, SamplingParams, SequenceUpdate, TopLogprobs

if TYPE_CHECKING:
    from ..models.footprint import Footprint

# vLLM's finish reasons -> ours. "stop" covers EOS and stop token ids (stop strings are the front end's).
FINISH_REASONS = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


@dataclass(frozen=True)
class DeviceFacts:
    """What the engine args depend on besides the settings: the device and what it has."""

    device: str  # "cuda" | "cpu"
    num_gpus: int
    kv_cache_bytes: int | None  # CPU: the pool size our own sizing picks (worker/kv_sizing.py); None on CUDA
    gpu_memory_bytes: int = 0  # CUDA: the memory of one GPU (they are alike in one instance)


GIB = 1024**3


def check_fits(footprint: Footprint, facts: DeviceFacts, tensor_parallel: int, config: EngineConfig) -> None:
    """A model that cannot hold one full-context sequence is one clear line before vLLM starts (vLLM would
    say so from its engine process, after the load, as a traceback the container log shows out of order).
    CPU: the KV cache we size must hold one sequence. CUDA: one GPU's share of the weights and of that
    sequence's KV must fit in LLM_BYOC_GPU_MEMORY_UTILIZATION of its memory; vLLM's own profile at start
    then decides the rest (activations, CUDA graphs)."""
    sequence = footprint.sequence_kv_bytes
    context = f"one {footprint.max_model_len}-token sequence ({ENV_MAX_MODEL_LEN})"
    if facts.device == "cpu":
        if facts.kv_cache_bytes is not None and facts.kv_cache_bytes < sequence:
            raise ConfigError(f"the KV cache ({facts.kv_cache_bytes / GIB:.3f} GiB, {ENV_KV_CACHE_MEMORY}) holds "
                              f"{facts.kv_cache_bytes // footprint.kv_bytes_per_token} tokens; {context} needs "
                              f"{sequence / GIB:.3f} GiB: raise {ENV_KV_CACHE_MEMORY} or lower {ENV_MAX_MODEL_LEN}")
        return
    usable = facts.gpu_memory_bytes * config.gpu_memory_utilization
    need = (footprint.weight_bytes + sequence) / tensor_parallel
    if facts.gpu_memory_bytes and need > usable:
        raise ConfigError(f"the model does not fit: {footprint.weight_bytes / GIB:.1f} GiB of weights and "
                          f"{sequence / GIB:.2f} GiB for {context}, at tensor parallel {tensor_parallel}, need "
                          f"{need / GIB:.1f} GiB per GPU, and {ENV_GPU_MEMORY_UTILIZATION}="
                          f"{config.gpu_memory_utilization} of a {facts.gpu_memory_bytes / GIB:.1f} GiB GPU is "
                          f"{usable / GIB:.1f}: use more GPUs ({ENV_TENSOR_PARALLEL_SIZE}; an instance with more: "
                          f"python -m llm_byoc.deploy size MODEL_DIR), a quantized checkpoint or a shorter "
                          f"{ENV_MAX_MODEL_LEN}")


def engine_args(config: EngineConfig, folder: Path, dtype: str, max_model_len: int, facts: DeviceFacts,
                enable_lora: bool = False) -> dict:
    """Keyword arguments of ``vllm.EngineArgs`` for this container's settings.

    ``LLM_BYOC_VLLM_ENGINE_ARGS`` (a JSON object) adds vLLM arguments we have no setting for;
    a key we set from one of ours is a ConfigError there, so two settings never disagree."""
    tp = config.tensor_parallel_size or max(1, facts.num_gpus)
    if facts.device == "cuda" and tp * config.pipeline_parallel_size > facts.num_gpus:
        raise ConfigError(f"{ENV_TENSOR_PARALLEL_SIZE}={tp} x {ENV_PIPELINE_PARALLEL_SIZE}="
                          f"{config.pipeline_parallel_size} needs {tp * config.pipeline_parallel_size} GPUs; "
                          f"this container sees {facts.num_gpus}")
    if facts.device == "cpu" and tp * config.pipeline_parallel_size > 1:
        raise ConfigError(f"{ENV_TENSOR_PARALLEL_SIZE} and {ENV_PIPELINE_PARALLEL_SIZE} are for GPUs; on CPU "
                          f"leave them at 1 (got {tp} x {config.pipeline_parallel_size})")
    args = dict(
        model=str(folder),
        tokenizer=str(folder),
        served_model_name=folder.name,  # the model_name label of its vllm:* series, as our gateway gauges'

        dtype=dtype,
        max_model_len=max_model_len,
        trust_remote_code=config.trust_remote_code,
        enable_prefix_caching=config.enable_prefix_caching,
        tensor_parallel_size=tp,
        pipeline_parallel_size=config.pipeline_parallel_size,
        enable_lora=enable_lora,  # lora_enabled(): vLLM cannot turn it on later, and it is not free
        max_logprobs=20,
        logprobs_mode="processed_logprobs",  # after temperature and penalties: what was sampled from
        structured_outputs_config={"backend": "guidance"},  # llguidance, as our engine: the same grammar dialect
        disable_log_stats=False,  # its vllm: series feed /metrics
    )
    if enable_lora:
        args.update(max_loras=config.max_loras, max_cpu_loras=config.max_cpu_loras,
                    max_lora_rank=_vllm_lora_rank(config.max_lora_rank))
    if config.max_num_seqs:
        args["max_num_seqs"] = config.max_num_seqs
    if config.quantization:
        args["quantization"] = config.quantization
    if config.speculative is not None:
        args["speculative_config"] = config.speculative
    elif config.speculative_method == "ngram":  # LLM_BYOC_SPECULATIVE, as our engine reads it
        args["speculative_config"] = {"method": "ngram", "num_speculative_tokens": config.num_speculative_tokens,
                                      "prompt_lookup_min": config.ngram_min, "prompt_lookup_max": config.ngram_max}
    elif config.speculative_method == "draft":  # vLLM infers a draft model's method from the model it is given
        args["speculative_config"] = {"model": config.draft_model, "num_speculative_tokens": config.num_speculative_tokens}
    if facts.device == "cuda":
        args["gpu_memory_utilization"] = config.gpu_memory_utilization
    elif facts.kv_cache_bytes:
        args["kv_cache_memory_bytes"] = facts.kv_cache_bytes
    extra = config.vllm_args
    clash = sorted(set(extra) & set(args) - {"tokenizer", "served_model_name"})
    if clash:
        raise ConfigError(f"LLM_BYOC_VLLM_ENGINE_ARGS sets {', '.join(clash)}, which our own settings "
                          f"set already (use those: {ENV_QUANTIZATION}, {ENV_TENSOR_PARALLEL_SIZE}, ...)")
    return {**args, **extra}


def lora_enabled(config: EngineConfig) -> bool:
    """Whether vLLM is started with LoRA: ``LLM_BYOC_VLLM_ENABLE_LORA``, or with ``auto`` whether the adapters
    folder holds adapters at start-up. vLLM cannot enable LoRA once started, and with it on every step pays
    for it (W1 on its CPU build: 32 instead of 77 tok/s here, benchmarks/results/issue26_engines.json)."""
    if config.vllm_enable_lora != "auto":
        return config.vllm_enable_lora == "true"
    root = Path(config.adapters_dir)
    try:
        return root.is_dir() and any(p.is_dir() for p in root.iterdir())
    except OSError:
        return False


def _vllm_lora_rank(rank: int) -> int:
    """vLLM accepts these ranks only: the smallest that holds ours."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    return 512


def sampling_params(params: SamplingParams, max_tokens: int):
    """Our SamplingParams as vLLM's (one sequence, token ids only, new tokens per output)."""
    if params.typical_p < 1:
        raise ValueError("typical_p is not one of vLLM's sampling parameters; it needs LLM_BYOC_ENGINE=native")
    from vllm import SamplingParams as VllmSamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    structured = None
    grammar = params.grammar
    if grammar is not None:
        structured = StructuredOutputsParams(**{
            "json_schema": {"json": grammar.value},
            "json_object": {"json_object": True},
            "regex": {"regex": grammar.value},
            "lark": {"grammar": grammar.value},
        }[grammar.kind])
    return VllmSamplingParams(
        n=1,
        max_tokens=max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        repetition_penalty=params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
        min_tokens=params.min_tokens,
        seed=params.seed,
        ignore_eos=params.ignore_eos,
        logprobs=params.top_logprobs if params.logprobs else None,
        prompt_logprobs=params.prompt_logprobs,
        min_p=params.min_p,
        logit_bias={token: bias for token, bias in params.logit_bias} or None,
        stop_token_ids=list(params.stop_token_ids) or None,
        structured_outputs=structured,
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )


def sequence_update(seq_id: str, output, num_prompt_tokens: int, want_logprobs: bool, top_k: int,
                    prompt_top_k: int | None = None) -> SequenceUpdate:
    """One vLLM RequestOutput (DELTA: only the new tokens) as our SequenceUpdate; ``prompt_top_k``: the
    sequence asked for its prompt's log-probabilities (vLLM sends them with its first output)."""
    completion = output.outputs[0]
    tokens = list(completion.token_ids)
    logprobs = top = None
    if want_logprobs and completion.logprobs is not None:
        logprobs, top = [], [] if top_k else None
        for token, position in zip(tokens, completion.logprobs):
            logprobs.append(float(position[token].logprob))
            if top is not None:
                top.append(_ranked(position, top_k))
    finish = None
    if completion.finish_reason is not None:
        finish = FINISH_REASONS.get(completion.finish_reason, FinishReason.ERROR)
    prompt = None
    if prompt_top_k is not None and getattr(output, "prompt_logprobs", None):
        prompt = prompt_logprobs(list(output.prompt_token_ids), output.prompt_logprobs, prompt_top_k)
    return SequenceUpdate(seq_id, tokens, logprobs, finish, num_prompt_tokens,
                          int(output.num_cached_tokens or 0), top, prompt)


def prompt_logprobs(prompt_ids: list[int], positions: list, top_k: int) -> PromptLogprobs:
    """vLLM's ``prompt_logprobs`` (None for the first token, then {token id: Logprob} holding the prompt token
    and the ``top_k`` likeliest) as ours."""
    logprobs = [float(position[token].logprob) for token, position in zip(prompt_ids[1:], positions[1:])]
    top = [_ranked(position, top_k) for position in positions[1:]] if top_k else None
    return PromptLogprobs(logprobs, top)


def _ranked(position: dict, top_k: int) -> TopLogprobs:
    ranked = sorted((lp.rank, t, lp.logprob) for t, lp in position.items() if lp.rank <= top_k)
    return TopLogprobs([t for _, t, _ in ranked], [float(v) for _, _, v in ranked])


def check_folder_for_vllm(folder: Path, raw: dict, trust_remote_code: bool, known_types) -> None:
    """vLLM reads safetensors from a Hugging Face folder, and runs a model folder's own code only when
    allowed; say so before it tries. ``known_types``: the model types transformers defines itself."""
    if not any(folder.glob("*.safetensors")):
        raise ModelLoadError(f"{folder} has no .safetensors weights; LLM_BYOC_ENGINE=vllm loads safetensors only")
    model_type = raw.get("model_type")
    if raw.get("auto_map") and model_type not in known_types and not trust_remote_code:
        raise ConfigError(f"model type {model_type!r} is defined by code in the model folder (config.json's "
                          f"auto_map), which is not run unless {ENV_TRUST_REMOTE_CODE}=true: set it to serve "
                          f"this model (it runs that code)")


def check_platform(device_type: str, version: str) -> None:
    """vLLM's build must find its device: the CUDA build (the GPU image's) on a container that sees no
    GPU finds none (``vllm.platforms.current_platform.device_type`` is empty) and would fail deep inside
    with "Device string must not be empty"; this says what to do instead."""
    if not device_type:
        raise ConfigError(f"{ENV_ENGINE}=vllm: vLLM {version} finds no device it can run on (this build of vLLM "
                          f"needs a GPU and the container sees none): start the container with the GPU exposed "
                          f"(docker run --gpus all; Kubernetes: a nvidia.com/gpu limit), or set {ENV_ENGINE}=native "
                          f"to serve on the CPU with our engine")


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def omp_threads_default(config: EngineConfig) -> None:
    """Our thread setting, where the operator gave one, as vLLM's CPU binding (it otherwise picks its own)."""
    if config.num_threads and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{config.num_threads - 1}"
