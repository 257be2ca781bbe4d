"""Model families the worker runs with its own batched forward.

Each decoder is built from a loaded Hugging Face model (it keeps the weights,
not the modules) and exposes ``num_layers``, ``num_heads``, ``num_kv_heads``,
``head_dim``, ``forward(inputs, cache) -> [T, hidden]`` and
``logits(hidden_rows) -> [S, vocab]``.
"""

from __future__ import annotations

from ...errors import ModelLoadError
from ..linear import MakeLinear
from .llama import LlamaDecoder
from .opt import OPTDecoder

DECODERS = {
    "llama": LlamaDecoder,
    "mistral": LlamaDecoder,
    "qwen2": LlamaDecoder,
    "opt": OPTDecoder,
}

_PER_BATCH_ROPE = ("dynamic", "longrope")


def check_supported(config, max_model_len: int) -> None:
    """Raise ModelLoadError for a model this worker cannot run exactly."""
    model_type = getattr(config, "model_type", None)
    if model_type not in DECODERS:
        raise ModelLoadError(
            f"model type {model_type!r} is not supported; supported: {', '.join(sorted(DECODERS))}"
        )
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    rope = rope if isinstance(rope, dict) else {}
    if rope.get("rope_type", rope.get("type")) in _PER_BATCH_ROPE:
        raise ModelLoadError(
            f"rope type {rope.get('rope_type')!r} rescales by the longest sequence in a batch, "
            "which a continuously batched step cannot reproduce; it is not supported"
        )
    window = getattr(config, "sliding_window", None)
    uses_window = getattr(config, "use_sliding_window", model_type == "mistral")
    if uses_window and window is not None and window < max_model_len:
        raise ModelLoadError(
            f"{model_type} sliding-window attention ({window}) is not supported; "
            f"set LLM_BYOC_MAX_MODEL_LEN <= {window}"
        )


def build_decoder(hf_model, max_model_len: int, make_linear: MakeLinear | None = None):
    """``make_linear`` builds each projection (worker.linear); default: F.linear."""
    check_supported(hf_model.config, max_model_len)
    return DECODERS[hf_model.config.model_type](hf_model, make_linear)
