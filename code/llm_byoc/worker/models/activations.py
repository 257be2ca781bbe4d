"""The decoders' activation functions by their config.json names, as torch functions.

Each is the function transformers' ``ACT2FN`` entry of that name calls, so the
results are the same bit for bit; a name not here is taken from ``ACT2FN``
(importing transformers) on the transformers load path, and sends the native
path there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": functools.partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """``ACTIVATIONS[name]``, else transformers' own (only for models loaded through transformers)."""
    if name in ACTIVATIONS:
        return ACTIVATIONS[name]
    from transformers.activations import ACT2FN

    return ACT2FN[name]
