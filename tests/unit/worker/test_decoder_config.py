"""config.json read without transformers gives the values transformers' config classes give."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from transformers import (
    AutoConfig,
    Gemma2Config,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    OPTConfig,
    Phi3Config,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from llm_byoc.errors import ModelLoadError
from llm_byoc.worker.models import check_supported, native_unsupported
from llm_byoc.worker.models.config import (
    GemmaDecoderConfig,
    LlamaDecoderConfig,
    NeedsTransformers,
    OPTDecoderConfig,
    decoder_config,
    layer_windows,
)

SMALL = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
HF_CONFIGS = {
    "llama": LlamaConfig(**SMALL),
    "llama-gqa-tied-biases": LlamaConfig(**SMALL, num_key_value_heads=2, tie_word_embeddings=True,
                                         attention_bias=True, mlp_bias=True, rms_norm_eps=1e-5, head_dim=32),
    "mistral-default-window": MistralConfig(**SMALL, num_key_value_heads=4),
    "mistral-no-window": MistralConfig(**SMALL, num_key_value_heads=2, sliding_window=None, hidden_act="gelu"),
    "qwen2": Qwen2Config(**SMALL, num_key_value_heads=4),
    "qwen2-window": Qwen2Config(**SMALL, num_key_value_heads=2, use_sliding_window=True, sliding_window=64,
                                max_window_layers=0),
    "qwen2-window-upper-layers": Qwen2Config(**SMALL, num_key_value_heads=2, use_sliding_window=True,
                                             sliding_window=16, max_window_layers=1),
    "qwen2-window-unused": Qwen2Config(**SMALL, num_key_value_heads=2, sliding_window=16, max_window_layers=0),
    "qwen3-window-layer-types": Qwen3Config(**SMALL, num_key_value_heads=2, use_sliding_window=True,
                                            sliding_window=16, layer_types=["sliding_attention", "full_attention"]),
    "qwen3": Qwen3Config(**SMALL, num_key_value_heads=2),  # head_dim 128 unless set, not hidden / heads
    "qwen3-biases-head-dim-tied": Qwen3Config(**SMALL, num_key_value_heads=2, attention_bias=True, head_dim=32,
                                              tie_word_embeddings=True),
    "phi3": Phi3Config(**SMALL, num_key_value_heads=2),
    "phi3-gqa-tied": Phi3Config(**SMALL, num_key_value_heads=1, tie_word_embeddings=True, rms_norm_eps=1e-6),
    "mixtral": MixtralConfig(**SMALL, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    "mixtral-window": MixtralConfig(**SMALL, num_key_value_heads=2, sliding_window=100),
    "phi3-window": Phi3Config(**SMALL, num_key_value_heads=2, sliding_window=100),  # Phi-3-mini-4k sets one
    "qwen3_moe": Qwen3MoeConfig(**SMALL),  # every default of its own: 128 experts, 8 per token, 4 KV heads
    "qwen3_moe-set": Qwen3MoeConfig(**SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=32, norm_topk_prob=True, mlp_only_layers=[1],
                                    decoder_sparse_step=1, attention_bias=True, head_dim=32),
    "qwen2_moe": Qwen2MoeConfig(**SMALL, num_key_value_heads=4),  # its default of 16 does not divide 4 heads
    "qwen2_moe-window": Qwen2MoeConfig(**SMALL, num_key_value_heads=4, use_sliding_window=True, sliding_window=16,
                                       max_window_layers=4),
    "qwen2_moe-set": Qwen2MoeConfig(**SMALL, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                    moe_intermediate_size=32, shared_expert_intermediate_size=96,
                                    decoder_sparse_step=2, qkv_bias=False),
}
# Each layer's window as transformers' modeling code applies it (every layer: Mistral, Mixtral, Phi-3; layer_types:
# Qwen2 from max_window_layers on, Qwen2-MoE every other layer below it, Gemma as its pattern says).
EXPECTED_WINDOWS = {
    "llama": (None, None), "mistral-default-window": (4096, 4096), "mistral-no-window": (None, None),
    "qwen2": (None, None), "qwen2-window": (64, 64), "qwen2-window-upper-layers": (None, 16),
    "qwen2-window-unused": (None, None), "qwen3-window-layer-types": (16, None), "qwen2_moe-window": (16, None),
    "mixtral-window": (100, 100), "phi3-window": (100, 100), "qwen3_moe": (None, None),
    "gemma2": (4096, None), "gemma2-set": (None, 8), "gemma3": (4096, 4096),
    "gemma3-set": (8, 8, None, 8, 8, None, 8),
}
GEMMA_CONFIGS = {
    "gemma2": Gemma2Config(**SMALL),  # its own defaults: head_dim 256, 4 KV heads, caps 50 and 30, window 4096
    "gemma2-set": Gemma2Config(**SMALL, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=20, sliding_window=8,
                               attn_logit_softcapping=None, final_logit_softcapping=None, attention_bias=True,
                               layer_types=["full_attention", "sliding_attention"], tie_word_embeddings=False,
                               hidden_activation="gelu", rms_norm_eps=1e-5, max_position_embeddings=512),
    "gemma3": Gemma3TextConfig(**SMALL),  # a pattern of 6: both layers sliding; RoPE theta 1M and 10k
    "gemma3-set": Gemma3TextConfig(**dict(SMALL, num_hidden_layers=7), num_key_value_heads=1, head_dim=32,
                                   sliding_window=8, sliding_window_pattern=3, final_logit_softcapping=30.0,
                                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                                                    "full_attention": {"rope_type": "yarn", "factor": 4.0,
                                                                       "rope_theta": 5e5}}),
}
GEMMA_FIELDS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "max_position_embeddings",
                "rope_parameters", "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                "sliding_window", "attention_bias", "tie_word_embeddings")
MOE_FIELDS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
              "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers")
OPT_CONFIGS = {
    "opt": OPTConfig(vocab_size=384, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4),
    "opt-350m-like": OPTConfig(vocab_size=384, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                               word_embed_proj_dim=32, do_layer_norm_before=False, tie_word_embeddings=False,
                               enable_bias=False, layer_norm_elementwise_affine=False, activation_function="gelu"),
}


def _round_trip(hf_config, tmp_path):
    """(transformers' config, ours) read back from the config.json transformers writes (its defaults left out)."""
    hf_config.save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    return AutoConfig.from_pretrained(str(tmp_path)), decoder_config(raw), raw


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_llama_family_fields_match_transformers(name, tmp_path):
    hf, ours, _ = _round_trip(HF_CONFIGS[name], tmp_path)
    assert isinstance(ours, LlamaDecoderConfig)
    for field in ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "hidden_act", "rms_norm_eps",
                  "max_position_embeddings", "rope_parameters", "tie_word_embeddings", "sliding_window"):
        theirs = getattr(hf, field, None)
        if field == "sliding_window" and hf.model_type == "qwen2_moe":
            theirs = theirs or None  # Qwen2MoeConfig writes 0 for "no window"
        assert getattr(ours, field) == theirs, field
    assert ours.head_dim == (getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads)
    assert ours.qkv_bias == (hf.model_type == "qwen2" or getattr(hf, "attention_bias", False)
                             or getattr(hf, "qkv_bias", False))
    assert ours.mlp_bias == getattr(hf, "mlp_bias", False)
    assert ours.o_bias == (hf.model_type in ("llama", "qwen3", "qwen3_moe") and getattr(hf, "attention_bias", False))
    assert ours.qk_norm == (hf.model_type in ("qwen3", "qwen3_moe"))
    if hf.model_type == "mixtral":
        assert (ours.num_experts, ours.experts_per_token) == (hf.num_local_experts, hf.num_experts_per_tok)
    elif hf.model_type.endswith("_moe"):
        theirs = {f: getattr(hf, f, 0) for f in MOE_FIELDS}
        theirs["mlp_only_layers"] = tuple(theirs["mlp_only_layers"] or ())
        assert dict(zip(MOE_FIELDS, (ours.num_experts, ours.experts_per_token, ours.moe_intermediate_size,
                                     ours.shared_expert_intermediate_size, ours.norm_topk_prob,
                                     ours.decoder_sparse_step, ours.mlp_only_layers), strict=True)) == theirs
        assert [ours.routed(i) for i in range(4)] == [  # transformers' own rule in each decoder layer
            i not in theirs["mlp_only_layers"] and (i + 1) % hf.decoder_sparse_step == 0 for i in range(4)]
    else:
        assert (ours.num_experts, ours.experts_per_token) == (0, 0)


