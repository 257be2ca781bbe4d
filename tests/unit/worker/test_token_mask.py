"""Token masks on the logits of constrained rows, before sampling."""

from __future__ import annotations

import base64

import pytest
import torch

from llm_byoc.protocol import SamplingParams, TokenMask
from llm_byoc.worker.sampler import SequenceSampling, sample
from llm_byoc.worker.token_mask import apply_token_masks, check_masks

VOCAB = 40


def mask_of(tokens: set[int], vocab: int = VOCAB, extra_words: int = 0) -> str:
    words = [0] * ((vocab + 31) // 32 + extra_words)
    for t in tokens:
        words[t // 32] |= 1 << (t % 32)
    return base64.b64encode(b"".join(w.to_bytes(4, "little") for w in words)).decode()


def test_masked_rows_pick_only_allowed_tokens_greedy_and_sampled():
    logits = torch.randn(3, VOCAB)
    free_row = logits[1].clone()
    masks = check_masks(1, [TokenMask("a", mask_of({5, 33})), TokenMask("c", mask_of({39}, extra_words=1))], VOCAB)
    apply_token_masks(logits, ["a", "b", "c"], masks)
    assert torch.equal(logits[1], free_row), "a row without a mask is not touched"
    assert torch.isinf(logits[0]).sum() == VOCAB - 2 and torch.isfinite(logits[0, [5, 33]]).all()
    states = {"a": SequenceSampling.create(SamplingParams(temperature=1.0, seed=3), VOCAB, torch.device("cpu")),
              "b": SequenceSampling.create(SamplingParams(), VOCAB, torch.device("cpu")),
              "c": SequenceSampling.create(SamplingParams(repetition_penalty=1.3), VOCAB, torch.device("cpu"))}
    tokens = [s.token_id for s in sample(logits, ["a", "b", "c"], states)]
    assert tokens[0] in (5, 33) and tokens[1] == int(torch.argmax(free_row)) and tokens[2] == 39


@pytest.mark.parametrize("mask, reason", [
    (TokenMask("a", "!!"), "not base64"),
    (TokenMask("a", base64.b64encode(b"\xff\xff").decode()), "bytes"),
    (TokenMask("a", mask_of(set())), "allows no token"),
])
def test_bad_masks_fail_the_check(mask, reason):
    with pytest.raises(ValueError, match=reason):
        check_masks(1, [mask], VOCAB)
