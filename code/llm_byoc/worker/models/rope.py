"""Rotary position embedding tables, computed as transformers computes them, without it.

``Rotary`` has the call of transformers' rotary modules (``rotary(x, position_ids)
-> cos, sin``) and gives the same tensors bit for bit: ``inv_freq`` comes from the
formulas of ``transformers/modeling_rope_utils.py`` (5.x) for the RoPE types here,
written with the same operations in the same order, in float32 on the CPU (where
transformers computes it too), and then moves to the model's device. A type not
here (``proportional``, ...) is loaded through transformers instead.

``dynamic`` and ``longrope`` rescale by the sequence's length: transformers picks
their table in each forward from ``max(position_ids) + 1``, which in ``generate``
of one prompt is the prompt's length for the prefill and ``position + 1`` for each
decode (keys already cached keep the rotation they were written with).
``LengthRotary`` takes that length per row (``StepInputs.rope_lengths``), so
every row of a continuously batched step gets the table its sequence would have
had alone; ``RopeByLength`` tells the engine what it must keep apart in the
prefix cache, and whether crossing the threshold recomputes the sequence.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch

from ...protocol import RopeByLength

NATIVE_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope")
LENGTH_ROPE_TYPES = ("dynamic", "longrope")  # their table depends on the sequence's length


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
    if rope_type in LENGTH_ROPE_TYPES:
        raise ValueError(f"rope type {rope_type!r} depends on the sequence's length: use LengthRotary")
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
    def from_parameters(cls, params: dict, head_dim: int, max_positions: int,
                        device: torch.device) -> "Rotary | LengthRotary":
        if params.get("rope_type") in LENGTH_ROPE_TYPES:
            return LengthRotary(params, head_dim, max_positions, device)
        inv_freq, scaling = inv_freq_and_scaling(params, head_dim, max_positions)
        return cls(inv_freq.to(device), scaling)

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rope_by_length(params: dict, max_positions: int, model_type: str) -> RopeByLength | None:
    """What the engine must know of a RoPE whose table depends on the sequence's length (None: it does not)."""
    rope_type = params.get("rope_type", "default")
    if rope_type == "longrope":
        # Phi3ForCausalLM.prepare_inputs_for_generation drops the cache when a sequence first outgrows
        # original_max_position_embeddings: every token is computed again with the long factors
        return RopeByLength(rope_type, params["original_max_position_embeddings"], model_type == "phi3")
    if rope_type == "dynamic":
        return RopeByLength(rope_type, max_positions, False)
    return None


def _longrope(params: dict, dim: int, max_positions: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(short, long) [dim // 2] inverse frequencies and the attention factor, as _compute_longrope_parameters."""
    base, original = params["rope_theta"], params["original_max_position_embeddings"]
    factor, attention_factor = params.get("factor"), params.get("attention_factor")
    if factor is None:
        factor = max_positions / original
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim

    def inv_freq(ext: list[float]) -> torch.Tensor:
        return 1.0 / (torch.tensor(ext, dtype=torch.float32) * base**shape)

    return inv_freq(params["short_factor"]), inv_freq(params["long_factor"]), attention_factor


def _dynamic(params: dict, dim: int, max_positions: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """[dim // 2] inverse frequencies for a forward of ``seq_len``, as _compute_dynamic_ntk_parameters: up to
    ``max_positions`` the table built at init (python numbers, on the CPU); beyond, the one dynamic_rope_update
    builds from the tensor ``max(position_ids) + 1`` on the input's device."""
    base, factor = params["rope_theta"], params["factor"]
    exponent = dim / (dim - 2)
    if seq_len <= max_positions:
        base = base * ((factor * max_positions / max_positions) - (factor - 1)) ** exponent
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    length = torch.tensor(seq_len, device=device)
    length = torch.maximum(length, torch.tensor(max_positions, dtype=length.dtype, device=device))
    base = base * ((factor * length / max_positions) - (factor - 1)) ** exponent
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim))


class LengthRotary:
    """``rotary(x, position_ids [1, T], lengths [T]) -> cos, sin [1, T, head_dim]``: row t rotated with the table
    of a forward over ``lengths[t]`` tokens (``dynamic``, ``longrope``)."""

    _CACHED = 4096  # dynamic tables kept, one per length seen

    def __init__(self, params: dict, head_dim: int, max_positions: int, device: torch.device):
        self.rope_type, self.params = params["rope_type"], params
        self.head_dim, self.max_positions, self.device = head_dim, max_positions, device
        self.attention_scaling = 1.0
        if self.rope_type == "longrope":
            short, long, self.attention_scaling = _longrope(params, head_dim, max_positions)
            self.short, self.long = short.to(device), long.to(device)  # [D/2] each
            self.threshold = params["original_max_position_embeddings"]
        elif self.rope_type == "dynamic":
            self.threshold = max_positions
            self.default = _dynamic(params, head_dim, max_positions, max_positions, device).to(device)
            self._tables: OrderedDict[int, torch.Tensor] = OrderedDict()
        else:
            raise ValueError(f"rope type {self.rope_type!r} does not depend on the length")

    def inv_freq(self, lengths: list[int]) -> torch.Tensor:
        """[T, D/2] float32: each row's inverse frequencies."""
        if self.rope_type == "longrope":
            long = torch.tensor([n > self.threshold for n in lengths], device=self.device)
            return torch.where(long[:, None], self.long, self.short)
        distinct = sorted(set(lengths))
        tables = torch.stack([self._table(n) for n in distinct])  # [U, D/2]
        if len(distinct) == 1:
            return tables.expand(len(lengths), -1)
        index = {n: i for i, n in enumerate(distinct)}
        return tables[torch.tensor([index[n] for n in lengths], device=self.device)]

    def _table(self, length: int) -> torch.Tensor:
        if length <= self.threshold:
            return self.default
        table = self._tables.get(length)
        if table is None:
            table = self._tables[length] = _dynamic(self.params, self.head_dim, self.max_positions, length,
                                                    self.device)
            if len(self._tables) > self._CACHED:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(length)
        return table

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor, lengths: list[int]):
        freqs = position_ids[..., None].float() * self.inv_freq(lengths).to(device=x.device)  # [1, T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)
