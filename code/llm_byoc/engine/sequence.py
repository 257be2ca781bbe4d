"""One sequence as the scheduler sees it: token ids and how many are computed."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..protocol import FinishReason, SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """Prompt + generated token ids, of which ``num_computed`` are in the KV cache.

    The scheduler's contract (vLLM v1): every step, a running sequence's
    computed tokens catch up with its known tokens. A prefilling sequence is
    several tokens behind, a decoding one exactly one (its newest sample).
    """

    seq_id: str
    token_ids: list[int]
    params: SamplingParams
    num_prompt_tokens: int = 0
    num_computed: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: FinishReason | None = None
    seen_by_worker: bool = False  # the worker got its NewSequence (so it must be freed)

    def __post_init__(self) -> None:
        self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
