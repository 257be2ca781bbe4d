"""Sampler: greedy, seeded reproducibility, top-k/top-p/min-p support, logit_bias, penalties, min_tokens, logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from llm_byoc.protocol import SamplingParams
from llm_byoc.worker.sampler import (
    ARGMAX_SPAN,
    LOGPROB_FLOOR,
    SequenceSampling,
    apply_presence_frequency,
    apply_repetition_penalty,
    argmax_rows,
    filter_top_k_top_p,
    filter_typical,
    sample,
    sample_row,
)

VOCAB = 50
EOS = 2


def _state(**kwargs) -> SequenceSampling:
    return SequenceSampling.create(SamplingParams(**kwargs), VOCAB, torch.device("cpu"))


def _logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def _draws(state: SequenceSampling, logits: torch.Tensor, n: int) -> list[int]:
    return [sample(logits[None], ["s"], {"s": state})[0].token_id for _ in range(n)]


@pytest.mark.parametrize("vocab", [10, 2 * ARGMAX_SPAN, 12 * ARGMAX_SPAN, 3 * ARGMAX_SPAN + 77])
def test_argmax_rows_is_torch_argmax(vocab):
    """Spans or not, with a tail span or not: the first of equal maxima, across spans and within one,
    a NaN as torch counts it, rows all -inf but one token (a token mask), a maximum in the tail."""
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randn(8, vocab, generator=generator) * 4
    logits[1, 3] = logits[1, vocab - 1] = 50.0  # tie across spans: the first wins
    logits[2, 5] = logits[2, 6] = 50.0  # tie within a span
    logits[3, vocab // 2] = float("nan")
    logits[4] = float("-inf")
    logits[4, vocab - 2] = 0.0
    logits[5, vocab - 1] = 60.0  # in the tail when there is one
    logits[6] = 1.0  # all equal: index 0
    assert argmax_rows(logits) == torch.argmax(logits, dim=-1).tolist()
    assert argmax_rows(logits[2:3]) == [5]


def test_batched_greedy_logprobs_are_each_rows_own():
    """Greedy rows that report logprobs share one log_softmax: the values sample_row gives row by row, bit for
    bit, beside rows that report nothing and rows with a penalty (each on its own path)."""
    logits = torch.stack([_logits(i) for i in range(5)])
    params = [dict(logprobs=True), dict(), dict(logprobs=True, top_logprobs=3),
              dict(logprobs=True, repetition_penalty=1.3), dict(logprobs=True)]
    batched = {f"s{i}": _state(**p) for i, p in enumerate(params)}
    alone = {f"s{i}": _state(**p) for i, p in enumerate(params)}
    out = sample(logits, list(batched), batched)
    for i, token in enumerate(out):
        expected = sample(logits[i][None], [f"s{i}"], {f"s{i}": alone[f"s{i}"]})[0]
        reference = sample_row(logits[i], _state(**params[i]))
        assert (token.token_id, token.logprob, token.top) == (expected.token_id, expected.logprob, expected.top)
        assert (token.token_id, token.logprob, token.top) == reference
    assert out[1].logprob is None and out[2].top is not None and len(out[2].top.token_ids) == 3


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


def test_presence_and_frequency_penalties_follow_openai():
    logits = torch.tensor([1.0, 1.0, 1.0, 1.0])
    counts = torch.tensor([0.0, 1.0, 3.0, 0.0])
    out = apply_presence_frequency(logits, counts, presence=0.5, frequency=0.25)
    assert out.tolist() == [1.0, 0.25, -0.25, 1.0]


def test_penalties_count_generated_tokens_only():
    logits = torch.zeros(VOCAB)
    logits[3], logits[4] = 2.0, 1.5
    state = _state(frequency_penalty=1.0)
    state.observe(torch.tensor([4, 4, 4]))  # prompt tokens: not penalised by OpenAI's penalties
    assert [s for s in _draws(state, logits, 3)] == [3, 4, 3]  # 3 (2.0) -> 4 (1.5 > 1.0) -> 3 (1.0 > 0.5)


def test_min_tokens_holds_eos_back_then_lets_it_through():
    logits = torch.zeros(VOCAB)
    logits[EOS] = 5.0
    state = SequenceSampling.create(SamplingParams(min_tokens=2), VOCAB, torch.device("cpu"), eos_token_ids=[EOS])
    assert not state.plain
    draws = _draws(state, logits, 3)
    assert draws[0] != EOS and draws[1] != EOS and draws[2] == EOS
    assert state.plain  # past min_tokens: back on the batched path


def test_ignore_eos_with_min_tokens_masks_nothing():
    state = SequenceSampling.create(SamplingParams(min_tokens=2, ignore_eos=True), VOCAB, torch.device("cpu"), [EOS])
    assert state.eos_ids is None and state.plain


def test_min_tokens_holds_stop_token_ids_back_too():
    logits = torch.zeros(VOCAB)
    logits[9] = 5.0
    state = SequenceSampling.create(SamplingParams(min_tokens=1, stop_token_ids=(9,), ignore_eos=True), VOCAB,
                                    torch.device("cpu"), [EOS])
    assert state.eos_ids.tolist() == [9]  # EOS ignored, the stop id held
    assert _draws(state, logits, 2) == [0, 9]


def test_logit_bias_steers_greedy_and_sampled_rows():
    logits = _logits()
    low = int(logits.argmin())
    greedy = _state(logit_bias=((low, 100.0),))
    assert not greedy.plain and _draws(greedy, logits, 2) == [low, low]
    banned = int(logits.argmax())
    state = _state(temperature=1.0, seed=3, logit_bias=((banned, -100.0),))
    assert banned not in _draws(state, logits, 50)
    ranked = _state(logprobs=True, logit_bias=((low, 100.0),))
    token = sample(logits[None], ["s"], {"s": ranked})[0]
    assert token.token_id == low and token.logprob > -1e-3  # the bias is in the reported distribution


def test_min_p_drops_tokens_below_its_share_of_the_likeliest():
    logits = torch.full((VOCAB,), -10.0)
    logits[[3, 4, 5]] = torch.tensor([2.0, 1.5, 0.0])  # probabilities ~ 0.56, 0.34, 0.08 of the top
    state = _state(temperature=1.0, seed=0, min_p=0.3)
    assert set(_draws(state, logits, 200)) == {3, 4}
    wide = _state(temperature=1.0, seed=0, min_p=0.0, top_k=3)
    assert 5 in set(_draws(wide, logits, 400))


def test_plain_rows_keep_no_per_sequence_tensors():
    state = _state(logprobs=False)
    assert state.plain and state.seen is None and state.counts is None and state.eos_ids is None


def test_top_logprobs_are_the_likeliest_of_the_sampled_distribution_and_finite():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1] + [1e-9] * (VOCAB - 3)))
    state = _state(temperature=1.0, top_k=2, seed=0, logprobs=True, top_logprobs=4)
    out = sample(logits[None], ["s"], {"s": state})[0]
    assert out.top.token_ids[:2] == [0, 1]
    assert out.top.logprobs[:2] == pytest.approx([math.log(0.6 / 0.9), math.log(0.3 / 0.9)], abs=1e-5)
    assert out.top.logprobs[2:] == [LOGPROB_FLOOR, LOGPROB_FLOOR]  # filtered out: probability 0, said finitely


def test_greedy_top_logprobs_without_penalty_are_log_softmax():
    logits = _logits(3)
    state = _state(logprobs=True, top_logprobs=5)
    out = sample(torch.stack([logits, logits]), ["s", "plain"], {"s": state, "plain": _state()})
    expected = torch.log_softmax(logits, -1)
    assert out[0].token_id == out[1].token_id == int(expected.argmax())
    assert out[0].top.token_ids == torch.topk(expected, 5).indices.tolist()
    assert out[0].top.logprobs == pytest.approx(torch.topk(expected, 5).values.tolist(), abs=1e-6)
    assert out[1].logprob is None and out[1].top is None


@pytest.mark.parametrize("mass", [0.2, 0.5, 0.9, 0.99])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_typical_p_keeps_what_transformers_keeps(mass, seed):
    from transformers import TypicalLogitsWarper

    logits = _logits(seed)
    expected = TypicalLogitsWarper(mass)(None, logits[None].clone())[0]
    assert torch.equal(torch.isinf(filter_typical(logits, mass)), torch.isinf(expected))
    assert torch.equal(filter_typical(logits, mass), expected)


def test_typical_p_restricts_what_is_drawn():
    logits = _logits(3)
    kept = set(torch.nonzero(~torch.isinf(filter_typical(logits, 0.3))).flatten().tolist())
    assert 0 < len(kept) < VOCAB
    drawn = {t.token_id for _ in range(64) for t in sample(logits[None], ["s"], {"s": _state(temperature=1.0, typical_p=0.3)})}
    assert drawn <= kept
