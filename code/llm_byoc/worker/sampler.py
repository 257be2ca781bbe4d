"""Pick the next token for each sampling row.

Order (as in Hugging Face generate): repetition penalty -> temperature ->
top-k -> top-p -> draw with the sequence's own generator. Greedy
(temperature 0) is argmax after the repetition penalty. The logprob is
``log_softmax`` of the processed logits at the chosen token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..protocol import SampledToken, SamplingParams


@dataclass
class SequenceSampling:
    """What the sampler keeps per sequence."""

    params: SamplingParams
    generator: torch.Generator | None  # None for greedy sequences
    seen: torch.Tensor | None  # [V] bool: tokens of the prompt and output so far; only with a penalty

    @classmethod
    def create(cls, params: SamplingParams, vocab_size: int, device: torch.device) -> "SequenceSampling":
        generator = None
        if not params.greedy:
            generator = torch.Generator(device=device)
            if params.seed is None:
                generator.seed()  # fresh entropy per sequence
            else:
                generator.manual_seed(params.seed)
        seen = None
        if params.repetition_penalty != 1.0:
            seen = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        return cls(params, generator, seen)

    def observe(self, token_ids: torch.Tensor) -> None:
        """Record tokens that entered the sequence (prompt chunks, fed-back samples)."""
        if self.seen is not None:
            self.seen[token_ids] = True


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """HF semantics: seen tokens' positive logits are divided, negative ones multiplied."""
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """logits: [V]. Tokens outside the top-k / nucleus get -inf (at least one stays)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative <= 1 - top_p
        drop_sorted[-1] = False  # the most likely token always stays
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_row(logits: torch.Tensor, state: SequenceSampling) -> tuple[int, float | None]:
    """logits: [V] float32 for one sequence -> (token id, logprob or None)."""
    params = state.params
    if state.seen is not None:
        logits = apply_repetition_penalty(logits, state.seen, params.repetition_penalty)
    if params.greedy:
        token = int(torch.argmax(logits))
    else:
        logits = filter_top_k_top_p(logits / params.temperature, params.top_k, params.top_p)
        probs = logits.softmax(-1)
        token = int(torch.multinomial(probs, 1, generator=state.generator))
    logprob = float(torch.log_softmax(logits, -1)[token]) if params.logprobs else None
    return token, logprob


def sample(logits: torch.Tensor, seq_ids: list[str], states: dict[str, SequenceSampling]) -> list[SampledToken]:
    """logits: [S, V], one row per entry of ``seq_ids``."""
    simple = [
        i for i, seq_id in enumerate(seq_ids)
        if states[seq_id].params.greedy and states[seq_id].seen is None and not states[seq_id].params.logprobs
    ]
    tokens: dict[int, tuple[int, float | None]] = {}
    if simple:  # plain greedy rows: one argmax for all of them
        rows = torch.tensor(simple, device=logits.device)
        for i, token in zip(simple, torch.argmax(logits[rows], dim=-1).tolist()):
            tokens[i] = (token, None)
    for i, seq_id in enumerate(seq_ids):
        if i not in tokens:
            tokens[i] = sample_row(logits[i], states[seq_id])
    return [SampledToken(seq_id, *tokens[i]) for i, seq_id in enumerate(seq_ids)]
