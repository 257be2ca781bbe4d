"""Llama-family decoder over a step's flattened rows, on the checkpoint's weights.

Covers ``llama`` and the layouts that differ from it only by optional biases
(``qwen2``: q/k/v bias; ``mistral`` while its sliding window is longer than the
context) or by an RMSNorm over each head of q and k before RoPE (``qwen3``), and
``phi3``, whose checkpoints hold q/k/v and gate/up already fused, and ``mixtral``,
whose MLP is routed experts (``moe.py``). Per layer, q/k/v are one fused matmul and gate/up another, so every
projection is one big matmul over all T rows of the step. Built straight from the
safetensors files (``from_checkpoint``, each fused projection read into place) or,
for what that path does not take, from a loaded transformers model (``from_hf``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import cpu_kernels
from ..attention import paged_attention
from ..batch import StepInputs
from ..kv_cache import PagedKVCache
from ..linear import Linear, MakeLinear, linear_factory
from ..lora import LoRAStep
from ..rotation import Rotation
from .activations import activation
from .config import FUSED_CHECKPOINT, LlamaDecoderConfig, layer_windows
from .moe import RoutedExperts
from .rope import LENGTH_ROPE_TYPES, LengthRotary, Rotary
from .weights import CheckpointWeights


_norm_kernel = cpu_kernels.native  # None: torch's rms_norm (benchmarks/decode_attention_ab.py sets it to compare)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF LlamaRMSNorm: normalise in float32, scale in the model dtype. In float32 with one weight per
    feature that is one call (the same products: x * rsqrt(mean(x^2) + eps), then * weight), not four: on the
    CPU the compiled ``rms_norm`` (one call where torch's CPU rms_norm runs eight operators; the sum of squares
    in another order, to a unit or two in the last place), else torch's."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32 and weight.dim() == 1:
        if _norm_kernel is not None and x.device.type == "cpu":
            rows = x.reshape(-1, x.shape[-1]).contiguous()
            out = torch.empty_like(rows)
            _norm_kernel.rms_norm(rows.data_ptr(), weight.contiguous().data_ptr(), out.data_ptr(), rows.shape[0],
                                  rows.shape[1], eps, torch.get_num_threads())
            return out.view(x.shape)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    normed = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return weight * normed.to(x.dtype)


def rope_tables(rotary, h: torch.Tensor, positions: torch.Tensor,
                lengths: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sign-folded sin, [T, 1, D] each, computed once per step for all layers; ``lengths``: each row's
    sequence length as transformers' rotary saw it (a ``LengthRotary``), else None."""
    if lengths is None:
        cos, sin = rotary(h, positions[None])  # [1, T, D], with the config's rope scaling
    else:
        cos, sin = rotary(h, positions[None], lengths)  # [1, T, D], each row with its sequence's table
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos[0, :, None, :], signed_sin[0, :, None, :]


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """RoPE (rotate-half): x*cos + [-x2, x1]*sin == x*cos + [x2, x1]*[-sin1, sin2]. x: [T, heads, D]."""
    return x * cos + torch.roll(x, -(x.shape[-1] // 2), dims=-1) * signed_sin  # [x2, x1] in one op


def head_norms(q_norm: torch.Tensor, k_norm: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """[H + KVH, D]: each q head's norm weight, then each k head's, so one rms_norm covers q and k."""
    return torch.cat((q_norm.expand(num_heads, -1), k_norm.expand(num_kv_heads, -1)))


def _cat_bias(*linears) -> torch.Tensor | None:
    biases = [lin.bias for lin in linears]
    return None if all(b is None for b in biases) else torch.cat(biases)


def _routed_experts(weights: CheckpointWeights, prefix: str, config: LlamaDecoderConfig, projection) -> RoutedExperts:
    """A MoE layer's experts from its checkpoint names: mixtral's block_sparse_moe.gate and experts.N.w1 (gate),
    w3 (up), w2 (down); the Qwen MoEs' mlp.gate and experts.N.gate_proj, up_proj, down_proj, and qwen2_moe's
    shared_expert (gate_proj, up_proj, down_proj) with its shared_expert_gate."""
    hidden, inter, experts = config.hidden_size, config.moe_intermediate_size, range(config.num_experts)
    if config.model_type == "mixtral":
        moe, (gate, up, down) = prefix + "block_sparse_moe.", ("w1", "w3", "w2")
    else:
        moe, (gate, up, down) = prefix + "mlp.", ("gate_proj", "up_proj", "down_proj")
    shared = {}
    if config.shared_expert_intermediate_size:
        width, name = config.shared_expert_intermediate_size, moe + "shared_expert."
        shared = dict(shared_gate_up=projection([(name + "gate_proj", width), (name + "up_proj", width)], hidden, False),
                      shared_down=projection([(name + "down_proj", hidden)], width, False),
                      shared_gate=weights.tensor(moe + "shared_expert_gate.weight", (1, hidden)))
    return RoutedExperts(
        router=weights.tensor(moe + "gate.weight", (config.num_experts, hidden)), top_k=config.experts_per_token,
        gate_up=[projection([(f"{moe}experts.{e}.{gate}", inter), (f"{moe}experts.{e}.{up}", inter)], hidden, False)
                 for e in experts],
        down=[projection([(f"{moe}experts.{e}.{down}", hidden)], inter, False) for e in experts],
        normalize=config.norm_topk_prob, weights_in_model_dtype=config.model_type != "mixtral", **shared)


@dataclass
class LlamaLayer:
    ln_attn: torch.Tensor  # [hidden]
    qkv: Linear  # hidden -> (H + 2*KVH) * D
    o: Linear  # H * D -> hidden
    ln_mlp: torch.Tensor  # [hidden]
    gate_up: Linear | None  # hidden -> 2 * I (None: routed experts instead)
    down: Linear | None  # I -> hidden
    qk_norm: torch.Tensor | None = None  # [H + KVH, D]: qwen3's per-head norm weights of q, then of k
    experts: RoutedExperts | None = None  # mixtral
    folded_norms: tuple[torch.Tensor, torch.Tensor] | None = None  # with a Rotation: the norm scales in q/k/v, gate/up

    @classmethod
    def from_hf(cls, layer, make_linear: MakeLinear) -> "LlamaLayer":
        """On a loaded transformers layer: q/k/v and gate/up fused here unless the model has them fused
        (phi3); the per-head q/k norms (qwen3); routed experts in place of the MLP (mixtral)."""
        attn, mlp = layer.self_attn, layer.mlp
        if hasattr(attn, "qkv_proj"):
            qkv = make_linear(attn.qkv_proj.weight, attn.qkv_proj.bias)
        else:
            qkv = make_linear(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                              _cat_bias(attn.q_proj, attn.k_proj, attn.v_proj))
        qk_norm = None
        if getattr(attn, "q_norm", None) is not None:
            heads = attn.config.num_attention_heads, attn.config.num_key_value_heads
            qk_norm = head_norms(attn.q_norm.weight, attn.k_norm.weight, *heads)
        gate_up = down = experts = None
        if hasattr(mlp, "experts"):  # mixtral's top_k is the block's; the Qwen MoEs' their router's, with norm_topk_prob
            shared = getattr(mlp, "shared_expert", None)
            experts = RoutedExperts(
                router=mlp.gate.weight, top_k=getattr(mlp, "top_k", None) or mlp.gate.top_k,
                gate_up=[make_linear(w, None) for w in mlp.experts.gate_up_proj],
                down=[make_linear(w, None) for w in mlp.experts.down_proj],
                normalize=getattr(mlp.gate, "norm_topk_prob", True),
                weights_in_model_dtype=hasattr(mlp.gate, "norm_topk_prob"),
                shared_gate_up=None if shared is None else make_linear(
                    torch.cat([shared.gate_proj.weight, shared.up_proj.weight]), None),
                shared_down=None if shared is None else make_linear(shared.down_proj.weight, None),
                shared_gate=None if shared is None else mlp.shared_expert_gate.weight)
        else:
            if hasattr(mlp, "gate_up_proj"):
                gate_up = make_linear(mlp.gate_up_proj.weight, mlp.gate_up_proj.bias)
            else:
                gate_up = make_linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                                      _cat_bias(mlp.gate_proj, mlp.up_proj))
            down = make_linear(mlp.down_proj.weight, mlp.down_proj.bias)
        return cls(ln_attn=layer.input_layernorm.weight, qkv=qkv, o=make_linear(attn.o_proj.weight, attn.o_proj.bias),
                   ln_mlp=layer.post_attention_layernorm.weight, gate_up=gate_up, down=down, qk_norm=qk_norm,
                   experts=experts)

    @classmethod
    def from_checkpoint(cls, weights: CheckpointWeights, prefix: str, config: LlamaDecoderConfig,
                        make_linear: MakeLinear, routed: bool = False,
                        rotation: Rotation | None = None) -> "LlamaLayer":
        """Layer ``prefix`` ('model.layers.3.'): each projection read into its fused place, then handed over;
        ``routed``: routed experts in place of its MLP; ``rotation``: folded into the projections as they are
        read (worker/rotation.py; not with routed experts), the norms' scales with them."""
        hidden, inter = config.hidden_size, config.intermediate_size
        q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
        attn, mlp = prefix + "self_attn.", prefix + "mlp."
        qkv = [(attn + "q_proj", q), (attn + "k_proj", kv), (attn + "v_proj", kv)]
        gate_up = [(mlp + "gate_proj", inter), (mlp + "up_proj", inter)]
        if config.model_type in FUSED_CHECKPOINT:
            qkv, gate_up = [(attn + "qkv_proj", q + 2 * kv)], [(mlp + "gate_up_proj", 2 * inter)]
        projection = functools.partial(weights.linear, make_linear)
        experts = _routed_experts(weights, prefix, config, projection) if routed else None
        ln_attn = weights.tensor(prefix + "input_layernorm.weight", (hidden,))
        ln_mlp = weights.tensor(prefix + "post_attention_layernorm.weight", (hidden,))
        folds = dict.fromkeys(("qkv", "o", "gate_up", "down"))
        folded_norms = None
        if rotation is not None and experts is None:
            folds = {"qkv": rotation.reader(ln_attn), "o": rotation.writer,
                     "gate_up": rotation.reader(ln_mlp), "down": rotation.writer}
            folded_norms, ln_attn, ln_mlp = (ln_attn, ln_mlp), torch.ones_like(ln_attn), torch.ones_like(ln_mlp)
        return cls(
            ln_attn=ln_attn,
            qkv=projection(qkv, hidden, config.qkv_bias, folds["qkv"]),
            o=projection([(attn + "o_proj", hidden)], q, config.o_bias, folds["o"]),
            ln_mlp=ln_mlp,
            gate_up=None if experts else projection(gate_up, hidden, config.mlp_bias, folds["gate_up"]),
            down=None if experts else projection([(mlp + "down_proj", hidden)], inter, config.mlp_bias, folds["down"]),
            experts=experts,
            qk_norm=head_norms(weights.tensor(attn + "q_norm.weight", (config.head_dim,)),
                               weights.tensor(attn + "k_norm.weight", (config.head_dim,)),
                               config.num_attention_heads, config.num_key_value_heads) if config.qk_norm else None,
            folded_norms=folded_norms,
        )


class LlamaDecoder:
    """``forward`` -> hidden states [T, hidden]; ``logits`` for the rows that sample."""

    def __init__(self, *, num_heads: int, num_kv_heads: int, head_dim: int, eps: float,
                 act: Callable[[torch.Tensor], torch.Tensor], rotary, embed: torch.Tensor,
                 layers: list[LlamaLayer], norm: torch.Tensor, lm_head: Linear, windows: tuple[int | None, ...] = (),
                 rotation: Rotation | None = None):
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.eps, self.act = eps, act
        self.rotary = rotary  # rotary(x, position_ids) -> cos, sin: rope.Rotary, or transformers' module
        self.embed = embed  # [V, hidden]
        self.layers = layers
        self.norm = norm
        self.lm_head = lm_head  # [V, hidden]; may be the embedding (tied)
        self.sliding = tuple(window is not None for window in windows) or (False,) * len(layers)
        self.sliding_window = next((w for w in windows if w is not None), None)  # one window for all of them
        self.rotation = rotation  # folded into the weights at load (worker/rotation.py); None: none

    @classmethod
    def from_hf(cls, hf_model, make_linear: MakeLinear | None = None) -> "LlamaDecoder":
        """On a loaded transformers model's weights, with its own rotary module."""
        make_linear = make_linear or linear_factory("aten")
        config, decoder = hf_model.config, hf_model.model
        num_heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
        rotary = decoder.rotary_emb  # its module rescales by a batch's longest sequence: ours goes by each row's
        if config.rope_parameters.get("rope_type") in LENGTH_ROPE_TYPES:
            rotary = LengthRotary(config.rope_parameters, head_dim, config.max_position_embeddings,
                                  decoder.embed_tokens.weight.device)
        return cls(
            num_heads=num_heads, num_kv_heads=getattr(config, "num_key_value_heads", None) or num_heads,
            head_dim=head_dim, eps=config.rms_norm_eps, act=activation(config.hidden_act), rotary=rotary,
            embed=decoder.embed_tokens.weight,
            layers=[LlamaLayer.from_hf(layer, make_linear) for layer in decoder.layers],
            norm=decoder.norm.weight, lm_head=make_linear(hf_model.lm_head.weight, None),
            windows=layer_windows(config),
        )

    @classmethod
    def from_checkpoint(cls, config: LlamaDecoderConfig, weights: CheckpointWeights,
                        make_linear: MakeLinear | None = None, rotate: bool = False) -> "LlamaDecoder":
        """Straight from the safetensors files; the LM head is the embedding when tied or absent. ``rotate``: fold
        a Rotation into the weights (for int8 activations; not for routed experts)."""
        make_linear = make_linear or linear_factory("aten")
        hidden = config.hidden_size
        rotation = None
        if rotate and not any(config.routed(i) for i in range(config.num_hidden_layers)):
            rotation = Rotation.for_hidden(hidden)
        norm = weights.tensor(weights.model_prefix() + "norm.weight", (hidden,))
        base, embed, lm_head = weights.embedding_and_head(config.vocab_size, hidden, config.tie_word_embeddings,
                                                          make_linear, rotation.reader(norm) if rotation else None)
        if rotation is not None:
            rotation.embedding(embed)  # after the (tied) head was read from it
            norm = torch.ones_like(norm)
        layers = [LlamaLayer.from_checkpoint(weights, f"{base}layers.{i}.", config, make_linear, config.routed(i),
                                             rotation)
                  for i in range(config.num_hidden_layers)]
        return cls(
            num_heads=config.num_attention_heads, num_kv_heads=config.num_key_value_heads, head_dim=config.head_dim,
            eps=config.rms_norm_eps, act=activation(config.hidden_act),
            rotary=Rotary.from_parameters(config.rope_parameters, config.head_dim, config.max_position_embeddings,
                                          weights.device),
            embed=embed, layers=layers, norm=norm, lm_head=lm_head, windows=layer_windows(config), rotation=rotation,
        )

    def adapter_weights(self, layer: int, point: str, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor,
                                                                                               torch.Tensor]:
        """A LoRA adapter's A [in, r] and B [r, out] at ``point`` of ``layer`` for this decoder's weights:
        as they are, or for the inputs and outputs a Rotation changed."""
        if self.rotation is None:
            return a, b
        norms = self.layers[layer].folded_norms
        norm = {"qkv": norms[0], "gate_up": norms[1]}.get(point)
        return self.rotation.adapter_a(point, a, norm), self.rotation.adapter_b(point, b)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def lora_modules(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each projection a LoRA adapter may target (none with routed experts)."""
        if any(layer.experts is not None for layer in self.layers):
            return {}
        hidden, inter = self.embed.shape[1], self.layers[0].down.in_features
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden),
                "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden)}

    def forward(self, inputs: StepInputs, cache: PagedKVCache, lora: LoRAStep | None = None) -> torch.Tensor:
        if inputs.window != self.sliding_window:
            raise ValueError(f"step inputs built for window {inputs.window}, the model's is {self.sliding_window}")
        h = F.embedding(inputs.token_ids, self.embed)  # [T, hidden]
        cos, sin = rope_tables(self.rotary, h, inputs.positions, inputs.rope_lengths)  # [T, 1, D] each
        local_inputs = inputs.windowed or inputs  # what sliding-window layers attend with
        for index, layer in enumerate(self.layers):
            view = local_inputs if self.sliding[index] else inputs
            h = self._layer(index, layer, h, cos, sin, cache.k[index], cache.v[index], view, lora)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h: [S, hidden] -> [S, V] float32."""
        return self.lm_head(rms_norm(h, self.norm, self.eps)).float()

    def _layer(self, index: int, layer: LlamaLayer, h, cos, sin, k_cache, v_cache, inputs, lora) -> torch.Tensor:
        """One decoder layer; ``lora`` (or None) adds adapter rows' low-rank products to each projection."""
        rows = h.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        x = rms_norm(h, layer.ln_attn, self.eps)
        qkv = layer.qkv(x)  # [T, q + 2 kv]
        if lora is not None:
            lora.add(qkv, x, index, "qkv")
        qk, v = qkv.split([q_size + kv_size, kv_size], dim=-1)
        qk = qk.view(rows, self.num_heads + self.num_kv_heads, self.head_dim)
        if layer.qk_norm is not None:  # each head normalised, as transformers does before RoPE
            qk = rms_norm(qk, layer.qk_norm, self.eps)
        qk = rotate(qk, cos, sin)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)  # [T, H, D], [T, KVH, D]
        v = v.view(rows, self.num_kv_heads, self.head_dim)
        attn = paged_attention(q, k, v, k_cache, v_cache, inputs).reshape(rows, q_size)  # [T, H*D]
        out = layer.o(attn)
        if lora is not None:
            lora.add(out, attn, index, "o")
        h = h + out
        x = rms_norm(h, layer.ln_mlp, self.eps)
        if layer.experts is not None:
            return h + layer.experts(x, self.act)
        gate_up = layer.gate_up(x)  # [T, 2 I]
        if lora is not None:
            lora.add(gate_up, x, index, "gate_up")
        gate, up = gate_up.chunk(2, dim=-1)
        x = self.act(gate) * up
        down = layer.down(x)
        if lora is not None:
            lora.add(down, x, index, "down")
        return h + down