@pytest.mark.parametrize("name", sorted(GEMMA_CONFIGS))
def test_gemma_fields_match_transformers(name, tmp_path):
    hf, ours, _ = _round_trip(GEMMA_CONFIGS[name], tmp_path)
    assert isinstance(ours, GemmaDecoderConfig)
    for field in GEMMA_FIELDS:
        assert getattr(ours, field) == getattr(hf, field, None), field
    assert (ours.hidden_act, list(ours.layer_types)) == (hf.hidden_activation, hf.layer_types)
    assert ours.use_bidirectional_attention == bool(hf.use_bidirectional_attention)  # Gemma 2 writes None


def test_a_gemma3_config_of_the_hub_kind_reads_as_transformers_reads_it(tmp_path):
    """google/gemma-3-1b-it's config.json: rope_scaling for the full layers, rope_local_base_freq for the
    sliding ones, sliding_window_pattern instead of layer_types."""
    raw = dict(SMALL, model_type="gemma3_text", num_hidden_layers=7, head_dim=16, num_key_value_heads=1,
               rope_scaling={"factor": 8.0, "rope_type": "linear"}, rope_theta=1_000_000.0,
               rope_local_base_freq=10_000.0, sliding_window=512, sliding_window_pattern=6,
               query_pre_attn_scalar=256, final_logit_softcapping=None, attn_logit_softcapping=None)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    hf, ours = AutoConfig.from_pretrained(str(tmp_path)), decoder_config(raw)
    for field in GEMMA_FIELDS:
        assert getattr(ours, field) == getattr(hf, field, None), field
    assert list(ours.layer_types) == hf.layer_types
    assert layer_windows(ours) == (512,) * 5 + (None, 512)
    assert ours.rope_parameters["full_attention"] == {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}


