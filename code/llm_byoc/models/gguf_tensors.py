"""A GGUF file's tensors read in place, by their Hugging Face names, for the native decoders.

For the architectures whose GGUF tensor names map one to one onto a Llama-family
checkpoint's (``DIRECT_ARCHITECTURES``), the GGUF cache does not convert the
weights: it writes config.json, the tokenizer and a manifest (``MANIFEST``) that
names, for each checkpoint tensor, the GGUF tensor, its quantization type, shape
and byte range. ``GGUFTensorReader`` then reads each tensor from the GGUF itself
when the decoder is built, dequantized one tensor at a time (Q8_0, F16 and F32
here, every other type by the ``gguf`` package's dequantize, the function
transformers uses) straight into the decoder's buffer:
no float copy of the model is ever written to disk or held in memory whole, and
with ``LLM_BYOC_QUANTIZATION=int8`` a Q8_0 file's projections go from their
blocks to int8 per channel, one projection at a time.

llama.cpp stores a ``llama`` model's q and k projection rows permuted (its RoPE
pairs adjacent features, Hugging Face's rotates halves); they are put back as
transformers does (``_reverse_permute_weights``), so every tensor is bit for bit
what transformers' GGUF conversion gives.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelLoadError
from .safetensors_reader import pread_exact

MANIFEST = "gguf_tensors.json"
# GGUF general.architecture -> the names of its tensors are mapped here, and q/k are un-permuted for "llama".
DIRECT_ARCHITECTURES = ("llama", "qwen2", "qwen3")
_PERMUTED = ("llama",)

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.([a-z_]+)\.(weight|bias)")
# Tensors llama.cpp writes that a Hugging Face checkpoint has no counterpart of (transformers skips them too):
# llama 3's RoPE frequency factors, which config.json's rope scaling gives again.
_SKIPPED = ("rope_freqs.weight",)


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face checkpoint name of a GGUF tensor of the Llama family, or None if it has none."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"model.layers.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}.{match.group(3)}"
    return None


def _count(metadata: dict, key: str, default: int | None = None) -> int:
    """An integer field of a GGUF's metadata."""
    if key not in metadata:
        if default is None:
            raise ModelLoadError(f"the GGUF file has no {key}")
        return default
    return int(metadata[key])


def build_manifest(gguf_path: Path) -> dict | None:
    """The manifest for ``gguf_path``, or None when its tensors cannot be read directly (another architecture,
    a tensor without a Llama-family name, a type the ``gguf`` package cannot dequantize).

    The file's header is read by transformers' GGUF reader, which leaves the tokenizer's string arrays unparsed:
    0.02 s for SmolLM2's 49,152-token vocabulary, where ``gguf.GGUFReader`` takes ~2.5 s."""
    import gguf
    from transformers.integrations.gguf import GgufHeader, read_gguf_metadata

    metadata, _ = read_gguf_metadata(str(gguf_path))
    arch = metadata.get("general.architecture", "")
    if arch not in DIRECT_ARCHITECTURES:
        return None
    try:
        header = GgufHeader.from_file(str(gguf_path))
    except ValueError:  # a ggml type transformers' reader does not know
        return None
    heads = _count(metadata, f"{arch}.attention.head_count")
    kv_heads = _count(metadata, f"{arch}.attention.head_count_kv", heads)
    tensors = {}
    for tensor in header.tensors:
        name = hf_name(tensor.name)
        if name is None:
            if tensor.name in _SKIPPED:
                continue
            return None
        try:
            qtype = gguf.GGMLQuantizationType(tensor.ggml_type)
        except ValueError:
            return None
        if qtype not in gguf.GGML_QUANT_SIZES or not _dequantizable(qtype):
            return None
        permute = 0
        if arch in _PERMUTED and name.endswith(("q_proj.weight", "k_proj.weight")):
            permute = heads if ".q_proj." in name else kv_heads
        tensors[name] = {"gguf_name": tensor.name, "type": qtype.name, "shape": [int(n) for n in tensor.shape],
                         "offset": header.data_start + tensor.offset, "nbytes": tensor.nbytes,
                         "permute_heads": permute}
    return {"gguf": str(gguf_path.resolve()), "architecture": arch, "tensors": tensors}


def _dequantizable(qtype) -> bool:
    from gguf import quants

    return qtype.name in ("F32", "F16") or qtype in getattr(quants, "_type_traits", {})  # what dequantize takes


def write_manifest(manifest: dict, folder: Path) -> None:
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=0) + "\n")


def is_gguf_entry(folder: Path) -> bool:
    """Whether ``folder`` is a GGUF cache entry whose weights stay in the GGUF file."""
    return (Path(folder) / MANIFEST).is_file()


def read_manifest(folder: Path) -> dict:
    """A GGUF cache entry's manifest: ``gguf`` (the file's path), ``architecture``, ``tensors``."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{Path(folder) / MANIFEST} is unreadable: {exc}") from None


class GGUFTensorReader:
    """A cache entry's tensors by Hugging Face name, read from its GGUF; the same interface as SafetensorsReader."""

    def __init__(self, folder: Path):
        if sys.byteorder != "little":
            raise ModelLoadError("GGUF data is read as little-endian; this machine is not")
        manifest = read_manifest(folder)
        self.path = Path(manifest["gguf"])
        self.entries: dict[str, dict] = manifest["tensors"]
        try:
            self._fd: int | None = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise ModelLoadError(f"cannot open {self.path}: {exc}") from None

    def __enter__(self) -> "GGUFTensorReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Fill ``out`` (contiguous, of the tensor's shape, any dtype and device) with tensor ``name``."""
        entry = self.entries[name]
        if tuple(out.shape) != tuple(entry["shape"]):
            raise ModelLoadError(f"{self.path.name}: {entry['gguf_name']} has shape {entry['shape']}, "
                                 f"the model's config.json implies {list(out.shape)}")
        if not out.is_contiguous():
            raise ValueError("read_into needs a contiguous destination")
        weight = self._float32(entry)
        heads = entry["permute_heads"]
        if heads:  # llama.cpp's rows (head, pair, 2) back to Hugging Face's (head, 2, half)
            rest = weight.shape[1:]
            out.view(heads, 2, -1, *rest).copy_(weight.view(heads, -1, 2, *rest).transpose(1, 2))
        else:
            out.copy_(weight)

    def _float32(self, entry: dict) -> torch.Tensor:
        """The tensor in float32, in the GGUF's row order: Q8_0, F16 and F32 here (each block's float16 scale
        times its int8 values: the same products as ``gguf``'s numpy), every other type by ``gguf``."""
        import gguf
        from gguf import quants

        qtype, shape = gguf.GGMLQuantizationType[entry["type"]], entry["shape"]
        raw = torch.empty(entry["nbytes"], dtype=torch.uint8)
        pread_exact(self._fd, raw.numpy(), entry["offset"], self.path)
        if qtype == gguf.GGMLQuantizationType.F32:
            return raw.view(torch.float32).view(shape)
        if qtype == gguf.GGMLQuantizationType.F16:
            return raw.view(torch.float16).view(shape).float()
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            blocks = raw.view(-1, type_size)  # per block: a float16 scale, then 32 int8 values
            scales = blocks[:, :2].contiguous().view(torch.float16).float()
            return (blocks[:, 2:].view(torch.int8).float() * scales).view(shape)
        data = raw.numpy().reshape(*shape[:-1], shape[-1] // block * type_size)  # as GGUFReader shapes it
        return torch.from_numpy(np.asarray(quants.dequantize(data, qtype), dtype=np.float32).reshape(shape))
