"""Gemma 2 and Gemma 3 (text) as one fused decoder, computed as transformers' modeling code computes them.

What sets them apart from the Llama family: the embedding is scaled by
sqrt(hidden) (rounded to the model's dtype first); every RMSNorm scales by
(1 + weight) in float32 before casting back; each layer norms the attention
and the MLP output again before its residual add (four norms a layer); scores
are scaled by ``query_pre_attn_scalar**-0.5``; the MLP is gelu (tanh) gated.
Gemma 2 soft-caps the attention scores and the logits; Gemma 3 norms each head
of q and k and soft-caps only the logits, where set. Layers alternate between
sliding-window and full attention (``layer_types``); Gemma 3's sliding layers
take RoPE tables of their own (``rope_local_base_freq``, no scaling).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..attention import paged_attention
from ..batch import StepInputs
from ..kv_cache import PagedKVCache
from ..linear import Linear, MakeLinear, linear_factory
from ..lora import LoRAStep
from .activations import activation
from .config import GemmaDecoderConfig, layer_windows
from .llama import rope_tables, rotate
from .rope import Rotary
from .weights import CheckpointWeights


def gemma_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Gemma RMSNorm: normalise and scale by ``scale`` (1 + weight, float32) in float32, then cast back."""
    return (F.rms_norm(x.float(), (x.shape[-1],), eps=eps) * scale).to(x.dtype)


def norm_scale(weight: torch.Tensor) -> torch.Tensor:
    """(1 + weight) in float32, as the norm computes it on every call."""
    return 1.0 + weight.float()


@dataclass
class GemmaLayer:
    ln_attn: torch.Tensor  # [hidden] float32, (1 + weight) here and in every norm below
    qkv: Linear  # hidden -> (H + 2*KVH) * D
    o: Linear  # H * D -> hidden
    ln_post_attn: torch.Tensor
    ln_pre_mlp: torch.Tensor
    gate_up: Linear  # hidden -> 2 * I
    down: Linear  # I -> hidden
    ln_post_mlp: torch.Tensor
    qk_norm: torch.Tensor | None = None  # [H + KVH, D] float32: Gemma 3's per-head norms of q, then of k

    @classmethod
    def from_hf(cls, layer, make_linear: MakeLinear) -> "GemmaLayer":
        attn, mlp = layer.self_attn, layer.mlp
        biases = [p.bias for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
        qk_norm = None
        if getattr(attn, "q_norm", None) is not None:
            heads = attn.config.num_attention_heads, attn.config.num_key_value_heads
            qk_norm = _head_scales(attn.q_norm.weight, attn.k_norm.weight, *heads)
        return cls(
            ln_attn=norm_scale(layer.input_layernorm.weight),
            qkv=make_linear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                            None if biases[0] is None else torch.cat(biases)),
            o=make_linear(attn.o_proj.weight, attn.o_proj.bias),
            ln_post_attn=norm_scale(layer.post_attention_layernorm.weight),
            ln_pre_mlp=norm_scale(layer.pre_feedforward_layernorm.weight),
            gate_up=make_linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), None),
            down=make_linear(mlp.down_proj.weight, None),
            ln_post_mlp=norm_scale(layer.post_feedforward_layernorm.weight),
            qk_norm=qk_norm,
        )

    @classmethod
    def from_checkpoint(cls, weights: CheckpointWeights, prefix: str, config: GemmaDecoderConfig,
                        make_linear: MakeLinear) -> "GemmaLayer":
        hidden, inter, dim = config.hidden_size, config.intermediate_size, config.head_dim
        q, kv = config.num_attention_heads * dim, config.num_key_value_heads * dim
        attn, mlp = prefix + "self_attn.", prefix + "mlp."
        projection = functools.partial(weights.linear, make_linear)

        def norm(name: str, size: int = hidden) -> torch.Tensor:
            return norm_scale(weights.tensor(prefix + name + ".weight", (size,)))

        return cls(
            ln_attn=norm("input_layernorm"),
            qkv=projection([(attn + "q_proj", q), (attn + "k_proj", kv), (attn + "v_proj", kv)], hidden,
                           config.attention_bias),
            o=projection([(attn + "o_proj", hidden)], q, config.attention_bias),
            ln_post_attn=norm("post_attention_layernorm"),
            ln_pre_mlp=norm("pre_feedforward_layernorm"),
            gate_up=projection([(mlp + "gate_proj", inter), (mlp + "up_proj", inter)], hidden, False),
            down=projection([(mlp + "down_proj", hidden)], inter, False),
            ln_post_mlp=norm("post_feedforward_layernorm"),
            qk_norm=_head_scales(weights.tensor(attn + "q_norm.weight", (dim,)),
                                 weights.tensor(attn + "k_norm.weight", (dim,)), config.num_attention_heads,
                                 config.num_key_value_heads) if config.model_type == "gemma3_text" else None,
        )


