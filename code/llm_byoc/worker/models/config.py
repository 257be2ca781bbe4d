"""The settings of a model's config.json that the native decoders use, read without transformers.

Each field takes the default transformers' config class gives it when
config.json leaves it out (they differ by family: Mistral's sliding window is
4096 unless set, Qwen2's is off unless ``use_sliding_window``). Which layers a
window applies to is decided as each family's modeling code decides it
(``layer_windows``: every layer, or the ``layer_types`` the Qwen and Gemma
configs derive). RoPE parameters are standardized as transformers does
(``rope_scaling`` or ``rope_parameters``; ``type`` -> ``rope_type``; a top-level
``rope_theta``; Gemma 3: one set per layer type), so ``check_supported`` reads
them alike from either config.

A config this module cannot take as it stands raises ``NeedsTransformers``; the
worker then loads the model through transformers, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import ModelLoadError

LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3", "phi3", "mixtral", "qwen2_moe", "qwen3_moe")
_SCALED_ROPE = ("llama3", "yarn", "longrope")  # those that read original_max_position_embeddings
# Per family: what transformers' config class assumes when config.json is silent.
_LLAMA_DEFAULTS = {
    "llama": dict(num_key_value_heads=None, max_position_embeddings=2048, sliding_window=None,
                  use_sliding_window=False, head_dim=None, rms_norm_eps=1e-6),
    "mistral": dict(num_key_value_heads=8, max_position_embeddings=4096 * 32, sliding_window=4096,
                    use_sliding_window=True, head_dim=None, rms_norm_eps=1e-6),
    "qwen2": dict(num_key_value_heads=32, max_position_embeddings=32768, sliding_window=4096,
                  use_sliding_window=False, head_dim=None, rms_norm_eps=1e-6),
    "qwen3": dict(num_key_value_heads=32, max_position_embeddings=32768, sliding_window=4096,
                  use_sliding_window=False, head_dim=128, rms_norm_eps=1e-6),
    # phi3 (Phi-3, Phi-4): q/k/v and gate/up fused in the checkpoint; a window whenever one is set
    "phi3": dict(num_key_value_heads=None, max_position_embeddings=4096, sliding_window=None,
                 use_sliding_window=True, head_dim=None, rms_norm_eps=1e-5),
    # mixtral: routed experts in place of the MLP; a window whenever one is set
    "mixtral": dict(num_key_value_heads=8, max_position_embeddings=4096 * 32, sliding_window=None,
                    use_sliding_window=True, head_dim=None, rms_norm_eps=1e-5),
    # the Qwen MoEs: routed experts on every decoder_sparse_step-th layer but mlp_only_layers; qwen3_moe
    # has qwen3's q/k norms but not its head_dim default; qwen2_moe a shared expert and q/k/v biases
    "qwen2_moe": dict(num_key_value_heads=16, max_position_embeddings=32768, sliding_window=4096,
                      use_sliding_window=False, head_dim=None, rms_norm_eps=1e-6),
    "qwen3_moe": dict(num_key_value_heads=4, max_position_embeddings=32768, sliding_window=4096,
                      use_sliding_window=False, head_dim=None, rms_norm_eps=1e-6),
}
_QWEN = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")  # a window only with use_sliding_window
# Families whose layers each take a type (layer_types: sliding or full attention); the others window every layer.
LAYER_TYPED = ("qwen2", "qwen3", "qwen2_moe", "gemma2", "gemma3_text")
FUSED_CHECKPOINT = ("phi3",)  # qkv_proj and gate_up_proj are single tensors in these checkpoints
_ATTENTION_BIAS = ("llama", "qwen3", "qwen3_moe")  # attention_bias puts biases on q, k, v and o
_LLAMA_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_OPT_REQUIRED = ("vocab_size", "hidden_size", "ffn_dim", "num_hidden_layers", "num_attention_heads")


class NeedsTransformers(Exception):
    """This model is one of ours, but only transformers' own loading handles it; the text says why."""


