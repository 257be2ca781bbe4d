"""Constrained rows: apply each one's token mask to its logits before sampling.

The engine sends a mask (``protocol.TokenMask``) for each sampling row whose
sequence has a grammar: llguidance's bitmask, one int32 word per 32 tokens of
the vocabulary. Disallowed tokens get -inf, so greedy argmax, the penalties,
top-k/top-p and the draw all see only the allowed tokens, and the logprob is
over them. Rows without a mask are not touched.
"""

from __future__ import annotations

import base64

import torch

from ..protocol import TokenMask


def mask_width(vocab_size: int) -> int:
    """Bytes of one row's mask (at least)."""
    return 4 * ((vocab_size + 31) // 32)


def check_masks(step_id: int, masks: list[TokenMask], vocab_size: int) -> dict[str, bytes]:
    """The masks by sequence, decoded; ValueError for one of the wrong size or that allows nothing."""
    width = mask_width(vocab_size)
    out: dict[str, bytes] = {}
    for mask in masks:
        try:
            bits = base64.b64decode(mask.bits, validate=True)
        except ValueError:
            raise ValueError(f"step {step_id}: the token mask of {mask.seq_id!r} is not base64") from None
        if len(bits) < width or len(bits) % 4:  # llguidance may add a word past the vocabulary
            raise ValueError(f"step {step_id}: the token mask of {mask.seq_id!r} has {len(bits)} bytes, "
                             f"not {width} (vocabulary {vocab_size})")
        bits = bits[:width]
        if not any(bits):
            raise ValueError(f"step {step_id}: the token mask of {mask.seq_id!r} allows no token")
        out[mask.seq_id] = bits
    return out


def apply_token_masks(logits: torch.Tensor, seq_ids: list[str], masks: dict[str, bytes]) -> None:
    """logits: [S, V], one row per entry of ``seq_ids``; masked rows changed in place."""
    rows = [i for i, seq_id in enumerate(seq_ids) if seq_id in masks]
    if not rows:
        return
    vocab = logits.shape[-1]
    words = torch.stack([torch.frombuffer(bytearray(masks[seq_ids[i]]), dtype=torch.int32) for i in rows])  # [R, W]
    shifts = torch.arange(32, dtype=torch.int32)
    allowed = ((words[:, :, None] >> shifts) & 1).reshape(len(rows), -1)[:, :vocab].bool()  # [R, V]
    index = torch.tensor(rows, device=logits.device)
    logits[index] = logits[index].masked_fill(~allowed.to(logits.device), float("-inf"))
