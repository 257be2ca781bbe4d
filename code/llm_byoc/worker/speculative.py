"""Speculative decoding, worker side: verify a chunk's proposed tokens in the step that computed them.

A chunk with ``num_draft`` proposals has one sampling row per proposal plus
one: row i holds the logits after the sequence's last token and the first i
proposals. Row by row, the token is picked exactly as a plain decode step
would pick it at that position (``sampler.sample_row``); while it equals the
proposal, the proposal is accepted and the next row is read; the first token
that differs (or the row after the last proposal, the bonus token) ends it.

Greedy: the pick is the argmax, so the output is token for token the output
without speculation. Sampled: the row's token y is drawn from the row's
distribution p with the sequence's generator, and the proposal x is accepted
when y == x. For a deterministic (one-hot) draft that is the standard
rejection rule: x is accepted with probability p(x), and on rejection y is
distributed as p with x removed and renormalised, so the output distribution
is unchanged. Rows after the first rejection are never drawn, so the
generator makes exactly one draw per generated token, as without speculation:
a seeded output is the same whether, where and how much was speculated.
"""

from __future__ import annotations

import torch

from ..protocol import SampledToken
from .sampler import SequenceSampling, argmax_rows, sample, sample_row


def verify(logits: torch.Tensor, drafts: list[int], state: SequenceSampling, seq_id: str) -> list[SampledToken]:
    """logits: [len(drafts) + 1, V] -> the accepted proposals and one token of the model's own."""
    out: list[SampledToken] = []
    greedy = argmax_rows(logits) if state.plain else None
    for i in range(len(drafts) + 1):
        token, logprob, top = (greedy[i], None, None) if greedy is not None else sample_row(logits[i], state)
        state.record(token)
        out.append(SampledToken(seq_id, token, logprob, top))
        if i == len(drafts) or token != drafts[i]:
            break
    return out


def sample_with_drafts(logits: torch.Tensor, seq_ids: list[str], states: dict[str, SequenceSampling],
                       drafts: dict[str, list[int]]) -> list[SampledToken]:
    """``sampler.sample`` where the rows of a sequence in ``drafts`` (len + 1 consecutive rows) are verified."""
    plain = [i for i, seq_id in enumerate(seq_ids) if seq_id not in drafts]
    out = sample(logits[plain], [seq_ids[i] for i in plain], states) if plain else []
    for seq_id, proposed in drafts.items():
        first = seq_ids.index(seq_id)
        out.extend(verify(logits[first: first + len(proposed) + 1], proposed, states[seq_id], seq_id))
    return out
