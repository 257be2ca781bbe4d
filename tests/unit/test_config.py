import pytest

from llm_byoc.config import (
    ConfigError,
    EngineConfig,
    MultiModelConfig,
    TritonConfig,
    ServerConfig,
    parse_memory_budget,
)


def test_defaults_follow_the_sagemaker_contract():
    server = ServerConfig.from_env({})
    assert (server.port, server.workers, server.timeout_s) == (8080, 1, 60)
    assert server.max_payload_bytes == 6 * 1024 * 1024 and not server.multi_model
    engine = EngineConfig.from_env({})
    assert engine.model == "/opt/ml/model" and not engine.trust_remote_code


def test_environment_is_read_into_typed_fields():
    env = {
        "SAGEMAKER_BIND_TO_PORT": "9000",
        "SAGEMAKER_MAX_PAYLOAD_IN_MB": "2",
        "SAGEMAKER_MULTI_MODEL": "TRUE",
        "LLM_BYOC_MODEL": "/models/x.gguf",
        "LLM_BYOC_MAX_NUM_SEQS": "4",
        "LLM_BYOC_TRUST_REMOTE_CODE": "yes",
        "LLM_BYOC_LINEAR_BACKEND": "aten",
        "LLM_BYOC_STEP_TIMEOUT": "0",
        "LLM_BYOC_DECODER": "Generic",
    }
    server, engine = ServerConfig.from_env(env), EngineConfig.from_env(env)
    assert server.port == 9000 and server.max_payload_bytes == 2 * 1024 * 1024 and server.multi_model
    assert engine.model == "/models/x.gguf" and engine.max_num_seqs == 4 and engine.trust_remote_code
    assert engine.linear_backend == "aten" and EngineConfig.from_env({}).linear_backend == "auto"
    assert engine.step_timeout_s == 0 and EngineConfig.from_env({}).step_timeout_s == 300
    parsers = ServerConfig.from_env({"LLM_BYOC_REASONING_PARSER": "None", "LLM_BYOC_TOOL_CALL_PARSER": "mistral"})
    assert (parsers.reasoning_parser, parsers.tool_call_parser) == ("none", "mistral")
    assert (server.reasoning_parser, server.tool_call_parser) == ("auto", "auto")
    assert engine.decoder == "generic" and EngineConfig.from_env({}).decoder == "auto"


@pytest.mark.parametrize(
    "env, name",
    [
        ({"SAGEMAKER_BIND_TO_PORT": "http"}, "SAGEMAKER_BIND_TO_PORT"),
        ({"SAGEMAKER_BIND_TO_PORT": "70000"}, "SAGEMAKER_BIND_TO_PORT"),
        ({"SAGEMAKER_MULTI_MODEL": "maybe"}, "SAGEMAKER_MULTI_MODEL"),
        ({"SAGEMAKER_MODEL_SERVER_WORKERS": "0"}, "SAGEMAKER_MODEL_SERVER_WORKERS"),
        ({"LLM_BYOC_REASONING_PARSER": "deepseek"}, "LLM_BYOC_REASONING_PARSER"),
        ({"LLM_BYOC_TOOL_CALL_PARSER": "pythonic"}, "LLM_BYOC_TOOL_CALL_PARSER"),
    ],
)
def test_bad_server_settings_name_the_variable(env, name):
    with pytest.raises(ConfigError, match=name):
        ServerConfig.from_env(env)


