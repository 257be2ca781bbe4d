"""Model families the worker runs with its own batched forward.

Each decoder keeps the weights, not modules, and exposes ``num_layers``,
``num_heads``, ``num_kv_heads``, ``head_dim``, ``forward(inputs, cache) -> [T,
hidden]`` and ``logits(hidden_rows) -> [S, vocab]``; one with sliding-window
layers names their window (``sliding_window``, else None or absent), which the
runner builds each step's inputs for. ``load_decoder`` builds one
straight from config.json and the safetensors files, without transformers;
``build_decoder`` builds one on a loaded transformers model, for what the native
path does not take (``native_unsupported`` says why). Every other family runs on
the generic transformers path (``generic.py``: the model's own modules, our paged
attention); ``decoder_path`` picks one of the two under ``LLM_BYOC_DECODER``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...config import ENV_DECODER, ENV_ENGINE, ENV_TRUST_REMOTE_CODE
from ...errors import ModelLoadError
from ..linear import MakeLinear
from .activations import ACTIVATIONS
from .config import DecoderConfig, NeedsTransformers, OPTDecoderConfig, decoder_config, layer_windows, rope_sets
from .gemma import GemmaDecoder
from .generic import PATH_NAME as GENERIC_PATH
from .llama import LlamaDecoder
from .opt import OPTDecoder
from .rope import LENGTH_ROPE_TYPES, rope_unsupported
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


def decoder_path(model_type, raw: dict | None = None, trust_remote_code: bool = False,
                 setting: str = "auto") -> str:
    """"native" or "generic" for this family under ``LLM_BYOC_DECODER`` (``setting``); ModelLoadError for one
    only code in the model folder defines while ``trust_remote_code`` is off, or an unknown one forced native."""
    auto_map = (raw or {}).get("auto_map")
    if model_type not in DECODERS and isinstance(auto_map, dict) and auto_map and not trust_remote_code:
        files = sorted({str(ref).split(".", 1)[0] + ".py" for ref in auto_map.values() if isinstance(ref, str)})
        raise ModelLoadError(
            f"model type {model_type!r} is defined by code in the model folder ({', '.join(files)}, named by "
            f"config.json's auto_map), which is not run unless {ENV_TRUST_REMOTE_CODE}=true; with "
            f"{ENV_TRUST_REMOTE_CODE}=true (it runs that code) our {GENERIC_PATH} may run it, and "
            f"{ENV_ENGINE}=vllm serve it where vLLM is installed"
        )
    if setting == "generic" or (setting == "auto" and model_type not in DECODERS):
        return "generic"
    check_model_type(model_type)
    return "native"


def check_model_type(model_type) -> None:
    """ModelLoadError for a family with no native decoder (the generic path may still run it)."""
    if model_type not in DECODERS:
        raise ModelLoadError(f"model type {model_type!r} has no native decoder ({ENV_DECODER}=native); native: "
                             f"{', '.join(sorted(DECODERS))}; {ENV_DECODER}=auto runs the others on the {GENERIC_PATH}")


def check_supported(config, max_model_len: int) -> None:
    """Raise ModelLoadError for a model this worker cannot run exactly (a transformers or our own config)."""
    model_type = getattr(config, "model_type", None)
    check_model_type(model_type)
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    sets = rope_sets(rope if isinstance(rope, dict) else {})
    for rope in sets:
        rope_type = rope.get("rope_type", rope.get("type"))
        if rope_type in LENGTH_ROPE_TYPES and (len(sets) > 1 or DECODERS[model_type] is GemmaDecoder):
            raise ModelLoadError(f"rope type {rope_type!r} on {model_type} is not supported (the Gemma decoder "
                                 "rotates by position alone)")
        if rope_type in LENGTH_ROPE_TYPES and rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ModelLoadError(
                f"rope type {rope_type!r} with partial_rotary_factor {rope['partial_rotary_factor']} (RoPE on part "
                "of each head) is not supported"
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
                 make_linear: MakeLinear | None = None, linear_copies_weights: bool = False, rotate: bool = False):
    """(decoder, bytes of its weights) from ``folder``'s safetensors files; NeedsTransformers if it cannot.

    ``linear_copies_weights``: ``make_linear`` keeps a copy of each weight (oneDNN's layout), never the tensor;
    ``rotate``: a decoder that can (the Llama family) folds worker/rotation.py's Rotation into its weights."""
    weights = CheckpointWeights.open(folder, dtype, device, reuse_projection_buffer=linear_copies_weights)
    decoder_class = DECODERS[config.model_type]
    try:
        extra = {"rotate": True} if rotate and decoder_class is LlamaDecoder else {}
        decoder = decoder_class.from_checkpoint(config, weights, make_linear, **extra)
    finally:
        weights.close()
    return decoder, weights.nbytes


__all__ = ["DECODERS", "GENERIC_PATH", "NeedsTransformers", "build_decoder", "check_model_type", "check_supported",
           "decoder_config", "decoder_path", "load_decoder", "native_unsupported"]