@dataclass(frozen=True)
class LlamaDecoderConfig:
    model_type: str  # one of LLAMA_FAMILY
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str
    rms_norm_eps: float
    max_position_embeddings: int
    rope_parameters: dict = field(hash=False)  # rope_type, rope_theta and the type's own keys
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    use_sliding_window: bool = False
    qk_norm: bool = False  # an RMSNorm over each head of q and of k before RoPE (qwen3)
    num_experts: int = 0  # routed experts in place of the MLP (0: a dense MLP everywhere)
    experts_per_token: int = 0
    moe_intermediate_size: int = 0  # one expert's width (mixtral: intermediate_size)
    shared_expert_intermediate_size: int = 0  # qwen2_moe's shared expert (0: none)
    norm_topk_prob: bool = True  # the top k weights renormalised (mixtral: always)
    decoder_sparse_step: int = 1  # the Qwen MoEs: experts on every step-th layer ...
    mlp_only_layers: tuple[int, ...] = ()  # ... but these, which keep a dense MLP
    layer_types: tuple[str, ...] = ()  # LAYER_TYPED families: "sliding_attention" / "full_attention" per layer

    def routed(self, layer: int) -> bool:
        """Whether layer ``layer`` has routed experts in place of its MLP (as transformers decides)."""
        return (self.num_experts > 0 and layer not in self.mlp_only_layers
                and (layer + 1) % self.decoder_sparse_step == 0)

    def __post_init__(self) -> None:
        _check_attention_decoder(self)

    @classmethod
    def from_json(cls, raw: dict) -> "LlamaDecoderConfig":
        model_type = raw["model_type"]
        _require_keys(raw, _LLAMA_REQUIRED)
        defaults = _LLAMA_DEFAULTS[model_type]
        heads = raw["num_attention_heads"]
        use_window = bool(raw.get("use_sliding_window", defaults["use_sliding_window"]))
        window = raw.get("sliding_window", defaults["sliding_window"])
        max_positions = raw.get("max_position_embeddings", defaults["max_position_embeddings"])
        attention_bias = model_type in _ATTENTION_BIAS and bool(raw.get("attention_bias", False))
        return cls(
            model_type=model_type, vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"], num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", defaults["num_key_value_heads"]) or heads,
            head_dim=raw.get("head_dim") or defaults["head_dim"] or raw["hidden_size"] // heads,
            hidden_act=raw.get("hidden_act", "silu"), rms_norm_eps=float(raw.get("rms_norm_eps", defaults["rms_norm_eps"])),
            max_position_embeddings=max_positions, rope_parameters=rope_parameters(raw, max_positions, model_type),
            qkv_bias=model_type == "qwen2" or attention_bias or (model_type == "qwen2_moe" and bool(raw.get("qkv_bias", True))),
            o_bias=attention_bias,
            mlp_bias=model_type == "llama" and bool(raw.get("mlp_bias", False)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            sliding_window=window if use_window or model_type not in _QWEN else None,
            use_sliding_window=use_window, qk_norm=model_type in ("qwen3", "qwen3_moe"),
            layer_types=_qwen_layer_types(model_type, raw, use_window, window), **_experts(model_type, raw),
        )


def _qwen_layer_types(model_type: str, raw: dict, use_window: bool, window) -> tuple[str, ...]:
    """config.json's layer_types, else as the Qwen configs derive them: qwen2 and qwen3 window the layers from
    max_window_layers on, qwen2_moe every other layer below it; () for the families that window every layer."""
    if model_type not in LAYER_TYPED:
        return ()
    if raw.get("layer_types") is not None:
        return tuple(raw["layer_types"])
    below = int(raw.get("max_window_layers", 28))
    if model_type == "qwen2_moe":
        sliding = [use_window and (i + 1) % 2 == 1 and i < below for i in range(raw["num_hidden_layers"])]
    else:
        sliding = [use_window and window is not None and i >= below for i in range(raw["num_hidden_layers"])]
    return tuple("sliding_attention" if s else "full_attention" for s in sliding)


