"""The prompt's log-probabilities (``SamplingParams.prompt_logprobs``), gathered chunk by chunk.

Row j of a chunk holds the model's distribution of the token after position ``start_pos + j``: so a
chunk yields the log-probabilities of its own tokens 1.. (from its earlier rows) and, from its last
row, that of the next chunk's first token, which this keeps (``[V]``) until that chunk comes. The
values are ``log_softmax`` of the raw logits in fp32: no temperature, penalty or bias, as vLLM's
``prompt_logprobs``. They are returned once, with the sequence's first sample; a sequence preempted
before that starts over (the engine recomputes it from its first token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..protocol import PromptLogprobs, TopLogprobs

ROWS_AT_ONCE = 256  # logits rows in memory at a time ([256, V] fp32)


@dataclass
class PromptLogprobsState:
    """One sequence's prompt log-probabilities so far."""

    top_k: int  # alternatives per position (0: just the prompt token's own)
    logprobs: list[float] = field(default_factory=list)
    top: list[TopLogprobs] = field(default_factory=list)
    carried: torch.Tensor | None = None  # [V] fp32: the distribution of the next chunk's first token
    done: bool = False  # returned with the first sample: never again (a later recompute adds nothing)

    def restart(self) -> None:
        """Preempted: its chunks will be computed again from the first token."""
        if not self.done:
            self.logprobs, self.top, self.carried = [], [], None

    def add_chunk(self, logits_of: callable, rows: torch.Tensor, token_ids: list[int], ends_prompt: bool) -> None:
        """``rows`` [n]: the chunk's rows in the step's hidden states; ``logits_of(rows)`` -> [n, V]."""
        if self.done:
            return
        device = rows.device
        if self.carried is not None:
            self._add(self.carried[None, :], torch.tensor(token_ids[:1], device=device))
            self.carried = None
        for first in range(0, len(token_ids), ROWS_AT_ONCE):
            part = rows[first:first + ROWS_AT_ONCE]
            logprobs = torch.log_softmax(logits_of(part).float(), dim=-1)  # [r, V]
            following = token_ids[first + 1:first + 1 + len(part)]  # the token each row predicts, where known
            if len(following) < len(part):  # the chunk's last row predicts the next chunk's first token
                if not ends_prompt:
                    self.carried = logprobs[-1].clone()
                logprobs = logprobs[:-1]
            if following:
                self._add(logprobs, torch.tensor(following, device=device))
        if ends_prompt:
            self.done = True

    def _add(self, logprobs: torch.Tensor, tokens: torch.Tensor) -> None:
        # logprobs: [r, V], tokens: [r]
        self.logprobs += logprobs.gather(1, tokens[:, None])[:, 0].tolist()
        if self.top_k:
            values, ids = logprobs.topk(self.top_k, dim=-1)
            self.top += [TopLogprobs(i, v) for i, v in zip(ids.tolist(), values.tolist())]

    def result(self) -> PromptLogprobs:
        return PromptLogprobs(list(self.logprobs), list(self.top) if self.top_k else None)
