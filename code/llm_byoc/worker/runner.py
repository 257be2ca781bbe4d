"""ModelRunner: the model, its KV cache and the per-sequence state; one step per call.

A step (see ``protocol.StepBatch``) first frees finished sequences, then
registers new ones, then computes every scheduled chunk in one batched
forward and samples the rows that asked for a token. The batch is checked
against the runner's state before anything changes, so a bad batch fails
with a clear ``ValueError`` and leaves the state as it was.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from ..config import EngineConfig
from ..protocol import ScheduledChunk, StepBatch, StepOutput
from .batch import build_step_inputs, order_chunks
from .kv_cache import KVCache
from .loading import LoadedModel, load_model
from .sampler import SequenceSampling, sample

log = logging.getLogger(__name__)


@dataclass
class _Sequence:
    slot: int
    num_cached: int  # tokens whose keys/values are in the cache
    sampling: SequenceSampling


class ModelRunner:
    def __init__(self, loaded: LoadedModel, num_slots: int):
        self.decoder = loaded.decoder
        self.info = loaded.info
        self.device = loaded.device
        self.vocab_size = loaded.info.vocab_size
        self.max_len = loaded.info.max_model_len
        self.cache = KVCache(
            self.decoder.num_layers, num_slots, self.decoder.num_kv_heads,
            self.decoder.head_dim, self.max_len, loaded.dtype, loaded.device,
        )
        self._free_slots = list(range(num_slots))  # kept sorted: lowest slot first
        self._seqs: dict[str, _Sequence] = {}

    @classmethod
    def from_config(cls, config: EngineConfig) -> "ModelRunner":
        loaded = load_model(config)
        return cls(loaded, config.max_num_seqs)

    @property
    def num_active(self) -> int:
        return len(self._seqs)

    def step(self, batch: StepBatch) -> StepOutput:
        started = time.perf_counter()
        self._free(batch.freed)
        self._check(batch)
        for new in batch.new:
            slot = self._free_slots.pop(0)
            sampling = SequenceSampling.create(new.params, self.vocab_size, self.device)
            self._seqs[new.seq_id] = _Sequence(slot, 0, sampling)
        samples = self._compute(batch.chunks) if batch.chunks else []
        return StepOutput(batch.step_id, samples, time.perf_counter() - started)

    def _free(self, seq_ids: list[str]) -> None:
        for seq_id in seq_ids:
            seq = self._seqs.pop(seq_id, None)
            if seq is not None:  # freeing twice (or an unknown id) is harmless
                self._free_slots.append(seq.slot)
        self._free_slots.sort()
        if seq_ids and not self._seqs:
            self.cache.release_memory()

    def _check(self, batch: StepBatch) -> None:
        new_ids = [n.seq_id for n in batch.new]
        if len(set(new_ids)) != len(new_ids) or any(s in self._seqs for s in new_ids):
            raise ValueError(f"step {batch.step_id}: a new sequence id is already in use")
        if len(new_ids) > len(self._free_slots):
            raise ValueError(
                f"step {batch.step_id}: {len(new_ids)} new sequences but only "
                f"{len(self._free_slots)} free KV slots"
            )
        known = set(new_ids) | set(self._seqs)
        seen: set[str] = set()
        for chunk in batch.chunks:
            if chunk.seq_id not in known:
                raise ValueError(f"step {batch.step_id}: unknown sequence {chunk.seq_id!r}")
            if chunk.seq_id in seen:
                raise ValueError(f"step {batch.step_id}: two chunks for sequence {chunk.seq_id!r}")
            seen.add(chunk.seq_id)
            self._check_chunk(batch.step_id, chunk)

    def _check_chunk(self, step_id: int, chunk: ScheduledChunk) -> None:
        seq = self._seqs.get(chunk.seq_id)
        cached = seq.num_cached if seq else 0
        if chunk.start_pos != cached:
            raise ValueError(
                f"step {step_id}: chunk for {chunk.seq_id!r} starts at {chunk.start_pos}, "
                f"but {cached} tokens are cached"
            )
        if not chunk.token_ids:
            raise ValueError(f"step {step_id}: empty chunk for {chunk.seq_id!r}")
        if chunk.start_pos + len(chunk.token_ids) > self.max_len:
            raise ValueError(
                f"step {step_id}: sequence {chunk.seq_id!r} would exceed the context "
                f"of {self.max_len} tokens"
            )
        if not all(isinstance(t, int) and 0 <= t < self.vocab_size for t in chunk.token_ids):
            raise ValueError(f"step {step_id}: token id out of range [0, {self.vocab_size}) in {chunk.seq_id!r}")

    def _compute(self, chunks: list[ScheduledChunk]) -> list:
        slot_of = {c.seq_id: self._seqs[c.seq_id].slot for c in chunks}
        ordered = order_chunks(chunks, slot_of)
        self.cache.ensure_capacity(max(c.start_pos + len(c.token_ids) for c in ordered))
        inputs = build_step_inputs(ordered, slot_of, self.device)
        with torch.inference_mode():
            hidden = self.decoder.forward(inputs, self.cache)  # [T, hidden]
            logits = self.decoder.logits(hidden[inputs.sample_rows])  # [S, V]
            for chunk in ordered:
                seq = self._seqs[chunk.seq_id]
                seq.num_cached += len(chunk.token_ids)
                if seq.sampling.seen is not None:
                    seq.sampling.observe(torch.tensor(chunk.token_ids, device=self.device))
            states = {seq_id: self._seqs[seq_id].sampling for seq_id in inputs.sample_seq_ids}
            return sample(logits, inputs.sample_seq_ids, states)
