"""Native RoPE tables equal transformers' rotary modules bit for bit, for each RoPE type we build."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

from llm_byoc.worker.models.config import LlamaDecoderConfig
from llm_byoc.worker.models.rope import Rotary, rope_unsupported

SHAPE = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}
ROPES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "default-smollm2-theta": {"rope_type": "default", "rope_theta": 100000.0},
    "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500000.0},
    "yarn": YARN,
    "yarn-mscale": dict(YARN, mscale=0.707, mscale_all_dim=1.0),
    "yarn-attention-factor": dict(YARN, attention_factor=1.25, beta_fast=16, beta_slow=2),
    "yarn-untruncated": dict(YARN, truncate=False),
}
LEGACY = {  # transformers 4.x spelling: rope_scaling with "type", rope_theta beside it
    "linear-v4": {"rope_scaling": {"type": "linear", "factor": 3.0}, "rope_theta": 50000.0},
    "yarn-v4": {"rope_scaling": {"type": "yarn", "factor": 2.0}, "rope_theta": 10000.0},
    "theta-only-v4": {"rope_theta": 1000000.0},
}


def _configs(tmp_path, model_type: str, raw_rope: dict):
    """(transformers' config, ours) from the same config.json."""
    folder = tmp_path / model_type
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(dict(SHAPE, model_type=model_type, **raw_rope)))
    raw = json.loads((folder / "config.json").read_text())
    return AutoConfig.from_pretrained(str(folder)), LlamaDecoderConfig.from_json(raw)


def _assert_tables_equal(hf_rotary, ours: LlamaDecoderConfig) -> None:
    rotary = Rotary.from_parameters(ours.rope_parameters, ours.head_dim, ours.max_position_embeddings,
                                    torch.device("cpu"))
    positions = torch.arange(300)[None]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.empty(0, dtype=dtype)
        for expected, got in zip(hf_rotary(x, positions), rotary(x, positions)):
            assert got.dtype == expected.dtype and torch.equal(got, expected), dtype


@pytest.mark.parametrize("name", sorted(ROPES))
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_tables_equal_transformers(name, model_type, tmp_path):
    hf_config, ours = _configs(tmp_path, model_type, {"rope_parameters": ROPES[name]})
    assert ours.rope_parameters == hf_config.rope_parameters
    module = LlamaRotaryEmbedding if model_type == "llama" else Qwen2RotaryEmbedding
    _assert_tables_equal(module(hf_config), ours)


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_legacy_rope_settings_read_as_transformers_reads_them(name, tmp_path):
    hf_config, ours = _configs(tmp_path, "llama", LEGACY[name])
    assert ours.rope_parameters == hf_config.rope_parameters
    _assert_tables_equal(LlamaRotaryEmbedding(hf_config), ours)


def test_head_dim_of_its_own(tmp_path):
    hf_config, ours = _configs(tmp_path, "llama", {"head_dim": 32, "rope_parameters": ROPES["yarn"]})
    assert ours.head_dim == 32
    _assert_tables_equal(LlamaRotaryEmbedding(hf_config), ours)


def test_the_tables_of_a_model_loaded_in_bfloat16(tiny_llama_dir):
    """from_pretrained in bfloat16 keeps inv_freq in float32: so do we."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir), dtype=torch.bfloat16)
    ours = LlamaDecoderConfig.from_json(json.loads((tiny_llama_dir / "config.json").read_text()))
    _assert_tables_equal(model.model.rotary_emb, ours)


@pytest.mark.parametrize(("params", "reason"), [
    ({"rope_type": "proportional", "rope_theta": 1e4}, "'proportional' has no native tables"),
    ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}, "'dynamic' has no native tables"),
    ({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4, "partial_rotary_factor": 0.5}, "rotates part"),
    ({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}, None),  # transformers ignores it
    ({"rope_type": "llama3", "rope_theta": 1e4}, None),
])
def test_what_the_native_tables_do_not_cover(params, reason):
    found = rope_unsupported(params, 16)
    assert found == reason if reason is None else reason in found
