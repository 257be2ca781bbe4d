"""Load the configured model into a batched decoder and describe it (ModelInfo; its KV cache
fields are filled in once the runner has sized the cache)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import EngineConfig
from ..errors import ModelLoadError
from ..models.loader import load_causal_lm, load_config, load_tokenizer, local_folder
from ..protocol import ModelInfo
from .linear import linear_factory, resolve_backend
from .models import build_decoder, check_supported

log = logging.getLogger(__name__)

DEFAULT_MAX_MODEL_LEN = 4096
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


def model_max_len(hf_config, configured: int | None) -> int:
    """The configured context, or the model's own capped at 4096; never beyond the model's."""
    model_limit = getattr(hf_config, "max_position_embeddings", None) or DEFAULT_MAX_MODEL_LEN
    if configured is None:
        return min(model_limit, DEFAULT_MAX_MODEL_LEN)
    if configured > model_limit:
        raise ModelLoadError(
            f"LLM_BYOC_MAX_MODEL_LEN={configured} exceeds the model's "
            f"max_position_embeddings ({model_limit})"
        )
    return configured


def eos_token_ids(hf_model, tokenizer) -> list[int]:
    """EOS ids from generation_config, config and tokenizer, in that order, deduplicated."""
    found: list[int] = []
    for source in (getattr(hf_model, "generation_config", None), hf_model.config, tokenizer):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        for token in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(token, int) and token not in found:
                found.append(token)
    return found


def load_model(config: EngineConfig) -> LoadedModel:
    started = time.monotonic()
    folder = local_folder(config.model)
    hf_config = load_config(folder, config.trust_remote_code)
    max_len = model_max_len(hf_config, config.max_model_len)
    check_supported(hf_config, max_len)  # before the weights are read
    tokenizer = load_tokenizer(folder, config.trust_remote_code)  # the front end needs it to work
    hf_model = load_causal_lm(folder, config.dtype, config.device, config.trust_remote_code)
    device, dtype = hf_model.device, hf_model.dtype
    max_num_seqs = config.max_num_seqs or DEFAULT_MAX_NUM_SEQS.get(device.type, 64)
    try:
        backend, backend_reason = resolve_backend(config.linear_backend, device, dtype)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from None
    log.info("linear kernels: %s (%s)", backend, backend_reason)
    with torch.no_grad():  # fused weights (torch.cat) must not keep the originals alive through autograd
        decoder = build_decoder(hf_model, max_len, linear_factory(backend, batch_hint=max_num_seqs))
    param_bytes = sum(p.numel() * p.element_size() for p in hf_model.parameters())
    if backend != "aten":  # every projection is a copy now: let the checkpoint's memory map go
        own_tensors(decoder)
    info = ModelInfo(
        model_type=hf_model.config.model_type,
        model_path=str(Path(folder)),
        vocab_size=hf_model.config.vocab_size,
        max_model_len=max_len,
        eos_token_ids=eos_token_ids(hf_model, tokenizer),
        device=str(device),
        dtype=str(dtype).removeprefix("torch."),
        max_num_seqs=max_num_seqs,
        load_time_s=round(time.monotonic() - started, 3),
        param_bytes=param_bytes,
        linear_backend=backend,
    )
    log.info("loaded %s (%s, %s on %s, %s linear kernels) in %.1f s",
             folder, info.model_type, info.dtype, device, backend, info.load_time_s)
    return LoadedModel(decoder, info, device, dtype)


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
