"""TGI's, LMI's and vLLM's SageMaker settings, read as ours."""

from __future__ import annotations

import json

import pytest

from llm_byoc.config import ConfigError, EngineConfig, ServerConfig
from llm_byoc.config_aliases import ALIASES, adopt_aliases, resolve_aliases


def engine(env: dict) -> EngineConfig:
    return EngineConfig.from_env(resolve_aliases(env).env)


@pytest.mark.parametrize("env, field, value", [
    ({"HF_MODEL_ID": "org/model"}, "model", "org/model"),
    ({"OPTION_MODEL_ID": "s3://bucket/model/"}, "model", "s3://bucket/model/"),
    ({"HF_MODEL_REVISION": "v2"}, "model_revision", "v2"),
    ({"SM_NUM_GPUS": "4"}, "tensor_parallel_size", 4),
    ({"OPTION_TENSOR_PARALLEL_DEGREE": "2"}, "tensor_parallel_size", 2),
    ({"OPTION_TENSOR_PARALLEL_DEGREE": "max"}, "tensor_parallel_size", 0),
    ({"MAX_INPUT_TOKENS": "1000"}, "max_input_tokens", 1000),
    ({"MAX_INPUT_LENGTH": "1000"}, "max_input_tokens", 1000),
    ({"MAX_TOTAL_TOKENS": "2048"}, "max_model_len", 2048),
    ({"OPTION_MAX_MODEL_LEN": "2048"}, "max_model_len", 2048),
    ({"MAX_BATCH_PREFILL_TOKENS": "4096"}, "max_batched_tokens", 4096),
    ({"HF_MODEL_QUANTIZE": "awq"}, "quantization", "awq"),
    ({"HF_MODEL_TRUST_REMOTE_CODE": "True"}, "trust_remote_code", True),
    ({"OPTION_MAX_ROLLING_BATCH_SIZE": "32"}, "max_num_seqs", 32),
    ({"OPTION_DTYPE": "fp16"}, "dtype", "float16"),
    ({"OPTION_DTYPE": "bf16"}, "dtype", "bfloat16"),
    ({"OPTION_ENABLE_LORA": "true"}, "vllm_enable_lora", "true"),
    ({"SM_VLLM_MAX_MODEL_LEN": "1024"}, "max_model_len", 1024),
    ({"SM_VLLM_TENSOR_PARALLEL_SIZE": "8"}, "tensor_parallel_size", 8),
    ({"SM_VLLM_MAX_NUM_SEQS": "16"}, "max_num_seqs", 16),
    ({"SM_VLLM_GPU_MEMORY_UTILIZATION": "0.8"}, "gpu_memory_utilization", 0.8),
    ({"SM_VLLM_DTYPE": "half"}, "dtype", "float16"),
    ({"SM_VLLM_ENABLE_PREFIX_CACHING": "false"}, "enable_prefix_caching", False),
])
def test_each_alias_sets_our_setting(env, field, value):
    assert getattr(engine(env), field) == value
    assert set(resolve_aliases(env).env).isdisjoint(env)  # read once, under our name only


def test_served_model_name_of_vllm():
    assert ServerConfig.from_env(resolve_aliases({"SM_VLLM_SERVED_MODEL_NAME": "m"}).env).served_model_name == "m"


def test_an_equal_pair_is_fine_a_different_pair_is_an_error_naming_both():
    assert engine({"MAX_TOTAL_TOKENS": "2048", "LLM_BYOC_MAX_MODEL_LEN": "2048"}).max_model_len == 2048
    assert engine({"HF_MODEL_TRUST_REMOTE_CODE": "TRUE", "LLM_BYOC_TRUST_REMOTE_CODE": "1"}).trust_remote_code
    with pytest.raises(ConfigError, match="MAX_TOTAL_TOKENS='4096' and LLM_BYOC_MAX_MODEL_LEN='2048'"):
        resolve_aliases({"MAX_TOTAL_TOKENS": "4096", "LLM_BYOC_MAX_MODEL_LEN": "2048"})
    with pytest.raises(ConfigError, match="OPTION_MODEL_ID and HF_MODEL_ID both set LLM_BYOC_MODEL"):
        resolve_aliases({"HF_MODEL_ID": "org/a", "OPTION_MODEL_ID": "org/b"})
    with pytest.raises(ConfigError, match="MAX_INPUT_LENGTH and MAX_INPUT_TOKENS"):
        resolve_aliases({"MAX_INPUT_TOKENS": "10", "MAX_INPUT_LENGTH": "20"})


