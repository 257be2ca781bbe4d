"""Speculative decoding, engine side: n-gram proposals (prompt lookup) and who gets to speculate.

With a draft model (``LLM_BYOC_SPECULATIVE=draft``) the proposals are made in the model worker
(worker/draft.py): the scheduler only asks for k of them (``Proposal.count``, ``ScheduledChunk.num_propose``)
and reserves their blocks; everything else here is the same for both methods.

The proposer runs here, in the engine process, not in the model worker: it only
reads token ids, which the scheduler already holds for every sequence, so a
proposal costs no round trip and no tensor. Its k tokens go to the worker as
extra rows of the sequence's chunk (``ScheduledChunk.num_draft``); the worker
verifies them in the same forward (worker/speculative.py) and returns the
accepted ones plus one token of its own.

Prompt lookup (vLLM's ``ngram`` method): the longest suffix of the sequence,
from ``ngram_max`` down to ``ngram_min`` tokens, is looked for earlier in the
sequence (its latest earlier occurrence); the tokens that followed it there are
the proposal. Nothing found: the sequence decodes normally this step.

``SpecTracker`` keeps the counts (per sequence and since start) and turns
proposals off for a sequence whose acceptance rate stays below a threshold once
it has had ``MIN_PROPOSED`` tokens proposed: text that does not repeat should
not pay for verify rows. Not for good: after ``COOL_DOWN_TOKENS`` more generated
tokens it is tried again with fresh counts, so an answer whose preamble does not
repeat still speculates once it starts quoting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol import SamplingParams

MIN_PROPOSED = 16  # proposed tokens before a sequence's acceptance rate can switch it off
COOL_DOWN_TOKENS = 64  # generated tokens a switched-off sequence waits before it is tried again


def propose_ngram(token_ids: list[int], k: int, ngram_min: int, ngram_max: int) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the longest matching suffix."""
    total = len(token_ids)
    if k < 1:
        return []
    for n in range(min(ngram_max, total - 1), ngram_min - 1, -1):
        suffix = token_ids[total - n:]
        first = suffix[0]
        # latest start i < total - n with token_ids[i:i+n] == suffix
        for i in range(total - n - 1, -1, -1):
            if token_ids[i] == first and token_ids[i:i + n] == suffix:
                return token_ids[i + n: i + n + k]
    return []


def can_speculate(params: SamplingParams) -> bool:
    """Whether a sequence's sampling allows verifying several positions in one step: everything that
    depends on the tokens before each position (penalties, min_tokens, a grammar's state) rules it out."""
    return (params.speculative and params.grammar is None and params.repetition_penalty == 1.0
            and not params.presence_penalty and not params.frequency_penalty and not params.min_tokens)


@dataclass(frozen=True)
class Proposal:
    """A decoding sequence's proposals for one step: the n-gram's tokens, or only how many the worker's
    draft model proposes (``token_ids`` empty: the worker picks them)."""

    count: int
    token_ids: tuple[int, ...] = ()

    def agrees(self, accepted: list[int]) -> bool:
        """Whether the tokens the worker says it accepted are proposals (for a draft's, any are)."""
        return not self.token_ids or list(self.token_ids[: len(accepted)]) == accepted


@dataclass
class _SeqCounts:
    proposed: int = 0
    accepted: int = 0


@dataclass
class SpecTracker:
    method: str
    min_acceptance: float
    num_drafts: int = 0  # verify chunks scheduled
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    _seqs: dict[str, _SeqCounts] = field(default_factory=dict)
    _off: dict[str, int] = field(default_factory=dict)  # switched off: seq id -> generated tokens to try again at

    def enabled(self, seq_id: str, num_generated: int) -> bool:
        retry_at = self._off.get(seq_id)
        if retry_at is None:
            return True
        if num_generated < retry_at:
            return False
        del self._off[seq_id]  # cooled down: tried again, judged on what it proposes from now on
        self._seqs.pop(seq_id, None)
        return True

    def record(self, seq_id: str, proposed: int, accepted: int, num_generated: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += proposed
        self.num_accepted_tokens += accepted
        counts = self._seqs.setdefault(seq_id, _SeqCounts())
        counts.proposed += proposed
        counts.accepted += accepted
        if counts.proposed >= MIN_PROPOSED and counts.accepted < self.min_acceptance * counts.proposed:
            self._off[seq_id] = num_generated + COOL_DOWN_TOKENS

    def forget(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)
        self._off.pop(seq_id, None)
