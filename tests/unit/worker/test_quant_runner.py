"""The engine's step with LLM_BYOC_QUANTIZATION=int8 (worker/quant.py) on the tiny Llama: repeatable greedy
output, a sequence's tokens the same alone as in a continuous batch, and LoRA adapters on the int8 base."""

from __future__ import annotations

import random

import pytest

from fixtures.adapters import make_adapter
from fixtures.step_driver import Request, assert_alone_as_batched, drive
from llm_byoc.adapters.peft_folder import BaseShapes, check_adapter
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker import cpu_kernels
from llm_byoc.worker.runner import ModelRunner

EOS = (2,)


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 384) for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def int8_runner(tiny_llama_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=6, max_loras=2,
                                                quantization="int8"))


@pytest.fixture(scope="module")
def float_runner(tiny_llama_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=6, max_loras=2))


def test_the_runner_uses_int8_kernels(int8_runner, float_runner):
    assert int8_runner.info.linear_backend == "int8"
    assert float_runner.info.linear_backend != "int8"


def test_greedy_repeats_and_a_sequence_is_the_same_alone_or_batched(int8_runner):
    requests = [Request(f"r{i}", prompt, SamplingParams(max_new_tokens=12), i % 3)
                for i, prompt in enumerate(_prompts(3, [9, 30, 4, 17, 22, 6]))]
    together = drive(int8_runner, requests, num_slots=6, token_budget=24, eos_token_ids=EOS)
    assert together.max_running >= 4
    again = drive(int8_runner, requests, num_slots=6, token_budget=24, eos_token_ids=EOS)
    assert again.outputs == together.outputs
    for request in requests:
        alone = drive(int8_runner, [Request(request.seq_id, request.prompt, request.params)], num_slots=6,
                      token_budget=24, eos_token_ids=EOS)
        assert alone.outputs[request.seq_id] == together.outputs[request.seq_id], request.seq_id


@pytest.mark.skipif(cpu_kernels.unavailable() is not None, reason=str(cpu_kernels.unavailable()))
def test_a_sequence_s_logprobs_are_the_same_bits_alone_or_batched(int8_runner):
    """int8 projections and the compiled decode attention are both row by row: nothing of a batch's other rows
    (their number, their lengths) reaches a row's result. Prompts are prefilled whole (token budget 256). With
    torch's padded attention instead, logprobs here differ in their last bits."""
    params = SamplingParams(max_new_tokens=12, logprobs=True)
    requests = [Request(f"r{i}", prompt, params) for i, prompt in enumerate(_prompts(3, [9, 30, 4, 17, 22, 6]))]
    assert_alone_as_batched(int8_runner, requests, EOS)


def _prompt_logprobs(runner, prompt: list[int], adapter=None) -> list[float]:
    params = SamplingParams(max_new_tokens=1, prompt_logprobs=0)
    result = drive(runner, [Request("p", prompt, params, 0, adapter)], num_slots=6, token_budget=64, max_loras=2)
    return result.prompt_logprobs["p"].logprobs


def test_a_lora_adapter_adds_its_rows_on_the_int8_base(tiny_llama_dir, tmp_path, int8_runner, float_runner):
    """The prompt's log-probabilities with an adapter: int8 stays close to float32 with the same adapter,
    while the adapter itself moves them much further (so an adapter left out on int8 would fail)."""
    info = int8_runner.info
    shapes = BaseShapes(info.model_type, info.num_layers, {k: tuple(v) for k, v in info.lora_modules.items()})
    folder = make_adapter(tiny_llama_dir, tmp_path / "all8", rank=8, seed=5)
    adapter = check_adapter("all8", str(folder), "all8#1", (str(tmp_path),), 64, shapes)
    prompt = _prompts(4, [40])[0]
    with_float = _prompt_logprobs(float_runner, prompt, adapter)
    with_int8 = _prompt_logprobs(int8_runner, prompt, adapter)
    base_int8 = _prompt_logprobs(int8_runner, prompt)
    quantization_gap = max(abs(a - b) for a, b in zip(with_int8, with_float))
    adapter_effect = max(abs(a - b) for a, b in zip(with_int8, base_int8))
    assert quantization_gap < 0.1
    assert adapter_effect > 5 * quantization_gap


@pytest.mark.parametrize("fixture", ["tiny_mixtral_dir", "tiny_gemma2_dir", "tiny_opt_dir"])
def test_every_native_family_runs_on_int8(request, fixture):
    """Routed experts (one int8 projection per expert), Gemma's norms and OPT's biases."""
    runner = ModelRunner.from_config(EngineConfig(model=str(request.getfixturevalue(fixture)), max_num_seqs=4,
                                                  quantization="int8"))
    assert runner.info.linear_backend == "int8"
    requests = [Request(f"r{i}", prompt, SamplingParams(max_new_tokens=6))
                for i, prompt in enumerate(_prompts(6, [12, 5, 20]))]
    together = drive(runner, requests, num_slots=4, token_budget=64)
    alone = drive(runner, requests[2:], num_slots=4, token_budget=64)
    assert all(len(tokens) == 6 for tokens in together.outputs.values())
    assert alone.outputs["r2"] == together.outputs["r2"]
