"""Prompt log-probabilities (SamplingParams.prompt_logprobs) against transformers' forward on the prompt."""

from __future__ import annotations

import random

import pytest
import torch

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_model


def _prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 384) for _ in range(length)]


def _expected(model_dir, prompt: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = hf_model(str(model_dir))(torch.tensor([prompt])).logits[0].float()  # [P, V]
    return torch.log_softmax(logits, -1)


@pytest.fixture(scope="module")
def llama_runner(tiny_llama_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4))


@pytest.mark.parametrize("budget", [8, 13, 64])  # chunked prefill (several chunks, odd sizes) and one chunk
def test_prompt_logprobs_equal_log_softmax_of_the_forward_logits(tiny_llama_dir, llama_runner, budget):
    prompt = _prompt(1, 37)
    temper = SamplingParams(max_new_tokens=3, temperature=0.7, repetition_penalty=1.3, seed=4, prompt_logprobs=3)
    requests = [Request("asks", prompt, temper), Request("other", _prompt(2, 21), SamplingParams(max_new_tokens=3)),
                Request("plain", prompt, SamplingParams(max_new_tokens=3, prompt_logprobs=0), arrive_step=1)]
    result = drive(llama_runner, requests, num_slots=4, token_budget=budget)
    expected = _expected(tiny_llama_dir, prompt)
    own = expected[:-1].gather(1, torch.tensor(prompt[1:])[:, None])[:, 0]  # row i predicts token i + 1
    assert set(result.prompt_logprobs) == {"asks", "plain"}
    for seq_id in ("asks", "plain"):  # the raw distribution: temperature and penalties change nothing
        got = result.prompt_logprobs[seq_id]
        assert len(got.logprobs) == len(prompt) - 1
        assert torch.allclose(torch.tensor(got.logprobs), own, atol=1e-5)
    top = result.prompt_logprobs["asks"].top
    values, ids = expected[:-1].topk(3, dim=-1)
    assert [t.token_ids for t in top] == ids.tolist()
    assert torch.allclose(torch.tensor([t.logprobs for t in top]), values, atol=1e-5)
    assert result.prompt_logprobs["plain"].top is None
    assert result.cached_tokens["plain"] == 0  # it computed its prompt although "asks" had cached it


def test_prompt_logprobs_survive_preemption(tiny_llama_dir, llama_runner):
    prompts = [_prompt(10 + i, 30) for i in range(3)]
    params = SamplingParams(max_new_tokens=20, prompt_logprobs=0)
    requests = [Request(f"r{i}", p, params) for i, p in enumerate(prompts)]
    result = drive(llama_runner, requests, num_slots=3, token_budget=16, num_blocks=9)  # 8 blocks of 16: preempts
    assert result.preemptions > 0
    for i, prompt in enumerate(prompts):
        own = _expected(tiny_llama_dir, prompt)[:-1].gather(1, torch.tensor(prompt[1:])[:, None])[:, 0]
        assert torch.allclose(torch.tensor(result.prompt_logprobs[f"r{i}"].logprobs), own, atol=1e-5)


@pytest.mark.parametrize("model_fixture", ["tiny_opt_dir", "tiny_gpt2_dir"])  # tiny_gpt2: the generic path
def test_prompt_logprobs_on_other_decoders(request, model_fixture):
    model_dir = request.getfixturevalue(model_fixture)
    runner = ModelRunner.from_config(EngineConfig(model=str(model_dir), max_num_seqs=2))
    prompt = _prompt(3, 25)
    result = drive(runner, [Request("a", prompt, SamplingParams(max_new_tokens=2, prompt_logprobs=0))],
                   num_slots=2, token_budget=10)
    own = _expected(model_dir, prompt)[:-1].gather(1, torch.tensor(prompt[1:])[:, None])[:, 0]
    assert torch.allclose(torch.tensor(result.prompt_logprobs["a"].logprobs), own, atol=1e-5)
