"""Pick the next token for each sampling row.

Order (as in Hugging Face generate, then OpenAI's penalties): ``logit_bias``
(added to the raw logits, as OpenAI and vLLM do) -> repetition penalty (prompt
and output tokens) -> presence / frequency penalties (output tokens) -> EOS and
``stop_token_ids`` masked while fewer than ``min_tokens`` are generated ->
temperature -> min-p -> top-k -> top-p -> typical-p (TGI's; transformers'
TypicalLogitsWarper) -> draw with the sequence's own generator.
Greedy (temperature 0) is argmax after the bias, the penalties and the EOS mask.

Log-probabilities are those of the distribution the token was drawn from:
``log_softmax`` of the processed logits (penalties, EOS mask, temperature,
top-k/top-p; for greedy rows the penalized logits at temperature 1). Tokens
filtered out have probability 0; their log-probability is reported as
``LOGPROB_FLOOR`` (JSON has no -inf). ``top_logprobs`` adds the most likely
tokens of that same distribution.

Greedy rows with nothing to apply (no bias, penalty or EOS held back) take one
batched argmax, and those of them that report logprobs one batched log_softmax.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..protocol import SampledToken, SamplingParams, TopLogprobs

LOGPROB_FLOOR = -9999.0  # what a token the filters removed reports
ARGMAX_SPAN = 4096  # columns whose maximum argmax_rows takes in one vectorised pass


@dataclass
class SequenceSampling:
    """What the sampler keeps per sequence."""

    params: SamplingParams
    generator: torch.Generator | None  # None for greedy sequences
    seen: torch.Tensor | None  # [V] bool: tokens of the prompt and output so far; only with a repetition penalty
    counts: torch.Tensor | None  # [V] float: times each token was generated; only with presence/frequency penalty
    eos_ids: torch.Tensor | None  # [E] long: masked until min_tokens are generated; only with min_tokens
    num_sampled: int = 0
    bias_ids: torch.Tensor | None = None  # [B] long: logit_bias's token ids; only with a logit_bias
    bias_values: torch.Tensor | None = None  # [B] float: their biases

    @classmethod
    def create(cls, params: SamplingParams, vocab_size: int, device: torch.device,
               eos_token_ids: Sequence[int] = ()) -> "SequenceSampling":
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
        counts = None
        if params.presence_penalty or params.frequency_penalty:
            counts = torch.zeros(vocab_size, dtype=torch.float32, device=device)
        eos_ids = None
        held = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos_token_ids))
        if params.min_tokens and held:
            eos_ids = torch.tensor(sorted(held), dtype=torch.long, device=device)
        bias_ids = bias_values = None
        if params.logit_bias:
            bias_ids = torch.tensor([t for t, _ in params.logit_bias], dtype=torch.long, device=device)
            bias_values = torch.tensor([b for _, b in params.logit_bias], dtype=torch.float32, device=device)
        return cls(params, generator, seen, counts, eos_ids, 0, bias_ids, bias_values)

    @property
    def holds_eos(self) -> bool:
        return self.eos_ids is not None and self.num_sampled < self.params.min_tokens

    @property
    def greedy_as_is(self) -> bool:
        """Greedy on the logits as they are (no bias, penalty or EOS held back): the batched argmax picks its
        token, and a logprob is the batched log_softmax's."""
        return (self.params.greedy and self.seen is None and self.counts is None and self.bias_ids is None
                and not self.holds_eos)

    @property
    def plain(self) -> bool:
        """Greedy as is and reporting nothing: an argmax is its whole sampling."""
        return self.greedy_as_is and not self.params.logprobs

    def observe(self, token_ids: torch.Tensor) -> None:
        """Record tokens that entered the sequence (prompt chunks, fed-back samples)."""
        if self.seen is not None:
            self.seen[token_ids] = True

    def record(self, token_id: int) -> None:
        """The token this sequence just generated."""
        self.num_sampled += 1
        if self.counts is not None:
            self.counts[token_id] += 1


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """HF semantics: seen tokens' positive logits are divided, negative ones multiplied."""
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen, penalized, logits)


def apply_presence_frequency(logits: torch.Tensor, counts: torch.Tensor, presence: float,
                             frequency: float) -> torch.Tensor:
    """OpenAI semantics: logit - frequency * count - presence * (count > 0)."""
    return logits - frequency * counts - presence * (counts > 0).to(logits.dtype)


