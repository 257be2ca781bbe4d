"""OPT decoder over a step's flattened rows, on the checkpoint's weights.

Learned absolute positions with OPT's offset of 2; pre- or post-layer-norm
(``do_layer_norm_before``); optional project_in/project_out (350m-style
checkpoints whose embedding width differs from the hidden size).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from ..attention import paged_attention
from ..batch import StepInputs
from ..kv_cache import PagedKVCache
from ..linear import Linear, MakeLinear, linear_factory

POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding: position p is row p + 2


def _linear(module, make_linear: MakeLinear) -> Linear | None:
    return None if module is None else make_linear(module.weight, module.bias)


@dataclass
class LayerNorm:
    weight: torch.Tensor | None
    bias: torch.Tensor | None
    eps: float

    @classmethod
    def from_hf(cls, module) -> "LayerNorm":
        return cls(module.weight, module.bias, module.eps)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


@dataclass
class OPTLayer:
    ln_attn: LayerNorm
    qkv: Linear  # hidden -> 3 * hidden
    out: Linear  # hidden -> hidden
    ln_ffn: LayerNorm
    fc1: Linear  # hidden -> ffn
    fc2: Linear  # ffn -> hidden

    @classmethod
    def from_hf(cls, layer, make_linear: MakeLinear) -> "OPTLayer":
        attn = layer.self_attn
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        biases = [p.bias for p in projections]
        return cls(
            ln_attn=LayerNorm.from_hf(layer.self_attn_layer_norm),
            qkv=make_linear(
                torch.cat([p.weight for p in projections]), None if biases[0] is None else torch.cat(biases)
            ),
            out=make_linear(attn.out_proj.weight, attn.out_proj.bias),
            ln_ffn=LayerNorm.from_hf(layer.final_layer_norm),
            fc1=make_linear(layer.fc1.weight, layer.fc1.bias),
            fc2=make_linear(layer.fc2.weight, layer.fc2.bias),
        )


class OPTDecoder:
    """``forward`` -> hidden states [T, hidden]; ``logits`` for the rows that sample."""

    def __init__(self, hf_model, make_linear: MakeLinear | None = None):
        make_linear = make_linear or linear_factory("aten")
        config = hf_model.config
        self.num_heads = self.num_kv_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.pre_norm = config.do_layer_norm_before
        self.act = ACT2FN[config.activation_function]
        decoder = hf_model.model.decoder
        self.embed = decoder.embed_tokens.weight  # [V, word_embed_proj_dim]
        self.positions = decoder.embed_positions.weight  # [max_positions + 2, hidden]
        self.project_in = _linear(decoder.project_in, make_linear)  # word_dim -> hidden, or None
        self.project_out = _linear(decoder.project_out, make_linear)  # hidden -> word_dim, or None
        final = decoder.final_layer_norm
        self.final_norm = None if final is None else LayerNorm.from_hf(final)
        self.layers = [OPTLayer.from_hf(layer, make_linear) for layer in decoder.layers]
        self.lm_head = make_linear(hf_model.lm_head.weight, None)  # word_dim -> V

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def lora_modules(self) -> dict[str, tuple[int, int]]:
        """No LoRA for OPT layouts (its adapters name other modules)."""
        return {}

    def forward(self, inputs: StepInputs, cache: PagedKVCache, lora=None) -> torch.Tensor:
        h = F.embedding(inputs.token_ids, self.embed)  # [T, word_dim]
        if self.project_in is not None:
            h = self.project_in(h)  # [T, hidden]
        h = h + F.embedding(inputs.positions + POSITION_OFFSET, self.positions)
        for index, layer in enumerate(self.layers):
            h = self._layer(layer, h, cache.k[index], cache.v[index], inputs)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: [S, hidden] -> [S, V] float32."""
        if self.final_norm is not None:
            h = self.final_norm(h)
        if self.project_out is not None:
            h = self.project_out(h)
        return self.lm_head(h).float()

    def _layer(self, layer: OPTLayer, h, k_cache, v_cache, inputs) -> torch.Tensor:
        rows, hidden = h.shape
        x = layer.ln_attn(h) if self.pre_norm else h
        q, k, v = layer.qkv(x).split(hidden, dim=-1)
        shape = (rows, self.num_heads, self.head_dim)
        attn = paged_attention(q.view(shape), k.view(shape), v.view(shape), k_cache, v_cache, inputs)
        h = h + layer.out(attn.reshape(rows, hidden))  # [T, hidden]
        if not self.pre_norm:
            h = layer.ln_attn(h)
        x = layer.ln_ffn(h) if self.pre_norm else h
        h = h + layer.fc2(self.act(layer.fc1(x)))
        return h if self.pre_norm else layer.ln_ffn(h)
