"""ModelRunner: continuously batched greedy output equals HF generate, token for token."""

from __future__ import annotations

import random

import pytest

from fixtures.step_driver import Request, drive
from llm_byoc.config import EngineConfig
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker.runner import ModelRunner
from worker_reference import hf_greedy

EOS = (2,)


def _prompts(seed: int, lengths: list[int], vocab: int = 384) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def _mixed_requests() -> list[Request]:
    """Different lengths (1 to 70 tokens), arrivals, output lengths; more requests than slots."""
    lengths = [12, 1, 40, 7, 70, 3, 25, 18]
    arrivals = [0, 0, 0, 2, 3, 6, 6, 11]
    new_tokens = [20, 9, 14, 30, 8, 25, 5, 16]
    return [
        Request(f"r{i}", prompt, SamplingParams(max_new_tokens=n), arrive)
        for i, (prompt, arrive, n) in enumerate(zip(_prompts(7, lengths), arrivals, new_tokens))
    ]


@pytest.fixture(scope="module", params=["tiny_opt_dir", "tiny_llama_dir"])
def model_dir(request):
    return request.getfixturevalue(request.param)


def test_continuous_batching_matches_generate(model_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(model_dir), max_num_seqs=4))
    requests = _mixed_requests()
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS)
    assert result.max_running == 4 and result.max_chunks_with_prefill >= 2  # the mix really happened
    for request in requests:
        expected = hf_greedy(model_dir, request.prompt, request.params.max_new_tokens)
        assert result.outputs[request.seq_id] == expected, request.seq_id
    assert runner.num_active == 0


def test_spread_slots_are_gathered(tiny_llama_dir):
    """Decoding slots 0 and 7 of 8 (others idle) takes the gather path and stays exact."""
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=8))
    prompts = _prompts(11, [5, 6, 7, 8, 9, 10, 11, 12])
    new = [NewSequence(f"s{i}", SamplingParams(max_new_tokens=8)) for i in range(8)]
    chunks = [ScheduledChunk(f"s{i}", p, 0, True) for i, p in enumerate(prompts)]
    out = runner.step(StepBatch(0, new, chunks))
    last = {s.seq_id: s.token_id for s in out.samples}
    got = {"s0": [last["s0"]], "s7": [last["s7"]]}
    freed = [f"s{i}" for i in range(1, 7)]
    for step in range(1, 8):
        chunks = [ScheduledChunk(s, [got[s][-1]], len(prompts[int(s[1])]) + step - 1, True) for s in got]
        out = runner.step(StepBatch(step, [], chunks, freed if step == 1 else []))
        for sample in out.samples:
            got[sample.seq_id].append(sample.token_id)
    assert got["s0"] == hf_greedy(tiny_llama_dir, prompts[0], 8)
    assert got["s7"] == hf_greedy(tiny_llama_dir, prompts[7], 8)


def test_repetition_penalty_matches_generate(tiny_llama_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=2))
    prompt = _prompts(3, [10])[0]
    params = SamplingParams(max_new_tokens=20, repetition_penalty=1.5)
    result = drive(runner, [Request("p", prompt, params)], num_slots=2, token_budget=4, eos_token_ids=EOS)
    expected = hf_greedy(tiny_llama_dir, prompt, 20, repetition_penalty=1.5)
    assert result.outputs["p"] == expected
    assert expected != hf_greedy(tiny_llama_dir, prompt, 20)  # the penalty changed something


def test_greedy_logprobs_are_log_softmax_of_model_logits(tiny_opt_dir):
    import torch

    from worker_reference import hf_model

    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_opt_dir), max_num_seqs=1))
    prompt = _prompts(5, [9])[0]
    params = SamplingParams(max_new_tokens=1, logprobs=True)
    out = runner.step(StepBatch(0, [NewSequence("a", params)], [ScheduledChunk("a", prompt, 0, True)]))
    with torch.no_grad():
        logits = hf_model(str(tiny_opt_dir))(torch.tensor([prompt])).logits[0, -1]
    expected = torch.log_softmax(logits, -1)
    assert out.samples[0].token_id == int(expected.argmax())
    assert out.samples[0].logprob == pytest.approx(float(expected.max()), abs=1e-4)


@pytest.mark.parametrize(
    "chunk, message",
    [
        (ScheduledChunk("a", [5, 6], 3, True), "starts at 3, but 0 tokens are cached"),
        (ScheduledChunk("a", [5, 999], 0, True), "token id out of range"),
        (ScheduledChunk("a", [5] * 300, 0, True), "exceed the context of 256"),
        (ScheduledChunk("a", [], 0, True), "empty chunk"),
        (ScheduledChunk("zz", [5], 0, True), "unknown sequence 'zz'"),
    ],
)
def test_a_bad_batch_fails_clearly_and_changes_nothing(tiny_opt_dir, chunk, message):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_opt_dir), max_num_seqs=2))
    batch = StepBatch(0, [NewSequence("a", SamplingParams())], [chunk])
    with pytest.raises(ValueError, match=message):
        runner.step(batch)
    assert runner.num_active == 0
    good = StepBatch(1, [NewSequence("a", SamplingParams())], [ScheduledChunk("a", [5, 6], 0, True)])
    assert len(runner.step(good).samples) == 1


def test_slot_accounting(tiny_opt_dir):
    runner = ModelRunner.from_config(EngineConfig(model=str(tiny_opt_dir), max_num_seqs=2))
    two = [NewSequence("a", SamplingParams()), NewSequence("b", SamplingParams())]
    runner.step(StepBatch(0, two))
    with pytest.raises(ValueError, match="1 new sequences but only 0 free KV slots"):
        runner.step(StepBatch(1, [NewSequence("c", SamplingParams())]))
    with pytest.raises(ValueError, match="already in use"):
        runner.step(StepBatch(2, [NewSequence("a", SamplingParams())], freed=["nobody"]))
    runner.step(StepBatch(3, [NewSequence("c", SamplingParams())], freed=["a", "a"]))  # freed first
    assert runner.num_active == 2
