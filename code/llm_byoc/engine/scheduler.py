"""Continuous batching: waiting -> running -> finished, pure Python.

Contract (vLLM v1 style, no separate prefill and decode phases): at every step
each running sequence's computed tokens catch up with its known tokens
(prompt + generated), within a token budget of ``max_batched_tokens``:

1. every decoding sequence (one token behind) gets its one token first;
2. prefilling sequences, in arrival order, get the next chunk of their prompt
   with whatever budget is left (chunked prefill);
3. waiting sequences are admitted, in arrival order, while fewer than
   ``max_num_seqs`` run and budget is left.

``postprocess`` appends the sampled tokens and applies the stop rules. A
sequence that finishes leaves the running batch in that same step and is
listed in ``freed`` of the next batch so the worker drops its KV cache before
anything new is admitted.

Stop rules: an EOS token (unless ``ignore_eos``) -> STOP; ``max_new_tokens``
generated -> LENGTH; the context window full (prompt + generated reaches
``max_model_len``) -> LENGTH. ``max_new_tokens`` is not clipped against the
window at admission: a sequence whose prompt + max_new_tokens exceeds the
window simply stops with LENGTH once the window is full. Stop strings are
applied by the front end, which then aborts the sequence here.

Admission: a sequence is refused with QueueFull when it would have to wait
behind ``max_waiting`` others (free running slots count as no wait).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..config import EngineConfig
from ..errors import InvalidRequest, QueueFull
from ..protocol import (
    AddSequence,
    FinishReason,
    ModelInfo,
    NewSequence,
    ScheduledChunk,
    SequenceUpdate,
    StepBatch,
    StepOutput,
)
from .sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class SchedulerLimits:
    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int
    max_waiting: int
    max_new_tokens_limit: int
    vocab_size: int
    eos_token_ids: frozenset[int]

    @classmethod
    def from_config(cls, config: EngineConfig, info: ModelInfo) -> SchedulerLimits:
        """Engine settings, narrowed by what the loaded model and its KV cache allow."""
        max_model_len = info.max_model_len
        if config.max_model_len is not None:
            max_model_len = min(max_model_len, config.max_model_len)
        return cls(
            max_num_seqs=max(1, min(config.max_num_seqs, info.num_slots)),
            max_batched_tokens=config.max_batched_tokens,
            max_model_len=max_model_len,
            max_waiting=config.max_waiting,
            max_new_tokens_limit=config.max_new_tokens_limit,
            vocab_size=info.vocab_size,
            eos_token_ids=frozenset(info.eos_token_ids),
        )


class Scheduler:
    def __init__(self, limits: SchedulerLimits):
        self.limits = limits
        self._waiting: deque[Sequence] = deque()
        self._running: dict[str, Sequence] = {}  # insertion order = arrival order
        self._freed: list[str] = []
        self._expect_sample: set[str] = set()  # scheduled last step with sample=True
        self._step_id = 0

    # --- queue ---------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    def add(self, request: AddSequence) -> None:
        """Queue a sequence; raises InvalidRequest or QueueFull."""
        self._validate(request)
        free_slots = max(0, self.limits.max_num_seqs - len(self._running))
        if len(self._waiting) >= self.limits.max_waiting + free_slots:
            raise QueueFull(
                f"the engine queue is full ({len(self._waiting)} sequences waiting); retry later"
            )
        seq = Sequence(request.seq_id, list(request.prompt_token_ids), request.params)
        self._waiting.append(seq)

    def abort(self, seq_id: str) -> SequenceUpdate | None:
        """Remove a waiting or running sequence; None when it is not here (any more)."""
        for seq in self._waiting:
            if seq.seq_id == seq_id:
                self._waiting.remove(seq)
                self._finish(seq, FinishReason.ABORT)
                return self._final_update(seq)
        seq = self._running.get(seq_id)
        if seq is None:
            return None
        self._finish(seq, FinishReason.ABORT)
        return self._final_update(seq)

    def finish_all(self) -> list[str]:
        """Drop every waiting and running sequence (the engine failed); their ids."""
        ids = [seq.seq_id for seq in self._waiting] + list(self._running)
        for seq in list(self._waiting) + list(self._running.values()):
            self._finish(seq, FinishReason.ERROR)
        self._waiting.clear()
        return ids

    def fail(self, seq_ids: list[str]) -> None:
        """Finish these running sequences with ERROR (their step failed in the worker)."""
        for seq_id in seq_ids:
            seq = self._running.get(seq_id)
            if seq is not None:
                self._finish(seq, FinishReason.ERROR)

    # --- one step ------------------------------------------------------------

    def schedule(self) -> StepBatch | None:
        """The next step's work, or None when nothing needs computing."""
        budget = self.limits.max_batched_tokens
        chunks: list[ScheduledChunk] = []
        new: list[NewSequence] = []
        decoding = [s for s in self._running.values() if s.num_uncomputed == 1]
        prefilling = [s for s in self._running.values() if s.num_uncomputed > 1]
        for seq in decoding + prefilling:
            if budget == 0:
                break
            budget -= self._schedule_chunk(seq, budget, chunks)
        while self._waiting and budget > 0 and len(self._running) < self.limits.max_num_seqs:
            seq = self._waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            seq.seen_by_worker = True
            self._running[seq.seq_id] = seq
            new.append(NewSequence(seq.seq_id, seq.params))
            budget -= self._schedule_chunk(seq, budget, chunks)
        if not chunks:
            return None
        self._step_id += 1
        freed, self._freed = self._freed, []
        self._expect_sample = {c.seq_id for c in chunks if c.sample}
        return StepBatch(step_id=self._step_id, new=new, chunks=chunks, freed=freed)

    def _schedule_chunk(self, seq: Sequence, budget: int, chunks: list[ScheduledChunk]) -> int:
        n = min(seq.num_uncomputed, budget)
        start = seq.num_computed
        seq.num_computed += n
        chunks.append(
            ScheduledChunk(
                seq_id=seq.seq_id,
                token_ids=seq.token_ids[start : start + n],
                start_pos=start,
                sample=seq.num_computed == seq.num_tokens,
            )
        )
        return n

    def postprocess(self, output: StepOutput) -> list[SequenceUpdate]:
        """Append sampled tokens, apply stop rules; one update per sequence that advanced."""
        updates: list[SequenceUpdate] = []
        expected, self._expect_sample = self._expect_sample, set()
        for sample in output.samples:
            seq = self._running.get(sample.seq_id)
            if seq is None or sample.seq_id not in expected:
                continue  # aborted while the step ran, or not asked for
            expected.discard(sample.seq_id)
            seq.token_ids.append(sample.token_id)
            reason = self._stop_reason(seq, sample.token_id)
            if reason is not None:
                self._finish(seq, reason)
            logprobs = None if sample.logprob is None else [sample.logprob]
            updates.append(
                SequenceUpdate(
                    seq.seq_id, [sample.token_id], logprobs, reason, seq.num_prompt_tokens
                )
            )
        for seq_id in expected:  # the worker skipped a sequence: fail it, never stall it
            seq = self._running.get(seq_id)
            if seq is not None:
                self._finish(seq, FinishReason.ERROR)
                updates.append(self._final_update(seq))
        return updates

    # --- helpers ---------------------------------------------------------------

    def _stop_reason(self, seq: Sequence, token_id: int) -> FinishReason | None:
        if not seq.params.ignore_eos and token_id in self.limits.eos_token_ids:
            return FinishReason.STOP
        if seq.num_generated >= seq.params.max_new_tokens:
            return FinishReason.LENGTH
        if seq.num_tokens >= self.limits.max_model_len:
            return FinishReason.LENGTH
        return None

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self._expect_sample.discard(seq.seq_id)
        if self._running.pop(seq.seq_id, None) is not None and seq.seen_by_worker:
            self._freed.append(seq.seq_id)

    @staticmethod
    def _final_update(seq: Sequence) -> SequenceUpdate:
        return SequenceUpdate(seq.seq_id, [], None, seq.finish_reason, seq.num_prompt_tokens)

    def _validate(self, request: AddSequence) -> None:
        limits = self.limits
        request.params.validate(limits.max_new_tokens_limit)
        ids = request.prompt_token_ids
        if not ids:
            raise InvalidRequest("the prompt is empty")
        if len(ids) + 1 > limits.max_model_len:
            raise InvalidRequest(
                f"the prompt has {len(ids)} tokens; the context window is "
                f"{limits.max_model_len} tokens (prompt + at least 1 new token)"
            )
        for t in ids:
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < limits.vocab_size:
                raise InvalidRequest(
                    f"token id {t!r} is not in the vocabulary (0..{limits.vocab_size - 1})"
                )
        if request.seq_id in self._running or any(s.seq_id == request.seq_id for s in self._waiting):
            raise InvalidRequest(f"sequence {request.seq_id!r} is already in the engine")