def filter_min_p(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """logits: [V]. Tokens less likely than min_p x the likeliest token get -inf (vLLM's min-p):
    p < min_p * p_max exactly when logit < max logit + log(min_p), so no softmax is needed."""
    return logits.masked_fill(logits < logits.max() + math.log(min_p), float("-inf"))


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


def filter_typical(logits: torch.Tensor, mass: float) -> torch.Tensor:
    """logits: [V]. Typical sampling (Meister et al.), exactly as transformers' TypicalLogitsWarper: keep the
    tokens whose surprise is closest to the distribution's entropy until they hold ``mass`` (at least one)."""
    normalized = torch.log_softmax(logits, -1)
    entropy = -(normalized * normalized.exp()).nansum()
    shifted = (-normalized - entropy).abs()
    sorted_scores, order = torch.sort(shifted, descending=False)
    cumulative = logits[order].softmax(-1).cumsum(-1)
    last = min(int((cumulative < mass).sum()), sorted_scores.shape[-1] - 1)
    drop_sorted = sorted_scores > sorted_scores[last]
    drop_sorted[0] = False
    drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def processed_logits(logits: torch.Tensor, state: SequenceSampling) -> torch.Tensor:
    """logits: [V] -> the logits of the distribution this row's token is drawn from."""
    params = state.params
    if state.bias_ids is not None:
        logits = logits.index_add(0, state.bias_ids, state.bias_values.to(logits.dtype))
    if state.seen is not None:
        logits = apply_repetition_penalty(logits, state.seen, params.repetition_penalty)
    if state.counts is not None:
        logits = apply_presence_frequency(logits, state.counts, params.presence_penalty, params.frequency_penalty)
    if state.holds_eos:
        logits = logits.index_fill(0, state.eos_ids, float("-inf"))
    if not params.greedy:
        logits = logits / params.temperature
        if params.min_p > 0.0:
            logits = filter_min_p(logits, params.min_p)
        logits = filter_top_k_top_p(logits, params.top_k, params.top_p)
        if params.typical_p < 1.0:
            logits = filter_typical(logits, params.typical_p)
    return logits


def sample_row(logits: torch.Tensor, state: SequenceSampling) -> tuple[int, float | None, TopLogprobs | None]:
    """logits: [V] float32 for one sequence -> (token id, logprob or None, top logprobs or None)."""
    params = state.params
    logits = processed_logits(logits, state)
    if params.greedy:
        token = argmax_rows(logits[None])[0]
    else:
        token = int(torch.multinomial(logits.softmax(-1), 1, generator=state.generator))
    if not params.logprobs:
        return token, None, None
    logprobs = torch.log_softmax(logits, -1).clamp_(min=LOGPROB_FLOOR)  # [V]
    top = None
    if params.top_logprobs:
        values, ids = torch.topk(logprobs, params.top_logprobs)
        top = TopLogprobs(ids.tolist(), values.tolist())
    return token, float(logprobs[token]), top


def argmax_rows(logits: torch.Tensor) -> list[int]:
    """logits: [S, V] -> each row's ``torch.argmax`` (the first of equal maxima; a NaN counts as the maximum).

    On CPU, torch's argmax along a row is a scalar loop (2 ms for 16 x 49,152 logits on the 2-core dev VM)
    while ``amax`` is vectorised (40 us): so each ``ARGMAX_SPAN`` columns' maximum first, then argmax over
    those, then argmax within the first span that holds the row's maximum, which is where ``torch.argmax``'s
    answer lies."""
    rows, vocab = logits.shape
    if logits.device.type != "cpu" or vocab < 2 * ARGMAX_SPAN:
        return torch.argmax(logits, dim=-1).tolist()
    whole = vocab // ARGMAX_SPAN * ARGMAX_SPAN
    span_max = logits[:, :whole].view(rows, -1, ARGMAX_SPAN).amax(-1)  # [S, spans]
    if whole < vocab:
        span_max = torch.cat((span_max, logits[:, whole:].amax(-1, keepdim=True)), dim=1)
    tokens = []
    for row, span in enumerate(torch.argmax(span_max, dim=-1).tolist()):
        start = span * ARGMAX_SPAN
        tokens.append(start + int(torch.argmax(logits[row, start : start + ARGMAX_SPAN])))
    return tokens


def _rows(logits: torch.Tensor, picked: list[int]) -> torch.Tensor:
    """logits[picked], without a copy when that is every row."""
    return logits if len(picked) == logits.shape[0] else logits[torch.tensor(picked, device=logits.device)]


def sample_greedy_rows(logits: torch.Tensor, states: list[SequenceSampling]
                       ) -> list[tuple[int, float | None, TopLogprobs | None]]:
    """logits: [S, V] of greedy rows taken as they are (``greedy_as_is``): one argmax for all of them and one
    log_softmax for those that report logprobs (row for row the values ``sample_row`` gives)."""
    tokens = argmax_rows(logits)
    reporting = [i for i, state in enumerate(states) if state.params.logprobs]
    out: list[tuple[int, float | None, TopLogprobs | None]] = [(token, None, None) for token in tokens]
    if not reporting:
        return out
    logprobs = torch.log_softmax(_rows(logits, reporting), -1).clamp_(min=LOGPROB_FLOOR)  # [R, V]
    chosen = logprobs.gather(1, torch.tensor([[tokens[i]] for i in reporting], device=logits.device))
    for row, (i, value) in enumerate(zip(reporting, chosen[:, 0].tolist())):
        top = None
        if states[i].params.top_logprobs:
            values, ids = torch.topk(logprobs[row], states[i].params.top_logprobs)
            top = TopLogprobs(ids.tolist(), values.tolist())
        out[i] = (tokens[i], value, top)
    return out


def sample(logits: torch.Tensor, seq_ids: list[str], states: dict[str, SequenceSampling]) -> list[SampledToken]:
    """logits: [S, V], one row per entry of ``seq_ids``."""
    as_is = [i for i, seq_id in enumerate(seq_ids) if states[seq_id].greedy_as_is]
    tokens: dict[int, tuple[int, float | None, TopLogprobs | None]] = {}
    if as_is:
        picked = sample_greedy_rows(_rows(logits, as_is), [states[seq_ids[i]] for i in as_is])
        tokens.update(zip(as_is, picked))
    for i, seq_id in enumerate(seq_ids):
        if i not in tokens:
            tokens[i] = sample_row(logits[i], states[seq_id])
    for i, seq_id in enumerate(seq_ids):
        states[seq_id].record(tokens[i][0])
    return [SampledToken(seq_id, *tokens[i]) for i, seq_id in enumerate(seq_ids)]