def _head_scales(q_norm: torch.Tensor, k_norm: torch.Tensor, heads: int, kv_heads: int) -> torch.Tensor:
    """[H + KVH, D]: (1 + weight) of each q head's norm, then each k head's, so one norm covers q and k."""
    return torch.cat((norm_scale(q_norm).expand(heads, -1), norm_scale(k_norm).expand(kv_heads, -1)))


class GemmaDecoder:
    """``forward`` -> hidden states [T, hidden]; ``logits`` for the rows that sample."""

    def __init__(self, *, num_heads: int, num_kv_heads: int, head_dim: int, eps: float,
                 act: Callable[[torch.Tensor], torch.Tensor], rotary, local_rotary, embed: torch.Tensor,
                 layers: list[GemmaLayer], norm: torch.Tensor, lm_head: Linear, windows: tuple[int | None, ...],
                 query_pre_attn_scalar: float, attn_softcap: float | None, final_softcap: float | None):
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.eps, self.act = eps, act
        self.rotary = rotary  # full-attention layers' rotary(x, position_ids) -> cos, sin
        self.rotary_local = local_rotary  # sliding layers' (Gemma 3: their own tables; Gemma 2: ``rotary``)
        self.embed = embed  # [V, hidden]
        self.embed_scale = torch.tensor(embed.shape[1] ** 0.5).to(embed.device, embed.dtype)  # float32, then cast
        self.layers = layers
        self.norm = norm  # [hidden] float32: 1 + weight
        self.lm_head = lm_head  # [V, hidden]; may be the embedding (tied)
        self.sliding = tuple(window is not None for window in windows)
        self.sliding_window = next((w for w in windows if w is not None), None)  # one window for all of them
        self.scale = query_pre_attn_scalar ** -0.5
        self.attn_softcap, self.final_softcap = attn_softcap, final_softcap

    @classmethod
    def from_hf(cls, hf_model, make_linear: MakeLinear | None = None) -> "GemmaDecoder":
        """On a loaded transformers model's weights, with its own rotary module (one per layer type in Gemma 3)."""
        make_linear = make_linear or linear_factory("aten")
        config, decoder = hf_model.config, hf_model.model
        rotary = local = decoder.rotary_emb
        if config.model_type == "gemma3_text":
            rotary = functools.partial(decoder.rotary_emb, layer_type="full_attention")
            local = functools.partial(decoder.rotary_emb, layer_type="sliding_attention")
        gemma2 = config.model_type == "gemma2"
        return cls(
            num_heads=config.num_attention_heads, num_kv_heads=config.num_key_value_heads,
            head_dim=config.head_dim, eps=config.rms_norm_eps, act=activation(config.hidden_activation),
            rotary=rotary, local_rotary=local, embed=decoder.embed_tokens.weight,
            layers=[GemmaLayer.from_hf(layer, make_linear) for layer in decoder.layers],
            norm=norm_scale(decoder.norm.weight), lm_head=make_linear(hf_model.lm_head.weight, None),
            windows=layer_windows(config), query_pre_attn_scalar=config.query_pre_attn_scalar,
            attn_softcap=config.attn_logit_softcapping if gemma2 else None,
            final_softcap=config.final_logit_softcapping,
        )

    @classmethod
    def from_checkpoint(cls, config: GemmaDecoderConfig, weights: CheckpointWeights,
                        make_linear: MakeLinear | None = None) -> "GemmaDecoder":
        """Straight from the safetensors files; the LM head is the embedding when tied or absent."""
        make_linear = make_linear or linear_factory("aten")
        hidden = config.hidden_size
        base, embed, lm_head = weights.embedding_and_head(config.vocab_size, hidden, config.tie_word_embeddings,
                                                          make_linear)
        layers = [GemmaLayer.from_checkpoint(weights, f"{base}layers.{i}.", config, make_linear)
                  for i in range(config.num_hidden_layers)]
        rope = config.rope_parameters
        if config.model_type == "gemma3_text":
            rope, local_rope = rope["full_attention"], rope["sliding_attention"]
        else:
            local_rope = rope

        def rotary(params: dict) -> Rotary:
            return Rotary.from_parameters(params, config.head_dim, config.max_position_embeddings, weights.device)

        return cls(
            num_heads=config.num_attention_heads, num_kv_heads=config.num_key_value_heads, head_dim=config.head_dim,
            eps=config.rms_norm_eps, act=activation(config.hidden_act), rotary=rotary(rope),
            local_rotary=rotary(local_rope), embed=embed, layers=layers,
            norm=norm_scale(weights.tensor(base + "norm.weight", (hidden,))), lm_head=lm_head,
            windows=layer_windows(config), query_pre_attn_scalar=config.query_pre_attn_scalar,
            attn_softcap=config.attn_logit_softcapping if config.model_type == "gemma2" else None,
            final_softcap=config.final_logit_softcapping,
        )

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def lora_modules(self) -> dict[str, tuple[int, int]]:
        """No LoRA adapters on Gemma (yet): an adapter is refused, naming the modules it targets."""
        return {}

    def forward(self, inputs: StepInputs, cache: PagedKVCache, lora: LoRAStep | None = None) -> torch.Tensor:
        if inputs.window != self.sliding_window:
            raise ValueError(f"step inputs built for window {inputs.window}, the model's is {self.sliding_window}")
        h = F.embedding(inputs.token_ids, self.embed) * self.embed_scale  # [T, hidden]
        tables = rope_tables(self.rotary, h, inputs.positions)  # cos, sin: [T, 1, D] each
        local_tables = tables if self.rotary_local is self.rotary else rope_tables(self.rotary_local, h,
                                                                                  inputs.positions)
        local_inputs = inputs.windowed or inputs
        for index, layer in enumerate(self.layers):
            sliding = self.sliding[index]
            h = self._layer(layer, h, *(local_tables if sliding else tables), cache.k[index], cache.v[index],
                            local_inputs if sliding else inputs)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: [S, hidden] -> [S, V] float32, soft-capped (in the model's dtype, as transformers) where set."""
        logits = self.lm_head(gemma_norm(h, self.norm, self.eps))
        if self.final_softcap is not None:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits.float()

    def _layer(self, layer: GemmaLayer, h, cos, sin, k_cache, v_cache, inputs: StepInputs) -> torch.Tensor:
        rows = h.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        qk, v = layer.qkv(gemma_norm(h, layer.ln_attn, self.eps)).split([q_size + kv_size, kv_size], dim=-1)
        qk = qk.view(rows, self.num_heads + self.num_kv_heads, self.head_dim)
        if layer.qk_norm is not None:  # each head normalised before RoPE (Gemma 3)
            qk = gemma_norm(qk, layer.qk_norm, self.eps)
        q, k = rotate(qk, cos, sin).split([self.num_heads, self.num_kv_heads], dim=1)  # [T, H, D], [T, KVH, D]
        v = v.view(rows, self.num_kv_heads, self.head_dim)
        attn = paged_attention(q, k, v, k_cache, v_cache, inputs, self.scale, self.attn_softcap)  # [T, H, D]
        h = h + gemma_norm(layer.o(attn.reshape(rows, q_size)), layer.ln_post_attn, self.eps)
        gate, up = layer.gate_up(gemma_norm(h, layer.ln_pre_mlp, self.eps)).chunk(2, dim=-1)
        return h + gemma_norm(layer.down(self.act(gate) * up), layer.ln_post_mlp, self.eps)
