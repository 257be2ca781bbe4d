"""Native RoPE tables equal transformers' rotary modules bit for bit, for each RoPE type we build."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

from llm_byoc.worker.models.config import LlamaDecoderConfig
from llm_byoc.protocol import RopeByLength
from llm_byoc.worker.models.rope import LengthRotary, Rotary, rope_by_length, rope_unsupported

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
    ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}, None),
    ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4, "partial_rotary_factor": 0.5}, "rotates part"),
    ({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4, "partial_rotary_factor": 0.5}, "rotates part"),
    ({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}, None),  # transformers ignores it
    ({"rope_type": "llama3", "rope_theta": 1e4}, None),
])
def test_what_the_native_tables_do_not_cover(params, reason):
    found = rope_unsupported(params, 16)
    assert found == reason if reason is None else reason in found


# --- RoPE by the sequence's length ---------------------------------------------------------------------------

LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.7, 2.0, 2.6, 3.1, 4.0],
            "long_factor": [1.0, 1.5, 2.2, 3.0, 4.5, 6.0, 9.0, 12.0]}
DYNAMIC = {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0}


def _length_configs(tmp_path, kind: str):
    """(transformers' rotary module, our config): a Phi-3 with longrope past 24 tokens, or a dynamic Llama."""
    if kind == "longrope":
        raw = {"rope_scaling": dict(LONGROPE, type="longrope"), "original_max_position_embeddings": 24}
        hf_config, ours = _configs(tmp_path, "phi3", raw)
        return Phi3RotaryEmbedding(hf_config), ours
    hf_config, ours = _configs(tmp_path, "llama", {"rope_parameters": DYNAMIC})
    return LlamaRotaryEmbedding(hf_config), ours


def _hf_forward(module, length: int, positions: list[int], dtype):
    """What ``generate`` of one sequence runs: a fresh module, the forward's own length, these positions."""
    module.max_seq_len_cached = module.original_max_seq_len
    module.register_buffer("inv_freq", module.original_inv_freq.clone(), persistent=False)
    if positions[-1] + 1 < length:  # the forward's length comes from its highest position: give it that one
        positions = positions + [length - 1]
        cos, sin = module(torch.empty(0, dtype=dtype), torch.tensor([positions]))
        return cos[:, :-1], sin[:, :-1]
    return module(torch.empty(0, dtype=dtype), torch.tensor([positions]))


@pytest.mark.parametrize("kind", ["longrope", "dynamic"])
def test_each_row_gets_the_table_of_its_own_length(kind, tmp_path):
    """One call for rows of several sequences equals transformers' module run on each sequence's forward alone:
    a prefill over its prompt (its length: the prompt's), or a decode at position p (length p + 1)."""
    hf_rotary, ours = _length_configs(tmp_path, kind)
    assert ours.rope_parameters == hf_rotary.config.rope_parameters
    rotary = Rotary.from_parameters(ours.rope_parameters, ours.head_dim, ours.max_position_embeddings,
                                    torch.device("cpu"))
    assert isinstance(rotary, LengthRotary) and rotary.attention_scaling == hf_rotary.attention_scaling
    threshold = 24 if kind == "longrope" else ours.max_position_embeddings
    rows = [(length, list(range(length))) for length in (5, threshold, threshold + 1, threshold + 40)]
    rows += [(p + 1, [p]) for p in (3, threshold - 1, threshold, threshold + 9, 2 * threshold + 77)]
    rows += [(threshold + 30, list(range(8, 16)))]  # a later prompt chunk: its length is the whole prompt's
    for dtype in (torch.float32, torch.bfloat16):
        positions = torch.tensor([p for _, span in rows for p in span])[None]
        lengths = [length for length, span in rows for _ in span]
        cos, sin = rotary(torch.empty(0, dtype=dtype), positions, lengths)
        row = 0
        for length, span in rows:
            expected_cos, expected_sin = _hf_forward(hf_rotary, length, span, dtype)
            assert torch.equal(cos[:, row:row + len(span)], expected_cos), (length, span[0])
            assert torch.equal(sin[:, row:row + len(span)], expected_sin), (length, span[0])
            row += len(span)
        longer = rotary(torch.empty(0, dtype=dtype), positions[:, :5], [threshold + 2] * 5)[0]
        assert not torch.equal(cos[:, :5], longer)  # the same positions, rotated for a longer sequence


def test_what_the_engine_is_told(tmp_path):
    _, phi3 = _length_configs(tmp_path, "longrope")
    _, llama = _length_configs(tmp_path, "dynamic")
    longrope = rope_by_length(phi3.rope_parameters, phi3.max_position_embeddings, "phi3")
    assert longrope == RopeByLength("longrope", 24, True)  # Phi-3's generate recomputes past the threshold
    assert rope_by_length(phi3.rope_parameters, 256, "llama") == RopeByLength("longrope", 24, False)
    assert rope_by_length(llama.rope_parameters, 256, "llama") == RopeByLength("dynamic", 256, False)
    assert rope_by_length(ROPES["llama3"], 256, "llama") is None
    # prefix-cache key spaces: every short (or unscaled) table is one; longrope's long one; dynamic: per length
    assert longrope.cache_key(3) == longrope.cache_key(24) != longrope.cache_key(25) == longrope.cache_key(900)
    dynamic = RopeByLength("dynamic", 256, False)
    assert dynamic.cache_key(1) == dynamic.cache_key(256) != dynamic.cache_key(257) != dynamic.cache_key(258)


@pytest.mark.parametrize(("scaling", "expected"), [
    ({"type": "su"}, "longrope"), ({"type": "yarn"}, "longrope"), ({"type": "longrope"}, "longrope"),
])
def test_phi3_reads_its_old_rope_names_and_default_original_length_as_transformers(scaling, expected, tmp_path):
    hf_config, ours = _configs(tmp_path, "phi3", {"rope_scaling": dict(LONGROPE, **scaling)})
    assert ours.rope_parameters == hf_config.rope_parameters
    assert ours.rope_parameters["rope_type"] == expected
    assert ours.rope_parameters["original_max_position_embeddings"] == 4096