@pytest.mark.parametrize(
    "env, name",
    [
        ({"LLM_BYOC_DTYPE": "float8"}, "LLM_BYOC_DTYPE"),
        ({"LLM_BYOC_DEVICE": "tpu"}, "LLM_BYOC_DEVICE"),
        ({"LLM_BYOC_MAX_NUM_SEQS": "-1"}, "LLM_BYOC_MAX_NUM_SEQS"),
        ({"LLM_BYOC_KV_CACHE_MEMORY": "lots"}, "LLM_BYOC_KV_CACHE_MEMORY"),
        ({"LLM_BYOC_KV_CACHE_MEMORY": "-2GiB"}, "LLM_BYOC_KV_CACHE_MEMORY"),
        ({"LLM_BYOC_GPU_MEMORY_UTILIZATION": "1.5"}, "LLM_BYOC_GPU_MEMORY_UTILIZATION"),
        ({"LLM_BYOC_GPU_MEMORY_UTILIZATION": "most"}, "LLM_BYOC_GPU_MEMORY_UTILIZATION"),
        ({"LLM_BYOC_KV_BLOCK_SIZE": "0"}, "LLM_BYOC_KV_BLOCK_SIZE"),
        ({"LLM_BYOC_PREFIX_CACHING": "sometimes"}, "LLM_BYOC_PREFIX_CACHING"),
        ({"LLM_BYOC_MAX_BATCHED_TOKENS": "8"}, "LLM_BYOC_MAX_BATCHED_TOKENS"),
        ({"LLM_BYOC_PREFILL_CHUNK_TOKENS": "-1"}, "LLM_BYOC_PREFILL_CHUNK_TOKENS"),
        ({"LLM_BYOC_LINEAR_BACKEND": "mkl"}, "LLM_BYOC_LINEAR_BACKEND"),
        ({"LLM_BYOC_STEP_TIMEOUT": "-1"}, "LLM_BYOC_STEP_TIMEOUT"),
        ({"LLM_BYOC_DECODER": "fused"}, "LLM_BYOC_DECODER"),
    ],
)
def test_bad_engine_settings_name_the_variable(env, name):
    with pytest.raises(ConfigError, match=name):
        EngineConfig.from_env(env)


def test_kv_cache_settings():
    default = EngineConfig.from_env({})
    assert (default.kv_cache_memory, default.gpu_memory_utilization, default.kv_block_size) == ("auto", 0.9, 16)
    assert default.enable_prefix_caching and default.max_num_seqs == 0  # 0: the device's default
    custom = EngineConfig.from_env({"LLM_BYOC_KV_CACHE_MEMORY": "2GiB", "LLM_BYOC_PREFIX_CACHING": "false",
                                    "LLM_BYOC_KV_BLOCK_SIZE": "32", "LLM_BYOC_GPU_MEMORY_UTILIZATION": "0.8"})
    assert (custom.kv_cache_memory, custom.enable_prefix_caching, custom.kv_block_size) == ("2GiB", False, 32)
    assert custom.gpu_memory_utilization == 0.8


def test_the_kv_pool_is_committed_at_load_except_in_multi_model_mode():
    assert EngineConfig.from_env({}).kv_cache_commit == "ahead"
    assert EngineConfig.from_env({"LLM_BYOC_KV_CACHE_COMMIT": "load"}).kv_cache_commit == "load"
    assert EngineConfig.from_env({"LLM_BYOC_KV_CACHE_COMMIT": "false"}).kv_cache_commit == "lazy"  # the old booleans
    assert EngineConfig.from_env({"LLM_BYOC_KV_CACHE_COMMIT": "TRUE"}).kv_cache_commit == "load"
    assert MultiModelConfig.from_env({}).engine.kv_cache_commit == "lazy"  # models are measured as they grow
    assert MultiModelConfig().engine.kv_cache_commit == "lazy"
    assert MultiModelConfig.from_env({"LLM_BYOC_KV_CACHE_COMMIT": "ahead"}).engine.kv_cache_commit == "ahead"
    with pytest.raises(ConfigError, match="LLM_BYOC_KV_CACHE_COMMIT must be one of ahead, load, lazy"):
        EngineConfig.from_env({"LLM_BYOC_KV_CACHE_COMMIT": "later"})
    with pytest.raises(ConfigError, match="LLM_BYOC_KV_CACHE_COMMIT"):
        EngineConfig.from_env({"LLM_BYOC_KV_CACHE_COMMIT": "maybe"})
    assert EngineConfig.from_env({}).kv_cache_huge_pages
    assert not EngineConfig.from_env({"LLM_BYOC_KV_CACHE_HUGE_PAGES": "false"}).kv_cache_huge_pages


