"""OPT decoder over a step's flattened rows, on the checkpoint's weights.

Learned absolute positions with OPT's offset of 2; pre- or post-layer-norm
(``do_layer_norm_before``); optional project_in/project_out (350m-style
checkpoints whose embedding width differs from the hidden size). Built straight
from the safetensors files (``from_checkpoint``) or from a loaded transformers
model (``from_hf``).
"""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..attention import paged_attention
from ..batch import StepInputs
from ..kv_cache import PagedKVCache
from ..linear import Linear, MakeLinear, linear_factory
from .activations import activation
from .config import OPTDecoderConfig
from .weights import CheckpointWeights

POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding: position p is row p + 2
LAYER_NORM_EPS = 1e-5  # OPT's nn.LayerNorm default


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

    @classmethod
    def from_checkpoint(cls, weights: CheckpointWeights, name: str, width: int, affine: bool) -> "LayerNorm":
        if not affine:
            return cls(None, None, LAYER_NORM_EPS)
        return cls(weights.tensor(name + ".weight", (width,)), weights.tensor(name + ".bias", (width,)), LAYER_NORM_EPS)

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

    @classmethod
    def from_checkpoint(cls, weights: CheckpointWeights, prefix: str, config: OPTDecoderConfig,
                        make_linear: MakeLinear) -> "OPTLayer":
        """Layer ``prefix`` ('model.decoder.layers.3.'): q/k/v read into one fused projection."""
        hidden, ffn, bias = config.hidden_size, config.ffn_dim, config.enable_bias
        attn, affine = prefix + "self_attn.", config.layer_norm_elementwise_affine

        def projection(names: list[str], rows: int, columns: int) -> Linear:
            weight = weights.projection([(name + ".weight", (rows, columns)) for name in names])
            return make_linear(weight, weights.fused([(name + ".bias", (rows,)) for name in names]) if bias else None)

        return cls(
            ln_attn=LayerNorm.from_checkpoint(weights, prefix + "self_attn_layer_norm", hidden, affine),
            qkv=projection([attn + "q_proj", attn + "k_proj", attn + "v_proj"], hidden, hidden),
            out=projection([attn + "out_proj"], hidden, hidden),
            ln_ffn=LayerNorm.from_checkpoint(weights, prefix + "final_layer_norm", hidden, affine),
            fc1=projection([prefix + "fc1"], ffn, hidden),
            fc2=projection([prefix + "fc2"], hidden, ffn),
        )


class OPTDecoder:
    """``forward`` -> hidden states [T, hidden]; ``logits`` for the rows that sample."""

    def __init__(self, *, num_heads: int, pre_norm: bool, act: Callable[[torch.Tensor], torch.Tensor],
                 embed: torch.Tensor, positions: torch.Tensor, project_in: Linear | None,
                 project_out: Linear | None, final_norm: LayerNorm | None, layers: list[OPTLayer], lm_head: Linear):
        self.num_heads = self.num_kv_heads = num_heads
        self.head_dim = positions.shape[1] // num_heads
        self.pre_norm, self.act = pre_norm, act
        self.embed = embed  # [V, word_embed_proj_dim]
        self.positions = positions  # [max_positions + 2, hidden]
        self.project_in = project_in  # word_dim -> hidden, or None
        self.project_out = project_out  # hidden -> word_dim, or None
        self.final_norm = final_norm
        self.layers = layers
        self.lm_head = lm_head  # word_dim -> V; may be the embedding (tied)

    @classmethod
    def from_hf(cls, hf_model, make_linear: MakeLinear | None = None) -> "OPTDecoder":
        """On a loaded transformers model's weights."""
        make_linear = make_linear or linear_factory("aten")
        config, decoder = hf_model.config, hf_model.model.decoder
        final = decoder.final_layer_norm
        return cls(
            num_heads=config.num_attention_heads, pre_norm=config.do_layer_norm_before,
            act=activation(config.activation_function), embed=decoder.embed_tokens.weight,
            positions=decoder.embed_positions.weight, project_in=_linear(decoder.project_in, make_linear),
            project_out=_linear(decoder.project_out, make_linear),
            final_norm=None if final is None else LayerNorm.from_hf(final),
            layers=[OPTLayer.from_hf(layer, make_linear) for layer in decoder.layers],
            lm_head=make_linear(hf_model.lm_head.weight, None),
        )

    @classmethod
    def from_checkpoint(cls, config: OPTDecoderConfig, weights: CheckpointWeights,
                        make_linear: MakeLinear | None = None) -> "OPTDecoder":
        """Straight from the safetensors files; the LM head is the embedding when tied or absent."""
        make_linear = make_linear or linear_factory("aten")
        base = weights.prefix("decoder.embed_tokens.weight", ("model.", "")) + "decoder."
        hidden, word, vocab = config.hidden_size, config.word_dim, config.vocab_size
        embed = weights.tensor(base + "embed_tokens.weight", (vocab, word))
        positions = weights.tensor(base + "embed_positions.weight", (config.max_position_embeddings + 2, hidden))
        tied = config.tie_word_embeddings or "lm_head.weight" not in weights  # the head first: see LlamaDecoder's
        lm_head = make_linear(embed if tied else weights.tensor("lm_head.weight", (vocab, word)), None)
        project_in = project_out = final_norm = None
        if word != hidden:
            project_in = make_linear(weights.projection([(base + "project_in.weight", (hidden, word))]), None)
            project_out = make_linear(weights.projection([(base + "project_out.weight", (word, hidden))]), None)
        if config.do_layer_norm_before and not config.remove_final_layer_norm:
            final_norm = LayerNorm.from_checkpoint(weights, base + "final_layer_norm", hidden,
                                                   config.layer_norm_elementwise_affine)
        layers = [OPTLayer.from_checkpoint(weights, f"{base}layers.{i}.", config, make_linear)
                  for i in range(config.num_hidden_layers)]
        return cls(
            num_heads=config.num_attention_heads, pre_norm=config.do_layer_norm_before,
            act=activation(config.activation_function), embed=embed, positions=positions, project_in=project_in,
            project_out=project_out, final_norm=final_norm, layers=layers, lm_head=lm_head,
        )

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
