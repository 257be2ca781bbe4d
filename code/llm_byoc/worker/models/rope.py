"""Rotary position embedding tables, computed as transformers computes them, without it.

``Rotary`` has the call of transformers' rotary modules (``rotary(x, position_ids)
-> cos, sin``) and gives the same tensors bit for bit: ``inv_freq`` comes from the
formulas of ``transformers/modeling_rope_utils.py`` (5.x) for the RoPE types here,
written with the same operations in the same order, in float32 on the CPU (where
transformers computes it too), and then moves to the model's device. A type not
here (``proportional``, ...) is loaded through transformers instead; the
per-batch types (``dynamic``, ``longrope``) are refused by ``check_supported``.
"""

from __future__ import annotations

import math

import torch

NATIVE_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_unsupported(params: dict, head_dim: int) -> str | None:
    """Why ``Rotary`` cannot build these parameters' tables, or None when it can."""
    rope_type = params.get("rope_type", "default")
    if rope_type not in NATIVE_ROPE_TYPES:
        return f"rope type {rope_type!r} has no native tables"
    factor = params.get("partial_rotary_factor", 1.0)
    if rope_type != "default" and int(head_dim * factor) != head_dim:  # the default type ignores it
        return f"partial_rotary_factor {factor} rotates part of each head"
    return None


def inv_freq_and_scaling(params: dict, head_dim: int, max_positions: int) -> tuple[torch.Tensor, float]:
    """[head_dim // 2] float32 inverse frequencies and the factor cos and sin are scaled by."""
    rope_type, base = params.get("rope_type", "default"), params["rope_theta"]
    if rope_type == "default":
        return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim)), 1.0
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(dtype=torch.float) / head_dim))
    if rope_type == "linear":
        return inv_freq / params["factor"], 1.0
    if rope_type == "llama3":
        return _llama3(inv_freq, params), 1.0
    if rope_type == "yarn":
        return _yarn(params, head_dim, max_positions)
    raise ValueError(f"no native tables for rope type {rope_type!r}")


def _llama3(inv_freq: torch.Tensor, params: dict) -> torch.Tensor:
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    old_context = params["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def _yarn(params: dict, dim: int, max_positions: int) -> tuple[torch.Tensor, float]:
    base, original = params["rope_theta"], params["original_max_position_embeddings"]
    factor = params.get("factor") or max_positions / original
    attention_factor, mscale, mscale_all_dim = (params.get(k) for k in ("attention_factor", "mscale", "mscale_all_dim"))

    def get_mscale(scale, m=1):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as transformers: no division by zero
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp.to(dtype=torch.float)
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq, attention_factor


class Rotary:
    """``rotary(x, position_ids [B, T]) -> cos, sin [B, T, head_dim]`` in x's dtype, as transformers' module."""

    def __init__(self, inv_freq: torch.Tensor, attention_scaling: float):
        self.inv_freq, self.attention_scaling = inv_freq, attention_scaling

    @classmethod
    def from_parameters(cls, params: dict, head_dim: int, max_positions: int, device: torch.device) -> "Rotary":
        inv_freq, scaling = inv_freq_and_scaling(params, head_dim, max_positions)
        return cls(inv_freq.to(device), scaling)

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)
