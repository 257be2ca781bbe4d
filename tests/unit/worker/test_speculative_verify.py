"""Speculative decoding (n-gram proposals verified in the worker) end to end on the tiny Llama: greedy
output is generate's token for token, seeded sampling does not depend on what was speculated, the
sampled distribution is unchanged (at the sampler level), and rejected proposals leave no blocks."""

from __future__ import annotations

import math
import random

import pytest
import torch

from fixtures.step_driver import Request, drive, limits_for
from llm_byoc.config import EngineConfig
from llm_byoc.engine.scheduler import Scheduler
from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.runner import ModelRunner
from llm_byoc.worker.sampler import SequenceSampling
from llm_byoc.worker.speculative import verify
from worker_reference import hf_greedy

EOS = (2,)
NGRAM = dict(speculative="ngram", num_speculative_tokens=4, ngram_min=1, ngram_max=3, spec_max_num_seqs=8,
             spec_min_acceptance=0.0)


@pytest.fixture(scope="module")
def runner(tiny_llama_dir):
    return ModelRunner.from_config(EngineConfig(model=str(tiny_llama_dir), max_num_seqs=4))


# Mistral: every layer attends within a 12-token window, and blocks behind it are freed while proposals come and go
@pytest.fixture(scope="module", params=[("tiny_llama_dir", 9), ("tiny_mistral_dir", 7)])
def model_runner(request):
    """(model folder, its runner, a pool small enough to preempt in the middle of accepted runs)."""
    name, tight_pool = request.param
    folder = request.getfixturevalue(name)
    return folder, ModelRunner.from_config(EngineConfig(model=str(folder), max_num_seqs=4)), tight_pool


def _prompts() -> list[list[int]]:
    rng = random.Random(3)
    phrase = [rng.randrange(3, 384) for _ in range(9)]
    return [phrase * 4, [rng.randrange(3, 384) for _ in range(23)], (phrase[3:] + phrase) * 3, phrase * 2 + [7, 8]]


def _requests(params: list[SamplingParams], prefix: str = "r") -> list[Request]:
    return [Request(f"{prefix}{i}", p, sp, arrive) for i, (p, sp, arrive) in
            enumerate(zip(_prompts(), params, [0, 0, 1, 3]))]


def _scheduler(runner, num_blocks=None, **spec) -> Scheduler:
    return Scheduler(limits_for(runner, 4, 24, EOS, num_blocks, **{**NGRAM, **spec}))


def _greedy_params() -> list[SamplingParams]:
    return [SamplingParams(max_new_tokens=n, speculative=s) for n, s in ((40, True), (30, True), (35, False), (25, True))]


@pytest.mark.parametrize("tight", [False, True])  # tight: preemption in the middle of accepted runs
def test_greedy_with_speculation_matches_generate(model_runner, tight):
    model_dir, runner, tight_pool = model_runner
    num_blocks = tight_pool if tight else None
    requests = _requests(_greedy_params())
    scheduler = _scheduler(runner, num_blocks)
    result = drive(runner, requests, num_slots=4, token_budget=24, eos_token_ids=EOS, scheduler=scheduler)
    spec = scheduler.spec_stats()
    assert spec.num_accepted_tokens > 0 and spec.num_accepted_tokens < spec.num_draft_tokens
    if num_blocks:
        assert result.preemptions > 0
    for request in requests:
        expected = hf_greedy(model_dir, request.prompt, request.params.max_new_tokens)
        assert result.outputs[request.seq_id] == expected, request.seq_id
    assert scheduler.kv.pool.num_free == scheduler.kv.pool.num_usable  # every block came back


def test_greedy_logprobs_and_stop_tokens_hold_in_accepted_runs(runner):
    plain = drive(runner, _requests([SamplingParams(max_new_tokens=30, logprobs=True)] * 4), 4, 24, EOS,
                  scheduler=_scheduler(runner, spec_max_num_seqs=0))
    scheduler = _scheduler(runner)
    spec = drive(runner, _requests([SamplingParams(max_new_tokens=30, logprobs=True)] * 4), 4, 24, EOS,
                 scheduler=scheduler)
    assert scheduler.spec_stats().num_accepted_tokens > 0
    assert spec.outputs == plain.outputs
    for seq_id, logprobs in plain.logprobs.items():
        assert spec.logprobs[seq_id] == pytest.approx(logprobs, abs=1e-4)
    # a stop token that the output holds in the middle: it ends there, whatever was accepted after it
    out = plain.outputs["r0"]
    stop = out[len(out) // 2]
    stopped = drive(runner, _requests([SamplingParams(max_new_tokens=30, stop_token_ids=(stop,))] * 4), 4, 24, EOS,
                    scheduler=_scheduler(runner))
    assert stopped.outputs["r0"] == out[: out.index(stop) + 1]


def test_seeded_sampling_does_not_depend_on_speculation(runner):
    params = [SamplingParams(max_new_tokens=30, temperature=0.2, top_k=3, seed=11 + i) for i in range(4)]
    off = drive(runner, _requests(params), 4, 24, EOS, scheduler=_scheduler(runner, speculative="off"))
    scheduler = _scheduler(runner)
    on = drive(runner, _requests(params, "s"), 4, 24, EOS, scheduler=scheduler)
    assert scheduler.spec_stats().num_accepted_tokens > 0
    assert {k.removeprefix("s"): v for k, v in on.outputs.items()} == {k.removeprefix("r"): v for k, v in off.outputs.items()}
    two = drive(runner, _requests(params, "t"), 4, 24, EOS, scheduler=_scheduler(runner, num_speculative_tokens=2))
    assert {k.removeprefix("t"): v for k, v in two.outputs.items()} == {k.removeprefix("r"): v for k, v in off.outputs.items()}


def test_rejection_keeps_the_distribution():
    """Position 0 of a verified chunk with proposal x: the token is x with probability p(x), and otherwise
    p renormalised without x; over 4000 draws it follows p (chi-square, 4 degrees of freedom)."""
    p = torch.tensor([0.4, 0.25, 0.2, 0.1, 0.05])
    logits = torch.log(p).repeat(2, 1)
    state = SequenceSampling.create(SamplingParams(temperature=1.0, seed=None), 5, torch.device("cpu"))
    state.generator.manual_seed(1234)
    counts = torch.zeros(5)
    draws = 4000
    for _ in range(draws):
        counts[verify(logits, [1], state, "s")[0].token_id] += 1
    chi2 = float(((counts - draws * p) ** 2 / (draws * p)).sum())
    assert chi2 < 18.5, (chi2, counts)  # p < 0.001 under the null
    assert math.isclose(float(counts[1]) / draws, 0.25, abs_tol=0.03)


def test_low_acceptance_turns_a_sequence_off(runner):
    requests = [Request("x", _prompts()[1], SamplingParams(max_new_tokens=40))]
    scheduler = _scheduler(runner, spec_min_acceptance=1.0, ngram_min=1)
    drive(runner, requests, 1, 24, EOS, scheduler=scheduler)
    spec = scheduler.spec_stats()
    assert 16 <= spec.num_draft_tokens < 16 + 4  # switched off once 16 proposed tokens fell short
