"""Sampler: greedy, seeded reproducibility, top-k/top-p support, repetition penalty."""

from __future__ import annotations

import math

import pytest
import torch

from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.sampler import (
    SequenceSampling,
    apply_repetition_penalty,
    filter_top_k_top_p,
    sample,
)

VOCAB = 50


def _state(**kwargs) -> SequenceSampling:
    return SequenceSampling.create(SamplingParams(**kwargs), VOCAB, torch.device("cpu"))


def _logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _draws(state: SequenceSampling, logits: torch.Tensor, n: int) -> list[int]:
    return [sample(logits[None], ["s"], {"s": state})[0].token_id for _ in range(n)]


def test_greedy_is_argmax_for_every_row():
    logits = torch.stack([_logits(i) for i in range(4)])
    states = {f"s{i}": _state() for i in range(4)}
    out = sample(logits, list(states), states)
    assert [s.token_id for s in out] == logits.argmax(-1).tolist()
    assert all(s.logprob is None for s in out)


def test_same_seed_same_tokens_different_seed_differs():
    logits = _logits()
    first = _draws(_state(temperature=1.0, seed=42), logits, 30)
    again = _draws(_state(temperature=1.0, seed=42), logits, 30)
    other = _draws(_state(temperature=1.0, seed=43), logits, 30)
    assert first == again
    assert first != other


def test_top_k_restricts_the_support():
    logits = _logits(1)
    allowed = set(torch.topk(logits, 3).indices.tolist())
    draws = _draws(_state(temperature=5.0, top_k=3, seed=0), logits, 200)
    assert set(draws) <= allowed and len(set(draws)) == 3  # hot temperature: all three show up


def test_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = filter_top_k_top_p(logits, 0, 0.7)
    assert torch.isfinite(kept).tolist() == [True, True, False, False]
    assert torch.isfinite(filter_top_k_top_p(logits, 0, 0.01)).sum() == 1  # the top token always stays


def test_sampled_logprob_is_that_of_the_processed_distribution():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1] + [1e-9] * (VOCAB - 3)))
    state = _state(temperature=1.0, top_k=2, seed=0, logprobs=True)
    out = sample(logits[None], ["s"], {"s": state})[0]
    renormalised = {0: 0.6 / 0.9, 1: 0.3 / 0.9}
    assert out.logprob == pytest.approx(math.log(renormalised[out.token_id]), abs=1e-5)


def test_repetition_penalty_follows_hf_semantics():
    logits = torch.tensor([2.0, -2.0, 1.0, -1.0])
    seen = torch.tensor([True, True, False, False])
    out = apply_repetition_penalty(logits, seen, 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, -1.0]


def test_repetition_penalty_changes_the_greedy_choice():
    logits = torch.zeros(VOCAB)
    logits[7], logits[9] = 3.0, 2.0
    state = _state(repetition_penalty=2.0)
    state.observe(torch.tensor([7, 7, 1]))
    assert sample(logits[None], ["s"], {"s": state})[0].token_id == 9
