"""SmolLM2-135M: continuously batched greedy output equals HF generate per prompt, with prefix
caching on and off and with preemption forced by a tiny KV cache (the chat prompts share the
chat template's system prompt, so later questions find it cached)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.runner import ModelRunner

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a KV cache is in one sentence.",
    "List three colors.",
    "Hi!",
    "Give me a short story about a robot who learns to paint, in about fifty words, with a happy ending.",
]


@pytest.fixture(scope="module")
def requests_and_expected(smollm2_dir):
    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
        for q in QUESTIONS
    ]
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    new_tokens = [24, 16, 28, 12, 20, 24]
    requests = [
        Request(f"q{i}", p, SamplingParams(max_new_tokens=n), arrive_step=2 * i)
        for i, (p, n) in enumerate(zip(prompts, new_tokens))
    ]
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    expected = {}
    for request in requests:
        ids = torch.tensor([request.prompt])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=request.params.max_new_tokens)
        expected[request.seq_id] = out[0, ids.shape[1]:].tolist()
    return requests, expected


@pytest.fixture(scope="module")
def runner(smollm2_dir):
    return ModelRunner.from_config(EngineConfig(model=str(smollm2_dir), max_num_seqs=4, kv_cache_memory="256MiB"))


@pytest.mark.parametrize("case", ["prefix caching", "no prefix caching", "preemption"])
def test_mixed_batch_matches_generate(runner, requests_and_expected, case):
    requests, expected = requests_and_expected
    # 7 blocks of 16 tokens: four 50-80-token chats (two blocks of system prompt shared) cannot all grow at once
    pool = {"preemption": 8}.get(case)
    result = drive(runner, requests, num_slots=4, token_budget=32, eos_token_ids=tuple(runner.info.eos_token_ids),
                   prefix_caching=case != "no prefix caching", num_blocks=pool)
    assert result.max_running >= 3 and result.max_chunks_with_prefill >= 1
    assert result.outputs == expected
    cached = sum(result.cached_tokens.values())
    if case == "prefix caching":
        assert cached >= 5 * 16  # the shared system prompt: at least a block for every later question
    if case == "no prefix caching":
        assert cached == 0
    if case == "preemption":
        assert result.preemptions > 0