@pytest.mark.parametrize(
    "raw, expected",
    [("4GiB", 4 * 1024**3), ("512MB", 512 * 1000**2), ("0.5", 500), ("2000", 2000), ("1.5 kib", 1536)],
)
def test_memory_budget_sizes_and_fractions(raw, expected):
    assert parse_memory_budget(raw, total_bytes=1000) == expected


@pytest.mark.parametrize("raw", ["lots", "-1", "0", "GiB"])
def test_bad_memory_budget(raw):
    with pytest.raises(ConfigError, match="LLM_BYOC_MEMORY_BUDGET"):
        parse_memory_budget(raw, total_bytes=1000)


def test_multi_model_config_reads_root_and_budget():
    config = MultiModelConfig.from_env({"LLM_BYOC_MODEL_ROOT": "/srv/models", "LLM_BYOC_MEMORY_BUDGET": "1GiB"})
    assert config.model_root == "/srv/models" and config.memory_budget_bytes == 1024**3


def test_multi_model_backend_start_method_and_triton_settings():
    config = MultiModelConfig.from_env({
        "LLM_BYOC_MULTI_MODEL_BACKEND": "Triton", "LLM_BYOC_WORKER_START": "spawn",
        "LLM_BYOC_TRITON_REPOSITORY": "/srv/triton", "LLM_BYOC_TRITON_HTTP_PORT": "9000",
        "LLM_BYOC_TRITON_GRPC_PORT": "9001", "LLM_BYOC_TRITON_LOAD_TIMEOUT": "30",
        "LLM_BYOC_TRITON_MAX_BATCH_SIZE": "16", "LLM_BYOC_TRITON_BATCH_DELAY_US": "500",
        "LLM_BYOC_TRITON_INSTANCES": "2", "LLM_BYOC_TRITON_SERVER": "/opt/tritonserver/bin/tritonserver",
    })
    assert (config.backend, config.start_method) == ("triton", "spawn")
    assert config.triton == TritonConfig(
        server="/opt/tritonserver/bin/tritonserver", repository="/srv/triton", http_port=9000, grpc_port=9001,
        load_timeout_s=30, max_batch_size=16, batch_delay_us=500, instances=2,
    )
    defaults = MultiModelConfig.from_env({})
    assert (defaults.backend, defaults.start_method, defaults.triton) == ("native", "auto", TritonConfig())


@pytest.mark.parametrize(
    "env, name",
    [
        ({"LLM_BYOC_MULTI_MODEL_BACKEND": "tensorrt"}, "LLM_BYOC_MULTI_MODEL_BACKEND"),
        ({"LLM_BYOC_WORKER_START": "fork"}, "LLM_BYOC_WORKER_START"),
        ({"LLM_BYOC_TRITON_GRPC_PORT": "8000"}, "LLM_BYOC_TRITON_GRPC_PORT"),
        ({"LLM_BYOC_TRITON_MAX_BATCH_SIZE": "0"}, "LLM_BYOC_TRITON_MAX_BATCH_SIZE"),
        ({"LLM_BYOC_TRITON_LOAD_TIMEOUT": "0"}, "LLM_BYOC_TRITON_LOAD_TIMEOUT"),
    ],
)
def test_bad_multi_model_settings_name_the_variable(env, name):
    with pytest.raises(ConfigError, match=name):
        MultiModelConfig.from_env(env)


def test_start_up_adapters_are_required_unless_said_optional():
    assert EngineConfig.from_env({}).adapters_optional is False  # one that cannot be registered fails the start
    assert EngineConfig.from_env({"LLM_BYOC_ADAPTERS_OPTIONAL": "true"}).adapters_optional is True
    assert EngineConfig.from_env({"LLM_BYOC_ADAPTERS_OPTIONAL": ""}).adapters_optional is False
    assert MultiModelConfig.from_env({"LLM_BYOC_ADAPTERS_OPTIONAL": "1"}).engine.adapters_optional is True
    with pytest.raises(ConfigError, match="LLM_BYOC_ADAPTERS_OPTIONAL"):
        EngineConfig.from_env({"LLM_BYOC_ADAPTERS_OPTIONAL": "sometimes"})
