"""Load the configured model into a batched decoder and describe it (ModelInfo; its KV cache
fields are filled in once the runner has sized the cache).

The native families (worker.models.DECODERS) load without transformers: config.json
into a typed config, the safetensors weights read straight into the decoder's
tensors (worker/models/weights.py). Anything that path does not take (a RoPE type
or activation it has no native version of, quantized weights, remote code, an
unusual checkpoint layout) loads through transformers as before, said in one log line.
Every other family (or any, with LLM_BYOC_DECODER=generic) runs on the generic
transformers path (worker/models/generic.py), named in the load log.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import DEFAULT_MAX_MODEL_LEN, ENV_LINEAR_BACKEND, ENV_QUANTIZATION, EngineConfig
from ..errors import ModelLoadError
from ..memory import release_free_heap
from ..models.device import resolve_device
from ..models.gguf_tensors import is_gguf_entry
from ..models.loader import (
    check_readable,
    check_safetensors_weights,
    load_causal_lm,
    load_config,
    load_tokenizer,
    local_folder,
    read_model_config,
    resolve_dtype,
)
from ..protocol import ModelInfo, RopeByLength
from . import cpu_kernels
from .linear import Int8Projections, MakeLinear, linear_factory, resolve_backend
from .models import (
    GENERIC_PATH,
    NeedsTransformers,
    build_decoder,
    check_supported,
    decoder_config,
    decoder_path,
    load_decoder,
    native_unsupported,
)
from .models.generic import build_generic, check_generic_config
from .models.rope import rope_by_length

log = logging.getLogger(__name__)

# Sequences in one batch when LLM_BYOC_MAX_NUM_SEQS is not set. A CPU step is bound by reading the
# weights, so a wider batch costs little more per step (SmolLM2-135M, 2 cores: see the README);
# a GPU has room for far more.
DEFAULT_MAX_NUM_SEQS = {"cpu": 64, "cuda": 256}


@dataclass
class LoadedModel:
    decoder: object  # one of worker.models.DECODERS
    info: ModelInfo
    device: torch.device
    dtype: torch.dtype


def model_max_len(model_config, configured: int | None) -> int:
    """The configured context, or the model's own capped at 4096; never beyond the model's (``dynamic`` RoPE:
    ``max_position_embeddings`` times its factor, as vLLM counts it)."""
    model_limit = getattr(model_config, "max_position_embeddings", None) or DEFAULT_MAX_MODEL_LEN
    rope = getattr(model_config, "rope_parameters", None)
    rope_scaled = isinstance(rope, dict) and rope.get("rope_type") == "dynamic" and bool(rope.get("factor"))
    if rope_scaled:
        model_limit = int(model_limit * rope["factor"])
    if configured is None:
        return min(model_limit, DEFAULT_MAX_MODEL_LEN)
    if configured > model_limit:
        raise ModelLoadError(
            f"LLM_BYOC_MAX_MODEL_LEN={configured} exceeds the model's "
            f"max_position_embeddings ({model_limit}{', with its dynamic RoPE factor' if rope_scaled else ''})"
        )
    return configured


def eos_token_ids(*values) -> list[int]:
    """EOS ids from each ``eos_token_id`` given (generation config, model config, tokenizer), deduplicated."""
    found: list[int] = []
    for value in values:
        for token in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(token, int) and token not in found:
                found.append(token)
    return found


def read_generation_eos(folder: Path):
    """generation_config.json's eos_token_id (what transformers' generation_config holds), or None."""
    try:
        return json.loads((folder / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return None


def load_model(config: EngineConfig) -> LoadedModel:
    started = time.monotonic()
    folder = local_folder(config.model)
    raw = read_model_config(folder)
    model_type = raw.get("model_type")
    if model_type is None:  # transformers may still tell the family
        model_type = getattr(load_config(folder, config.trust_remote_code), "model_type", None)
    if decoder_path(model_type, raw, config.trust_remote_code, config.decoder) == "generic":
        return _load_generic(folder, config, started)
    model_config, native_reason = _model_config(folder, raw, config.trust_remote_code)
    max_len = model_max_len(model_config, config.max_model_len)
    check_supported(model_config, max_len)  # before the weights are read
    tokenizer = load_tokenizer(folder, config.trust_remote_code)  # the front end needs it to work
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    max_num_seqs = _max_num_seqs(config, device)
    try:
        backend, backend_reason = resolve_backend(config.linear_backend, device, dtype, config.quantization)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    log.info("linear kernels: %s (%s)", backend, backend_reason)
    if device.type == "cpu":
        log.info("CPU kernels: %s", cpu_kernels.unavailable() or "compiled (float32 and int8 projections on "
                 "packed weights, decode attention with keys read in place for float32, RMSNorm, int8 rows; "
                 "worker/cpu_kernels.py)")
    make_linear = linear_factory(backend, batch_hint=max_num_seqs)
    if native_reason is None:
        try:
            check_readable(folder)
            if not is_gguf_entry(folder):  # an entry's weights are its GGUF's, read in place
                check_safetensors_weights(folder)
            decoder, param_bytes = load_decoder(folder, model_config, device, dtype, make_linear,
                                                linear_copies_weights=backend != "aten", rotate=backend == "int8")
            eos = eos_token_ids(read_generation_eos(folder), raw.get("eos_token_id"),
                                getattr(tokenizer, "eos_token_id", None))
        except NeedsTransformers as exc:
            native_reason = str(exc)
    if native_reason is not None:
        log.info("loading %s through transformers: %s", folder, native_reason)
        decoder, param_bytes, model_config, eos = _load_through_transformers(folder, config, max_len, make_linear,
                                                                             backend, tokenizer)
    if isinstance(make_linear, Int8Projections):
        rotated = getattr(decoder, "rotation", None) is not None
        log.info("int8 projections: %d, %.1f MiB of int8 weights and scales (%.1f MiB in float32); %s",
                 make_linear.count, make_linear.nbytes / 2**20, make_linear.float32_bytes / 2**20,
                 "residual stream rotated for 8-bit activations (worker/rotation.py)" if rotated
                 else "no rotation (not a native Llama-family decoder without routed experts)")
    info = _model_info(model_config, folder, max_len, eos, device, dtype, max_num_seqs, started, param_bytes,
                       linear_backend=backend, rope_by_length=_rope_by_length(model_config))
    log.info("loaded %s (%s, %s on %s, %s linear kernels, native decoder%s) in %.1f s", folder, info.model_type,
             info.dtype, device, backend, "" if native_reason is None else ", through transformers", info.load_time_s)
    release_free_heap()  # the copies the load made and freed
    return LoadedModel(decoder, info, device, dtype)


def _model_info(model_config, folder: Path, max_len: int, eos: list[int], device: torch.device, dtype: torch.dtype,
                max_num_seqs: int, started: float, param_bytes: int, **path_fields) -> ModelInfo:
    """What either path tells the engine of the loaded model; ``path_fields``: the ModelInfo fields it sets itself
    (linear_backend, rope_by_length, decoder)."""
    return ModelInfo(
        model_type=model_config.model_type,
        model_path=str(Path(folder)),
        vocab_size=model_config.vocab_size,
        max_model_len=max_len,
        eos_token_ids=eos,
        device=str(device),
        dtype=str(dtype).removeprefix("torch."),
        max_num_seqs=max_num_seqs,
        load_time_s=round(time.monotonic() - started, 3),
        param_bytes=param_bytes,
        **path_fields,
    )


def _max_num_seqs(config: EngineConfig, device: torch.device) -> int:
    return config.max_num_seqs or DEFAULT_MAX_NUM_SEQS.get(device.type, 64)


def _load_generic(folder: Path, config: EngineConfig, started: float) -> LoadedModel:
    """The model's own transformers modules with our paged attention (worker/models/generic.py)."""
    model_config = load_config(folder, config.trust_remote_code)
    max_len = model_max_len(model_config, config.max_model_len)
    check_generic_config(model_config, max_len)  # before the weights are read
    tokenizer = load_tokenizer(folder, config.trust_remote_code)
    device = resolve_device(config.device)
    dtype = resolve_dtype(config.dtype, device)
    if config.quantization:
        raise ModelLoadError(f"{ENV_QUANTIZATION}={config.quantization} needs a native decoder, and this model "
                             f"is served on the {GENERIC_PATH} (its transformers modules)")
    if config.linear_backend not in ("auto", "aten"):
        log.warning("%s=%s does not apply on the %s: its projections are the model's own modules (F.linear)",
                    ENV_LINEAR_BACKEND, config.linear_backend, GENERIC_PATH)
    hf_model = load_causal_lm(folder, config.dtype, config.device, config.trust_remote_code)
    decoder = build_generic(hf_model, max_len)
    eos = eos_token_ids(getattr(hf_model.generation_config, "eos_token_id", None), hf_model.config.eos_token_id,
                        getattr(tokenizer, "eos_token_id", None))
    param_bytes = sum(p.numel() * p.element_size() for p in hf_model.parameters())
    info = _model_info(model_config, folder, max_len, eos, device, dtype, _max_num_seqs(config, device), started,
                       param_bytes, linear_backend="aten", decoder="generic")  # aten: the model's own nn.Linear
    log.info("loaded %s (%s, %s on %s) on the %s: its transformers modules, our paged attention, in %.1f s",
             folder, info.model_type, info.dtype, device, GENERIC_PATH, info.load_time_s)
    return LoadedModel(decoder, info, device, dtype)


