"""Sizing the KV cache from memory: CPU settings, the GPU's share, the pool's bounds."""

from __future__ import annotations

import pytest
import torch

from llm_byoc.config import EngineConfig
from llm_byoc.errors import ModelLoadError
from llm_byoc.worker import kv_sizing
from llm_byoc.worker.kv_sizing import bytes_per_token, cpu_kv_budget, cuda_kv_budget, size_kv_cache
from llm_byoc.worker.runner import ModelRunner, profile_step

GiB = 1024**3
CPU = torch.device("cpu")


def test_bytes_per_token_counts_keys_and_values_of_every_layer():
    assert bytes_per_token(30, 3, 64, torch.float32) == 2 * 30 * 3 * 64 * 4  # SmolLM2-135M: 45 KiB
    assert bytes_per_token(32, 8, 128, torch.bfloat16) == 2 * 32 * 8 * 128 * 2  # Llama-3-8B: 128 KiB


@pytest.mark.parametrize("setting, limit, available, expected", [
    ("auto", 16 * GiB, 12 * GiB, int(0.2 * 16 * GiB)),  # a fifth of the container's limit
    ("auto", None, 10 * GiB, 2 * GiB),  # no limit: a fifth of what is available
    ("auto", 16 * GiB, 4 * GiB, 2 * GiB),  # never more than half of what is left
    ("0.5", 8 * GiB, 6 * GiB, 4 * GiB),
    ("0.9", 8 * GiB, 4 * GiB, int(0.9 * 4 * GiB)),  # a share that does not fit is clipped
    ("1GiB", 8 * GiB, 4 * GiB, GiB),
])
def test_cpu_budget(setting, limit, available, expected):
    budget, how = cpu_kv_budget(setting, limit, available)
    assert budget == expected and how


def test_a_cpu_size_that_does_not_fit_is_a_load_error():
    with pytest.raises(ModelLoadError, match="asks for 6.00 GiB of KV cache, but only 4.00 GiB"):
        cpu_kv_budget("6GiB", None, 4 * GiB)


def test_cuda_budget_is_the_share_less_what_is_in_use_and_a_step():
    budget, how = cuda_kv_budget(0.9, free=20 * GiB, total=24 * GiB, activation_peak=GiB)
    assert budget == int(0.9 * 24 * GiB) - 4 * GiB - GiB
    assert "0.9" in how
    with pytest.raises(ModelLoadError, match="no GPU memory is left"):  # Llama-3-8B bf16 on a 16 GB card
        cuda_kv_budget(0.9, free=int(0.5 * GiB), total=16 * GiB, activation_peak=GiB)


def test_the_pool_is_capped_at_a_few_contexts_per_batch_slot():
    config = EngineConfig(model="m", max_num_seqs=2, kv_cache_memory="1GiB", kv_block_size=16)
    size = size_kv_cache(config, per_token=512, max_model_len=64, max_num_seqs=2, device=CPU)
    assert size.num_blocks == kv_sizing.POOL_CEILING_PER_SEQ * 2 * 4 + 1 and "capped" in size.how


def test_an_auto_pool_holds_what_the_batch_can_use():
    config = EngineConfig(model="m", max_num_seqs=2, kv_block_size=16)  # auto: a fifth of memory, far more
    size = size_kv_cache(config, per_token=512, max_model_len=64, max_num_seqs=2, device=CPU)
    assert size.num_blocks == 2 * 4 + 1 and "what the batch can use (2 x 64 tokens)" in size.how


def test_a_pool_that_cannot_hold_one_full_sequence_fails_the_load():
    config = EngineConfig(model="m", kv_cache_memory="1MiB")
    with pytest.raises(ModelLoadError, match=r"holds \d+ tokens at 45.0 KiB a token, less than one sequence of "
                                             r"the context length 4096"):
        size_kv_cache(config, per_token=46080, max_model_len=4096, max_num_seqs=64, device=CPU)


def test_the_runner_reports_its_cache(tiny_llama_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2, kv_cache_memory="256KiB"))
    info = runner.info
    assert info.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4  # K+V, layers, kv heads, head dim, fp32
    assert info.num_kv_blocks == 256 * 1024 // (512 * 16) + 1 and info.kv_block_size == 16
    assert runner.cache.k[0].shape == (info.num_kv_blocks * 16, 2, 16)
    assert info.kv_cache_bytes == info.num_kv_blocks * 16 * 512


def test_the_profile_step_runs_the_largest_step(tiny_opt_dir):
    """What CUDA sizing measures; runs on CPU too (no memory figures there)."""
    from llm_byoc.worker.loading import load_model

    config = EngineConfig(model=str(tiny_opt_dir), max_batched_tokens=64, max_num_seqs=4)
    profile_step(load_model(config), config)
