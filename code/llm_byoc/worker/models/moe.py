"""Routed experts in place of a dense MLP (Mixtral, Qwen2-MoE, Qwen3-MoE): each token's top-k experts,
weighted.

As transformers computes it: router logits in the model's dtype, softmax in
float32, the top k renormalised to sum to one (Mixtral always; the Qwen MoEs
where ``norm_topk_prob``), the weights kept in float32 (Mixtral) or cast to the
model's dtype (Qwen); then each expert that any token chose runs once per step,
on all the rows routed to it (a loop over experts, never over tokens), and its
weighted output is added to those rows in expert order. Qwen2-MoE adds a shared
expert, a dense MLP every token goes through, scaled by a sigmoid gate.
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
    normalize: bool = True  # the top k weights renormalised to sum to one
    weights_in_model_dtype: bool = False  # Qwen: the weights cast to the model's dtype before they scale
    shared_gate_up: Linear | None = None  # Qwen2-MoE's shared expert: hidden -> 2 * I_shared
    shared_down: Linear | None = None
    shared_gate: torch.Tensor | None = None  # [1, hidden]: sigmoid(x @ it) scales the shared expert

    def __call__(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """x: [T, hidden] (normed) -> [T, hidden]."""
        probs = torch.softmax(F.linear(x, self.router).float(), dim=-1)  # [T, E]
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if self.weights_in_model_dtype:
            weights = weights.to(x.dtype)
        routed = F.one_hot(chosen, num_classes=len(self.gate_up)).permute(2, 1, 0)  # [E, k, T]
        out = torch.zeros_like(x)
        for expert in routed.sum(dim=(1, 2)).nonzero()[:, 0].tolist():
            choice, rows = torch.where(routed[expert])
            gate, up = self.gate_up[expert](x[rows]).chunk(2, dim=-1)
            y = self.down[expert](act(gate) * up) * weights[rows, choice, None]
            out.index_add_(0, rows, y.to(out.dtype))
        if self.shared_gate_up is not None:
            gate, up = self.shared_gate_up(x).chunk(2, dim=-1)
            out = out + torch.sigmoid(F.linear(x, self.shared_gate)) * self.shared_down(act(gate) * up)
        return out