@pytest.mark.parametrize("name", sorted(EXPECTED_WINDOWS))
def test_each_layer_gets_the_window_transformers_applies_to_it(name, tmp_path):
    hf, ours, _ = _round_trip({**HF_CONFIGS, **GEMMA_CONFIGS}[name], tmp_path)
    assert layer_windows(ours) == layer_windows(hf) == EXPECTED_WINDOWS[name]


@pytest.mark.parametrize("name", sorted(OPT_CONFIGS))
def test_opt_fields_match_transformers(name, tmp_path):
    hf, ours, _ = _round_trip(OPT_CONFIGS[name], tmp_path)
    assert isinstance(ours, OPTDecoderConfig)
    for field in ("vocab_size", "hidden_size", "ffn_dim", "num_hidden_layers", "num_attention_heads",
                  "max_position_embeddings", "do_layer_norm_before", "activation_function", "enable_bias",
                  "layer_norm_elementwise_affine", "tie_word_embeddings"):
        assert getattr(ours, field) == getattr(hf, field), field
    assert ours.word_dim == hf.word_embed_proj_dim and ours.remove_final_layer_norm == hf._remove_final_layer_norm


@pytest.mark.parametrize("name", sorted(HF_CONFIGS) + sorted(GEMMA_CONFIGS))
def test_check_supported_judges_ours_as_it_judges_transformers(name, tmp_path):
    hf, ours, _ = _round_trip({**HF_CONFIGS, **GEMMA_CONFIGS}[name], tmp_path)
    for max_len in (64, 128, 8192):
        outcomes = []
        for config in (hf, ours):
            try:
                check_supported(config, max_len)
                outcomes.append(None)
            except ModelLoadError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], (max_len, outcomes)


LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}


@pytest.mark.parametrize("config", [
    lambda: LlamaConfig(**SMALL, rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
    lambda: Phi3Config(**SMALL, num_key_value_heads=2, original_max_position_embeddings=32, rope_parameters=LONGROPE),
])
def test_rope_by_length_is_taken_whole_heads_only(config, tmp_path):
    hf, ours, raw = _round_trip(config(), tmp_path)
    for judged in (hf, ours):
        check_supported(judged, 256)
    assert native_unsupported(ours, raw, trust_remote_code=False) is None
    partial = dict(ours.rope_parameters, partial_rotary_factor=0.5)
    with pytest.raises(ModelLoadError, match=f"rope type '{partial['rope_type']}' with partial_rotary_factor 0.5"):
        check_supported(replace(ours, model_type="llama", rope_parameters=partial), 256)


def test_windows_shorter_than_the_context_are_taken_and_partial_rope_and_encoders_refused(tmp_path):
    for name in ("phi3-window", "mixtral-window", "mistral-default-window", "qwen2-window", "gemma3"):
        _, ours, _ = _round_trip({**HF_CONFIGS, **GEMMA_CONFIGS}[name], tmp_path)
        check_supported(ours, 8192)
    dynamic = Gemma3TextConfig(**SMALL, rope_parameters={"sliding_attention": {"rope_type": "default"},
                                                         "full_attention": {"rope_type": "dynamic", "factor": 2.0}})
    with pytest.raises(ModelLoadError, match="rope type 'dynamic'"):
        check_supported(_round_trip(dynamic, tmp_path)[1], 64)
    bidirectional = Gemma3TextConfig(**SMALL, use_bidirectional_attention=True)
    with pytest.raises(ModelLoadError, match="use_bidirectional_attention"):
        check_supported(_round_trip(bidirectional, tmp_path)[1], 64)
    partial = Phi3Config(**SMALL, num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                                          "partial_rotary_factor": 0.75})
    with pytest.raises(ModelLoadError, match="partial_rotary_factor 0.75"):
        check_supported(partial, 64)


def test_what_sends_a_model_through_transformers(tmp_path):
    _, ours, raw = _round_trip(LlamaConfig(**SMALL), tmp_path)
    assert native_unsupported(ours, raw, trust_remote_code=False) is None
    assert "quantized" in native_unsupported(ours, dict(raw, quantization_config={"quant_method": "gptq"}), False)
    assert native_unsupported(ours, dict(raw, auto_map={"AutoModelForCausalLM": "m.M"}), False) is None
    assert "auto_map" in native_unsupported(ours, dict(raw, auto_map={"AutoModelForCausalLM": "m.M"}), True)
    gelu_new = decoder_config(dict(raw, hidden_act="gelu_new"))
    assert "'gelu_new'" in native_unsupported(gelu_new, raw, False)
    with pytest.raises(NeedsTransformers, match="does not set hidden_size"):
        decoder_config({k: v for k, v in raw.items() if k != "hidden_size"})


def test_a_malformed_value_is_a_load_error():
    raw = dict(SMALL, model_type="llama", num_key_value_heads=3)
    with pytest.raises(ModelLoadError, match="not a multiple of num_key_value_heads"):
        decoder_config(raw)
    with pytest.raises(ModelLoadError, match="num_hidden_layers must be a positive integer"):
        decoder_config(dict(SMALL, model_type="llama", num_hidden_layers="2"))
