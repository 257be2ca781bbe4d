"""One sequence as the scheduler sees it: token ids, how many are computed, its KV blocks."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..protocol import FinishReason, SamplingParams

if TYPE_CHECKING:
    from ..adapters.messages import AdapterSpec
    from ..grammar import GrammarMatcher
    from .block_pool import Block


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
    arrival: int = 0  # order of arrival: the newest running sequence is preempted first
    cache_namespace: str = ""  # prefix-cache key space (an adapter, a tenant): no sharing across
    adapter: AdapterSpec | None = None  # its LoRA adapter; None: the base model
    session_id: str = ""  # the stateful session it belongs to (its prompt's prefix stays cached)
    num_prompt_tokens: int = 0
    rope_length: int = 0  # a RoPE that depends on the length: the length its table goes by (protocol.RopeByLength)
    num_computed: int = 0
    num_cached_tokens: int = 0  # prompt tokens taken from the prefix cache at (first) admission
    status: SequenceStatus = SequenceStatus.WAITING
    finish_reason: FinishReason | None = None
    seen_by_worker: bool = False  # the worker got its NewSequence (so it must be freed)
    blocks: list[Block] = field(default_factory=list)  # KV blocks, in token order
    block_hashes: list[bytes] = field(default_factory=list)  # of its full blocks, as far as computed
    num_registered: int = 0  # leading blocks already in the prefix cache
    num_behind_window: int = 0  # leading blocks out of every layer's window (freed: the null block in ``blocks``)
    grammar: GrammarMatcher | None = None  # its grammar's state, from admission (params.grammar set)

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
