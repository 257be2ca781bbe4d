"""What the engine hands to its callers (the HTTP layer, benchmarks, tests).

These live in the front-end process only; they never cross a process boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol import FinishReason, PromptLogprobs, TopLogprobs


@dataclass(frozen=True)
class TokenEvent:
    """One generated token of prompt number ``index`` of a request.

    ``text`` is the new text this token completes (may be "" while a UTF-8
    character or a possible stop string is still incomplete). The last event
    of a prompt has ``finish_reason`` set; its text flushes anything held back.
    """

    index: int
    token_id: int | None  # None only on a final event that carries no token
    text: str
    logprob: float | None
    finish_reason: FinishReason | None
    prompt_tokens: int
    completion_tokens: int  # tokens generated so far for this prompt
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    top_logprobs: TopLogprobs | None = None  # the likeliest alternatives, when asked for


@dataclass(frozen=True)
class GenerationResult:
    """The whole output for one prompt, once it finished."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    logprobs: list[float] | None = field(default=None)
    cached_tokens: int = 0  # prompt tokens served from the prefix cache
    top_logprobs: list[TopLogprobs] | None = None  # one per token, when asked for
    prompt_token_ids: list[int] = field(default_factory=list)
    prompt_logprobs: PromptLogprobs | None = None  # SamplingParams.prompt_logprobs: prompt tokens 1.. (not the first)