def layer_windows(config) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: the whole context), as transformers' modeling code decides; from our
    config or transformers' (Qwen2-MoE's writes 0 for no window)."""
    window = getattr(config, "sliding_window", None) or None
    if config.model_type in LAYER_TYPED:
        return tuple(window if kind == "sliding_attention" else None for kind in config.layer_types)
    return (window,) * config.num_hidden_layers


def _check_layer_types(config) -> None:
    if config.model_type in LAYER_TYPED and len(config.layer_types) != config.num_hidden_layers:
        raise ModelLoadError(f"config.json: layer_types names {len(config.layer_types)} layers, "
                             f"not num_hidden_layers ({config.num_hidden_layers})")
    unknown = set(config.layer_types) - {"sliding_attention", "full_attention"}
    if unknown:
        raise ModelLoadError(f"config.json: layer type {sorted(unknown)[0]!r} is not one this engine runs")


def _experts(model_type: str, raw: dict) -> dict:
    """The routed-expert fields of a MoE family, with transformers' defaults."""
    if model_type == "mixtral":
        return dict(num_experts=int(raw.get("num_local_experts", 8)), experts_per_token=int(raw.get("num_experts_per_tok", 2)),
                    moe_intermediate_size=int(raw["intermediate_size"]))
    if model_type in ("qwen2_moe", "qwen3_moe"):
        qwen2 = model_type == "qwen2_moe"
        experts = raw.get("num_experts", raw.get("num_local_experts"))  # the hub's name, then transformers' own
        return dict(num_experts=int(experts if experts is not None else 60 if qwen2 else 128),
                    experts_per_token=int(raw.get("num_experts_per_tok", 4 if qwen2 else 8)),
                    moe_intermediate_size=int(raw.get("moe_intermediate_size", 1408 if qwen2 else 768)),
                    shared_expert_intermediate_size=int(raw.get("shared_expert_intermediate_size", 5632)) if qwen2 else 0,
                    norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
                    decoder_sparse_step=int(raw.get("decoder_sparse_step", 1) or 1),
                    mlp_only_layers=tuple(int(i) for i in raw.get("mlp_only_layers") or ()))
    return {}


@dataclass(frozen=True)
class OPTDecoderConfig:
    vocab_size: int
    hidden_size: int
    ffn_dim: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int = 2048
    word_embed_proj_dim: int | None = None  # None: hidden_size
    do_layer_norm_before: bool = True
    remove_final_layer_norm: bool = False
    activation_function: str = "relu"
    enable_bias: bool = True
    layer_norm_elementwise_affine: bool = True
    tie_word_embeddings: bool = True
    model_type: str = "opt"

    def __post_init__(self) -> None:
        _require_positive(self, "vocab_size", "hidden_size", "ffn_dim", "num_hidden_layers", "num_attention_heads",
                          "max_position_embeddings")
        if self.hidden_size % self.num_attention_heads:
            raise ModelLoadError(f"hidden_size ({self.hidden_size}) is not a multiple of "
                                 f"num_attention_heads ({self.num_attention_heads})")

    @property
    def word_dim(self) -> int:
        return self.word_embed_proj_dim or self.hidden_size

    @classmethod
    def from_json(cls, raw: dict) -> "OPTDecoderConfig":
        _require_keys(raw, _OPT_REQUIRED)
        names = {"max_position_embeddings", "word_embed_proj_dim", "do_layer_norm_before", "activation_function",
                 "enable_bias", "layer_norm_elementwise_affine", "tie_word_embeddings", *_OPT_REQUIRED}
        settings = {name: raw[name] for name in names if name in raw}
        return cls(remove_final_layer_norm=bool(raw.get("_remove_final_layer_norm", False)), **settings)


