"""A checkpoint's memory, read from its own files: the weights as they will be served and the KV cache
one token takes. Used before a load (vLLM's start: does the model fit at all?) and by ``deploy size``
(which instance holds it?).

The safetensors headers give every tensor's dtype and shape, so the parameter count is exact, from
the files transformers would load (``checkpoint_files``: the index's shards, else model.safetensors).
config.json gives layers, KV heads, head size and the context.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..config import DEFAULT_MAX_MODEL_LEN
from ..errors import ModelLoadError
from .safetensors_header import DTYPE_BYTES, checkpoint_files, read_header
_FLOAT = {"F64", "F32", "F16", "BF16"}


@dataclass(frozen=True)
class Footprint:
    parameters: int
    weight_bytes: int  # as served: float tensors in the serving dtype, a quantized checkpoint's as stored
    kv_bytes_per_token: int  # K and V of every layer, in the serving dtype
    max_model_len: int
    attention_heads: int
    kv_heads: int
    quantized: bool

    @property
    def sequence_kv_bytes(self) -> int:
        """The KV cache of one full-context sequence."""
        return self.kv_bytes_per_token * self.max_model_len


def read_footprint(folder: Path, serve_bytes: int, max_model_len: int | None = None) -> Footprint:
    """``serve_bytes``: the serving dtype's size (2 for bfloat16/float16, 4 for float32);
    ``max_model_len``: the context (None: the model's own, capped as the engine caps it)."""
    config_path = folder / "config.json"
    files = checkpoint_files(folder)
    if not config_path.is_file() or not files:
        raise ModelLoadError(f"{folder}: its size is read from config.json and safetensors weights "
                             f"(model.safetensors or an index of shards); it has {'no weights' if config_path.is_file() else 'no config.json'}")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{config_path} is unreadable: {exc}") from None
    text = config.get("text_config") or config  # multimodal checkpoints keep the decoder's shape here
    quantized = bool(config.get("quantization_config") or text.get("quantization_config"))
    parameters = weight_bytes = 0
    for path in files:
        for name, entry in read_header(path).items():
            if entry.dtype not in DTYPE_BYTES:
                raise ModelLoadError(f"{path.name}: tensor {name} has dtype {entry.dtype}, whose size is not known")
            count = math.prod(entry.shape)
            parameters += count
            keep = quantized or entry.dtype not in _FLOAT
            weight_bytes += count * (DTYPE_BYTES[entry.dtype] if keep else serve_bytes)
    heads = int(text.get("num_attention_heads") or 0)
    layers = int(text.get("num_hidden_layers") or 0)
    if not heads or not layers or not text.get("hidden_size"):
        raise ModelLoadError(f"{config_path}: no num_attention_heads / num_hidden_layers / hidden_size "
                             "to size the KV cache by")
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    model_limit = int(text.get("max_position_embeddings") or DEFAULT_MAX_MODEL_LEN)
    context = max_model_len or min(model_limit, DEFAULT_MAX_MODEL_LEN)
    kv_per_token = 2 * layers * kv_heads * head_dim * serve_bytes
    return Footprint(parameters, weight_bytes, kv_per_token, context, heads, kv_heads, quantized)
