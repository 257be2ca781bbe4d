"""The compiled projections on one instruction set's tiles, for the tests that run each one the CPU can."""

from __future__ import annotations

import pytest
import torch


def on_isa(kind, weight: torch.Tensor, bias: torch.Tensor | None, isa: str):
    """``kind(weight, bias, isa)`` (PackedLinear, PackedInt8Linear), tried on one row; skips, with the kernel's
    reason, where this CPU cannot run those tiles."""
    linear = kind(weight, bias, isa)
    try:
        linear(torch.zeros(1, weight.shape[1]))
    except ValueError as exc:
        pytest.skip(str(exc))
    return linear