# Gemma 2 and Gemma 3 (text): what their config classes assume when config.json is silent
_GEMMA_DEFAULTS = {
    "gemma2": dict(max_position_embeddings=8192, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                   sliding_window_pattern=2),
    "gemma3_text": dict(max_position_embeddings=131_072, final_logit_softcapping=None, attn_logit_softcapping=None,
                        sliding_window_pattern=6),
}
_LAYER_TYPES = ("sliding_attention", "full_attention")


@dataclass(frozen=True)
class GemmaDecoderConfig:
    """Gemma 2 / Gemma 3 text: norms of (1 + weight) before and after attention and MLP, an embedding scaled by
    sqrt(hidden), scores scaled by query_pre_attn_scalar**-0.5, soft-capping, sliding and full layers."""

    model_type: str  # gemma2 or gemma3_text
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_act: str  # config.json's hidden_activation
    rms_norm_eps: float
    max_position_embeddings: int
    rope_parameters: dict = field(hash=False)  # gemma2: one set; gemma3_text: one per layer type
    query_pre_attn_scalar: float = 256
    attn_logit_softcapping: float | None = None  # applied by Gemma 2's attention only, as in transformers
    final_logit_softcapping: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    attention_bias: bool = False
    tie_word_embeddings: bool = True
    use_bidirectional_attention: bool = False

    def __post_init__(self) -> None:
        _check_attention_decoder(self)

    @classmethod
    def from_json(cls, raw: dict) -> "GemmaDecoderConfig":
        model_type = raw["model_type"]
        _require_keys(raw, _LLAMA_REQUIRED)
        defaults = _GEMMA_DEFAULTS[model_type]
        layers = raw["num_hidden_layers"]
        pattern = int(raw.get("sliding_window_pattern", defaults["sliding_window_pattern"]))
        layer_types = raw.get("layer_types") or [_LAYER_TYPES[(i + 1) % pattern == 0] for i in range(layers)]
        max_positions = raw.get("max_position_embeddings", defaults["max_position_embeddings"])
        rope = (rope_parameters(raw, max_positions) if model_type == "gemma2"
                else _gemma3_rope_parameters(raw, max_positions))
        return cls(
            model_type=model_type, vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"], num_hidden_layers=layers,
            num_attention_heads=raw["num_attention_heads"], num_key_value_heads=raw.get("num_key_value_heads", 4),
            head_dim=raw.get("head_dim") or 256, hidden_act=raw.get("hidden_activation", "gelu_pytorch_tanh"),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), max_position_embeddings=max_positions,
            rope_parameters=rope, query_pre_attn_scalar=raw.get("query_pre_attn_scalar", 256),
            attn_logit_softcapping=raw.get("attn_logit_softcapping", defaults["attn_logit_softcapping"]),
            final_logit_softcapping=raw.get("final_logit_softcapping", defaults["final_logit_softcapping"]),
            sliding_window=raw.get("sliding_window", 4096), layer_types=tuple(layer_types),
            attention_bias=bool(raw.get("attention_bias", False)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
            use_bidirectional_attention=bool(raw.get("use_bidirectional_attention") or False),
        )


DecoderConfig = LlamaDecoderConfig | GemmaDecoderConfig | OPTDecoderConfig


def decoder_config(raw: dict) -> DecoderConfig:
    """The typed config of one of our families (``raw["model_type"]`` must be one)."""
    if raw["model_type"] == "opt":
        return OPTDecoderConfig.from_json(raw)
    if raw["model_type"] in _GEMMA_DEFAULTS:
        return GemmaDecoderConfig.from_json(raw)
    return LlamaDecoderConfig.from_json(raw)


def rope_sets(params: dict) -> list[dict]:
    """The RoPE parameter sets of a config's ``rope_parameters``: one, or one per layer type (Gemma 3)."""
    if params and all(key in _LAYER_TYPES for key in params):
        return [value for value in params.values() if isinstance(value, dict)]
    return [params]


