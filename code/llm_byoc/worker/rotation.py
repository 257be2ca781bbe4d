"""An orthogonal rotation folded into a Llama-family decoder's weights so that int8 activations lose little.

A few features of a decoder's hidden state are tens of times larger than the
rest (SmolLM2-135M: a row's largest magnitude is ~11x its RMS). With one 8-bit
scale per row (worker/quant.py) the ordinary features then get a handful of
levels: 2-7% relative error per projection, +4.4% perplexity over 6,144 tokens
of this repository's docs. Rotating the residual stream by an orthogonal ``Q``
spreads each feature over all of them (as QuaRot does, Ashkboos et al. 2024);
in exact arithmetic the model computes the same function, and nearly all of it
is folded into the weights at load, before they are quantized:

- each RMSNorm's scale moves into the projections that read its output, so the
  norm commutes with ``Q`` (``rms_norm(h @ Q) == rms_norm(h) @ Q``);
- projections that read the residual stream (q/k/v, gate/up, the LM head):
  ``W -> (W * norm_weight) @ Q``;
- projections that write it (o, down): ``W -> Q.T @ W``, their biases ``b -> b @ Q``;
- the embedding table: ``E -> E @ Q``.

Nothing changes at run time: no extra operation, and each row's output is
still computed from that row alone. SmolLM2-135M, perplexity against float32
over 6,144 tokens of docs, a 384-token technical text and a 408-token plain
one: int8 +4.35%, +4.16%, +0.16% before; +0.49%, +1.64%, +1.31% rotated
(benchmarks/int8_quality.py; docs/design/int8.md). Rotating the MLP's hidden
state too (``act(gate) * up``, at run time: it cannot be folded) took the docs'
loss to about +0.4% in a float simulation, for 3-13% more time per step: not done.

``Q = diag(signs) @ kron(DCT_a.T, H_p)`` for a hidden size ``a * p``, ``p`` its
largest power-of-two factor, ``H_p`` the normalised Sylvester Hadamard matrix
(itself a Kronecker product of small ones), ``signs`` random +-1 from a fixed
seed (a randomised Hadamard transform, as QuaRot's): deterministic, and
applied to a weight one small factor at a time. LoRA adapters get the same
transforms at load (``adapter_a``, ``adapter_b``), so their rows add what they
added to the unrotated model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

# (weight, bias) -> (weight, bias) as the decoder keeps them: what a loader applies before make_linear
Fold = Callable[[torch.Tensor, "torch.Tensor | None"], "tuple[torch.Tensor, torch.Tensor | None]"]

_FACTOR = 64  # the largest Hadamard factor of Q applied at once
_SEED = 0  # of the signs


def hadamard(n: int) -> torch.Tensor:
    """The normalised Sylvester Hadamard matrix of order ``n`` (a power of two), float64."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"a Sylvester Hadamard matrix has an order that is a power of two, not {n}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat((torch.cat((h, h), 1), torch.cat((h, -h), 1)), 0)
    return h / math.sqrt(n)


def dct(n: int) -> torch.Tensor:
    """The orthonormal DCT-II matrix of order ``n`` (rows: frequencies), float64."""
    j = torch.arange(n, dtype=torch.float64)
    d = torch.cos(math.pi * (2 * j[None, :] + 1) * j[:, None] / (2 * n)) * math.sqrt(2 / n)
    d[0] /= math.sqrt(2)
    return d


@dataclass(frozen=True)
class Rotation:
    """``Q`` as its signs and Kronecker factors (float32)."""

    signs: torch.Tensor  # [hidden], +-1
    factors: tuple[torch.Tensor, ...]

    @classmethod
    def for_hidden(cls, hidden: int) -> "Rotation":
        p = hidden & -hidden  # the largest power of two dividing it
        factors = [dct(hidden // p).t()] if hidden // p > 1 else []
        while p > 1:
            size = min(p, _FACTOR)
            factors.append(hadamard(size))
            p //= size
        signs = torch.randint(0, 2, (hidden,), generator=torch.Generator().manual_seed(_SEED)) * 2 - 1
        return cls(signs.float(), tuple(f.float().contiguous() for f in factors))

    @property
    def hidden(self) -> int:
        return self.signs.shape[0]

    def matrix(self) -> torch.Tensor:
        """``Q`` itself, [hidden, hidden] (for tests: the weights are rotated factor by factor)."""
        return self.right(torch.eye(self.hidden))

    def right(self, w: torch.Tensor, scale: torch.Tensor | None = None, rows: int = 4096) -> torch.Tensor:
        """``(w * scale) @ Q`` for ``w`` [..., hidden] (``scale`` [hidden], or None), in float32, ``rows`` rows
        at a time (a large weight never has more than one float32 copy besides its result): one contiguous
        matmul per factor, left-multiplying that factor's axis (``F.T @ x`` over [rows, d, rest]), the last one
        on the right."""
        flat = w.reshape(-1, self.hidden)
        column_scale = self.signs if scale is None else self.signs * scale.float()
        out = torch.empty(flat.shape, dtype=torch.float32, device=w.device)
        for first in range(0, flat.shape[0], rows):
            x = flat[first : first + rows].float() * column_scale
            rest = self.hidden
            for factor in self.factors:
                size = factor.shape[0]
                rest //= size
                if rest == 1:
                    x = x.reshape(-1, size) @ factor
                else:
                    x = torch.matmul(factor.t(), x.reshape(-1, size, rest))
            out[first : first + rows] = x.reshape(-1, self.hidden)
        return out.reshape(w.shape)

    def left_transposed(self, w: torch.Tensor) -> torch.Tensor:
        """``Q.T @ w`` for ``w`` [hidden, ...]: a writer of the residual stream."""
        return self.right(w.t()).t()

    # -- the folds, one per kind of projection ------------------------------------------------------------

    def reader(self, norm_weight: torch.Tensor) -> Fold:
        """q/k/v, gate/up, the LM head, after a norm of scale ``norm_weight``: ``(W * norm_weight) @ Q``."""
        return lambda weight, bias: (self.right(weight, norm_weight), bias)

    def embedding(self, table: torch.Tensor, rows: int = 4096) -> None:
        """``E -> E @ Q`` in place, ``rows`` at a time."""
        for first in range(0, table.shape[0], rows):
            table[first : first + rows] = self.right(table[first : first + rows], rows=rows)

    def writer(self, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """o, down: ``Q.T @ W``, ``b @ Q``."""
        return self.left_transposed(weight), None if bias is None else self.right(bias)

    # -- LoRA adapters: A [in, r], B [r, out] ---------------------------------------------------------------

    def adapter_a(self, point: str, a: torch.Tensor, norm_weight: torch.Tensor | None) -> torch.Tensor:
        """An adapter's A at ``point`` ("qkv", "o", "gate_up", "down") for the rotated inputs it now reads."""
        if point in ("qkv", "gate_up"):  # (x @ Q) @ A' == (x * g) @ A for A' = Q.T @ (g * A)
            return self.right(a.t(), norm_weight).t().to(a.dtype)
        return a

    def adapter_b(self, point: str, b: torch.Tensor) -> torch.Tensor:
        """An adapter's B at ``point``: what o and down add to the residual stream is rotated as it is."""
        return self.right(b).to(b.dtype) if point in ("o", "down") else b