def test_other_vllm_arguments_go_to_the_engine_args():
    env = {"SM_VLLM_ENFORCE_EAGER": "true", "SM_VLLM_SWAP_SPACE": "4", "SM_VLLM_KV_CACHE_DTYPE": "fp8",
           "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "8192", "LLM_BYOC_VLLM_ENGINE_ARGS": '{"seed": 3}',
           "SM_VLLM_PORT": "8000", "SM_VLLM_TOOL_CALL_PARSER": "hermes"}
    resolved = resolve_aliases(env)
    assert json.loads(resolved.env["LLM_BYOC_VLLM_ENGINE_ARGS"]) == {  # vLLM's own, as vLLM's entrypoint passes them
        "enforce_eager": True, "swap_space": 4, "kv_cache_dtype": "fp8", "max_num_batched_tokens": 8192, "seed": 3}
    assert "SM_VLLM_PORT is ignored: an option of vLLM's API server" in " ".join(resolved.notes)
    assert "SM_VLLM_TOOL_CALL_PARSER is ignored" in " ".join(resolved.notes)
    assert not any(name.startswith("SM_VLLM_") for name in resolved.env)
    assert EngineConfig.from_env(resolved.env).vllm_args["swap_space"] == 4
    with pytest.raises(ConfigError, match="SM_VLLM_SEED=4 and LLM_BYOC_VLLM_ENGINE_ARGS's 'seed'=3 differ"):
        resolve_aliases({"SM_VLLM_SEED": "4", "LLM_BYOC_VLLM_ENGINE_ARGS": '{"seed": 3}'})


def test_bad_values_are_named():
    with pytest.raises(ConfigError, match="OPTION_DTYPE='int4'"):
        resolve_aliases({"OPTION_DTYPE": "int4"})
    with pytest.raises(ConfigError, match="LLM_BYOC_MAX_INPUT_TOKENS .2048. must be below LLM_BYOC_MAX_MODEL_LEN"):
        engine({"MAX_INPUT_TOKENS": "2048", "MAX_TOTAL_TOKENS": "2048"})


def test_settings_without_meaning_here_are_dropped_with_a_note():
    resolved = resolve_aliases({"MAX_BATCH_TOTAL_TOKENS": "100000", "OPTION_ROLLING_BATCH": "lmi-dist"})
    assert resolved.env == {}
    assert any(n.startswith("MAX_BATCH_TOTAL_TOKENS is ignored") for n in resolved.notes)
    assert any(n.startswith("OPTION_ROLLING_BATCH is ignored") for n in resolved.notes)


def test_adopting_rewrites_the_environment_once():
    environ = {"HF_MODEL_ID": "org/m", "SM_NUM_GPUS": "2", "HF_TOKEN": "hf_secret", "PATH": "/bin"}
    notes = adopt_aliases(environ)
    assert environ == {"LLM_BYOC_MODEL": "org/m", "LLM_BYOC_TENSOR_PARALLEL_SIZE": "2", "HF_TOKEN": "hf_secret",
                       "PATH": "/bin"}
    assert notes == ["HF_MODEL_ID read as LLM_BYOC_MODEL=org/m", "SM_NUM_GPUS read as LLM_BYOC_TENSOR_PARALLEL_SIZE=2"]
    assert adopt_aliases(environ) == [] and "hf_secret" not in " ".join(notes)


def test_every_alias_is_documented():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    for alias in ALIASES:
        assert f"`{alias.name}`" in page, alias.name