def _gemma3_rope_parameters(raw: dict, max_positions: int) -> dict:
    """Gemma 3's RoPE settings per layer type, as Gemma3TextConfig standardizes them: config.json's
    rope_parameters, else rope_scaling on the full-attention layers, rope_theta (default 1e6) there and
    rope_local_base_freq (default 1e4) on the sliding ones."""
    params = raw.get("rope_parameters")
    if params is None:
        params = {kind: {"rope_type": "default"} for kind in _LAYER_TYPES}
    if not isinstance(params, dict) or any(key not in _LAYER_TYPES or not isinstance(value, (dict, type(None)))
                                           for key, value in params.items()):
        raise NeedsTransformers("its RoPE parameters are not one set per layer type")
    full = dict(params.get("full_attention") or {"rope_type": "default"})
    if raw.get("rope_scaling"):
        full.update(raw["rope_scaling"])
    full.setdefault("rope_theta", raw.get("rope_theta", 1_000_000.0))
    local = dict(params.get("sliding_attention") or {"rope_type": "default"})
    local.setdefault("rope_theta", raw.get("rope_local_base_freq", 10_000.0))
    return {"sliding_attention": _standardized(local, raw, max_positions),
            "full_attention": _standardized(full, raw, max_positions)}


def rope_parameters(raw: dict, max_positions: int, model_type: str = "") -> dict:
    """config.json's RoPE settings as transformers standardizes them (flat, one set for every layer).

    Phi3Config as transformers 5 reads it: ``su`` and ``yarn`` are ``longrope`` (the first Phi-3 checkpoints'
    names), and ``original_max_position_embeddings`` is a top-level field, 4096 unless set."""
    params = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    if not isinstance(params, dict) or any(isinstance(value, dict) for value in params.values()):
        raise NeedsTransformers("its RoPE parameters differ by layer type")
    params = dict(params)
    params.setdefault("rope_theta", raw.get("rope_theta", 10000.0))
    return _standardized(params, raw, max_positions, model_type)


def _standardized(params: dict, raw: dict, max_positions: int, model_type: str = "") -> dict:
    """One RoPE set with transformers' defaults: rope_type (from 'type'), partial_rotary_factor, and the
    original context of the scaled types (config.json's top-level value first, as Phi-3 has it)."""
    if raw.get("partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", raw["partial_rotary_factor"])
    params.setdefault("rope_type", params.get("type", "default"))
    top_level = raw.get("original_max_position_embeddings")
    if model_type == "phi3":
        params.setdefault("partial_rotary_factor", 1.0)
        top_level = 4096 if top_level is None else top_level
        if params["rope_type"] in ("su", "yarn"):
            params["rope_type"] = "longrope"
    if params["rope_type"] in _SCALED_ROPE:
        if top_level is not None:  # Phi3-style: the top-level value wins
            params["original_max_position_embeddings"] = top_level
        params.setdefault("original_max_position_embeddings", max_positions)
    return params


def _check_attention_decoder(config) -> None:
    """The checks a Llama-family or Gemma config passes on construction: positive sizes, whole KV head groups,
    one layer type per layer."""
    _require_positive(config, "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings")
    if config.num_attention_heads % config.num_key_value_heads:
        raise ModelLoadError(f"num_attention_heads ({config.num_attention_heads}) is not a multiple of "
                             f"num_key_value_heads ({config.num_key_value_heads})")
    _check_layer_types(config)


def _require_keys(raw: dict, names: tuple[str, ...]) -> None:
    missing = [name for name in names if raw.get(name) is None]
    if missing:
        raise NeedsTransformers(f"config.json does not set {', '.join(missing)}")


def _require_positive(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelLoadError(f"config.json: {name} must be a positive integer, not {value!r}")
