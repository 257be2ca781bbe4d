"""Routed experts in place of a dense MLP (Mixtral): each token's top-k experts, weighted.

As transformers computes it: router logits in the model's dtype, softmax in
float32, the top k renormalised to sum to one; then each expert that any token
chose runs once per step, on all the rows routed to it (a loop over experts,
never over tokens), and its weighted output is added to those rows in expert
order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..linear import Linear


@dataclass
class RoutedExperts:
    router: torch.Tensor  # [E, hidden]
    gate_up: list[Linear]  # per expert: hidden -> 2 * I (gate, then up)
    down: list[Linear]  # per expert: I -> hidden
    top_k: int

    def __call__(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """x: [T, hidden] (normed) -> [T, hidden]."""
        probs = torch.softmax(F.linear(x, self.router).float(), dim=-1)  # [T, E]
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        weights = weights / weights.sum(dim=-1, keepdim=True)
        routed = F.one_hot(chosen, num_classes=len(self.gate_up)).permute(2, 1, 0)  # [E, k, T]
        out = torch.zeros_like(x)
        for expert in routed.sum(dim=(1, 2)).nonzero()[:, 0].tolist():
            choice, rows = torch.where(routed[expert])
            gate, up = self.gate_up[expert](x[rows]).chunk(2, dim=-1)
            y = self.down[expert](act(gate) * up) * weights[rows, choice, None]
            out.index_add_(0, rows, y.to(out.dtype))
        return out
