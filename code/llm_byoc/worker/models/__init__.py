"""Model families the worker runs with its own batched forward.

Each decoder keeps the weights, not modules, and exposes ``num_layers``,
``num_heads``, ``num_kv_heads``, ``head_dim``, ``forward(inputs, cache) -> [T,
hidden]`` and ``logits(hidden_rows) -> [S, vocab]``; one with sliding-window
layers names their window (``sliding_window``, else None or absent), which the
runner builds each step's inputs for. ``load_decoder`` builds one
straight from config.json and the safetensors files, without transformers;
``build_decoder`` builds one on a loaded transformers model, for what the native
path does not take (``native_unsupported`` says why).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...config import ENV_ENGINE, ENV_TRUST_REMOTE_CODE
from ...errors import ModelLoadError
from ..linear import MakeLinear
from .activations import ACTIVATIONS
from .config import DecoderConfig, NeedsTransformers, OPTDecoderConfig, decoder_config, layer_windows, rope_sets
from .gemma import GemmaDecoder
from .llama import LlamaDecoder
from .opt import OPTDecoder
from .rope import rope_unsupported
from .weights import CheckpointWeights

DECODERS = {
    "llama": LlamaDecoder,
    "mistral": LlamaDecoder,
    "qwen2": LlamaDecoder,
    "qwen3": LlamaDecoder,
    "phi3": LlamaDecoder,
    "mixtral": LlamaDecoder,
    "qwen2_moe": LlamaDecoder,
    "qwen3_moe": LlamaDecoder,
    "gemma2": GemmaDecoder,
    "gemma3_text": GemmaDecoder,
    "opt": OPTDecoder,
}

_PER_BATCH_ROPE = ("dynamic", "longrope")


def check_model_type(model_type, raw: dict | None = None, trust_remote_code: bool = False) -> None:
    """ModelLoadError for a family our engine has no decoder for; one whose code ships only in the model
    folder (config.json's ``auto_map``) is named so, with the settings that would serve it."""
    if model_type in DECODERS:
        return
    supported = ", ".join(sorted(DECODERS))
    auto_map = (raw or {}).get("auto_map")
    if isinstance(auto_map, dict) and auto_map:
        files = sorted({str(ref).split(".", 1)[0] + ".py" for ref in auto_map.values() if isinstance(ref, str)})
        allow = "" if trust_remote_code else f"{ENV_TRUST_REMOTE_CODE}=true (it runs that code) and "
        raise ModelLoadError(
            f"model type {model_type!r} is defined by code in the model folder ({', '.join(files)}, named by "
            f"config.json's auto_map), which is not run unless {ENV_TRUST_REMOTE_CODE}=true; our engine runs "
            f"{supported} only: {allow}{ENV_ENGINE}=vllm serve it where vLLM is installed"
        )
    raise ModelLoadError(f"model type {model_type!r} is not supported; supported: {supported}")


def check_supported(config, max_model_len: int) -> None:
    """Raise ModelLoadError for a model this worker cannot run exactly (a transformers or our own config)."""
    model_type = getattr(config, "model_type", None)
    check_model_type(model_type)
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    for rope in rope_sets(rope if isinstance(rope, dict) else {}):
        if rope.get("rope_type", rope.get("type")) in _PER_BATCH_ROPE:
            raise ModelLoadError(
                f"rope type {rope.get('rope_type')!r} rescales by the longest sequence in a batch, "
                "which a continuously batched step cannot reproduce; it is not supported"
            )
        if model_type == "phi3" and rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ModelLoadError(
                f"phi3 with partial_rotary_factor {rope['partial_rotary_factor']} (RoPE on part of each head) "
                "is not supported"
            )
    if getattr(config, "use_bidirectional_attention", None):
        raise ModelLoadError(f"{model_type} with use_bidirectional_attention (an encoder) is not supported")
    window = getattr(config, "sliding_window", None)
    if any(layer_windows(config)) and (not isinstance(window, int) or window < 1):
        raise ModelLoadError(f"{model_type}: sliding_window must be a positive integer, not {window!r}")


def build_decoder(hf_model, max_model_len: int, make_linear: MakeLinear | None = None):
    """``make_linear`` builds each projection (worker.linear); default: F.linear."""
    check_supported(hf_model.config, max_model_len)
    return DECODERS[hf_model.config.model_type].from_hf(hf_model, make_linear)


def native_unsupported(config: DecoderConfig, raw: dict, trust_remote_code: bool) -> str | None:
    """Why ``load_decoder`` cannot build this model as transformers would, or None when it can."""
    if raw.get("quantization_config"):
        return "its weights are quantized"
    if trust_remote_code and raw.get("auto_map"):
        return "trust_remote_code is on and its config names its own code (auto_map)"
    if isinstance(config, OPTDecoderConfig):
        act = config.activation_function
        return None if act in ACTIVATIONS else f"activation {act!r} has no native function"
    if config.hidden_act not in ACTIVATIONS:
        return f"activation {config.hidden_act!r} has no native function"
    return next(filter(None, (rope_unsupported(rope, config.head_dim) for rope in rope_sets(config.rope_parameters))),
                None)


def load_decoder(folder: Path, config: DecoderConfig, device: torch.device, dtype: torch.dtype,
                 make_linear: MakeLinear | None = None, linear_copies_weights: bool = False):
    """(decoder, bytes of its weights) from ``folder``'s safetensors files; NeedsTransformers if it cannot.

    ``linear_copies_weights``: ``make_linear`` keeps a copy of each weight (oneDNN's layout), never the tensor."""
    weights = CheckpointWeights.open(folder, dtype, device, reuse_projection_buffer=linear_copies_weights)
    try:
        decoder = DECODERS[config.model_type].from_checkpoint(config, weights, make_linear)
    finally:
        weights.close()
    return decoder, weights.nbytes


__all__ = ["DECODERS", "NeedsTransformers", "build_decoder", "check_model_type", "check_supported",
           "decoder_config", "load_decoder", "native_unsupported"]