def _rope_by_length(model_config) -> RopeByLength | None:
    """How the model's RoPE depends on a sequence's length (our config or transformers'), if it does."""
    params = getattr(model_config, "rope_parameters", None)
    if not isinstance(params, dict) or any(isinstance(value, dict) for value in params.values()):
        return None
    return rope_by_length(params, model_config.max_position_embeddings, model_config.model_type)


def _model_config(folder: Path, raw: dict, trust_remote_code: bool):
    """(our typed config, None), or (transformers' config, why the native path cannot take the model)."""
    if raw.get("model_type") is not None:
        try:
            model_config = decoder_config(raw)
            return model_config, native_unsupported(model_config, raw, trust_remote_code)
        except NeedsTransformers as exc:
            reason = str(exc)
    else:
        reason = "config.json has no model_type"
    return load_config(folder, trust_remote_code), reason


def _load_through_transformers(folder: Path, config: EngineConfig, max_len: int, make_linear: MakeLinear,
                               backend: str, tokenizer):
    """(decoder, weight bytes, transformers' config, EOS ids) on a transformers model, as before."""
    hf_model = load_causal_lm(folder, config.dtype, config.device, config.trust_remote_code)
    with torch.no_grad():  # fused weights (torch.cat) must not keep the originals alive through autograd
        decoder = build_decoder(hf_model, max_len, make_linear)
    param_bytes = sum(p.numel() * p.element_size() for p in hf_model.parameters())
    if backend != "aten":  # every projection is a copy now: let the checkpoint's memory map go
        own_tensors(decoder)
    eos = eos_token_ids(getattr(hf_model.generation_config, "eos_token_id", None), hf_model.config.eos_token_id,
                        getattr(tokenizer, "eos_token_id", None))
    return decoder, param_bytes, hf_model.config, eos


def own_tensors(obj, depth: int = 0) -> None:
    """Copy every plain tensor ``obj`` keeps (embeddings, norms, biases) out of the checkpoint.

    transformers maps the safetensors file and hands out tensors backed by that
    mapping; one kept tensor pins the whole mapping, and every page the load
    touched stays resident (SmolLM2-135M with oneDNN projections: 540 MB more
    RSS for a 108 MB embedding and a few norms).
    """
    if depth > 3:
        return
    items = list(enumerate(obj)) if isinstance(obj, list) else list(vars(obj).items())
    for key, value in items:
        if isinstance(value, torch.Tensor):
            if value.layout == torch.strided:
                copy = value.detach().clone()
                if isinstance(obj, list):
                    obj[key] = copy
                else:
                    setattr(obj, key, copy)
        elif isinstance(value, list) or (hasattr(value, "__dict__") and not isinstance(value, torch.nn.Module)):
            own_tensors(value, depth + 1)
