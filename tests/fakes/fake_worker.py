"""A fake model worker process: the real pipe protocol, a trivial "model".

The next token depends only on the last one (``next_token``), so tests can
compute expected outputs. The fake checks the scheduler's side of the contract
strictly (a sequence is announced before its first chunk, chunks continue
exactly where its cache ends or, for a sequence without blocks, after whole
blocks of cached prefix; freed sequences are gone; block ids are in the pool,
a sequence has blocks for every token it computes, and no block a chunk
writes belongs to any other live sequence) and answers a violation with a
non-fatal WorkerFailure, so a scheduler bug fails a test instead of passing
silently.

Use ``fake_target(FakeModel(...))`` as the executor's worker target; it
speaks the real framing (``process.Channel``).
"""

from __future__ import annotations

import functools
import os
import signal
import time
from dataclasses import dataclass

from llm_byoc import protocol
from llm_byoc.process import Channel
from llm_byoc.protocol import (
    ModelInfo,
    SampledToken,
    Shutdown,
    StepBatch,
    StepOutput,
    WorkerFailure,
    WorkerReady,
)

NUM_SPECIAL = 3  # ids 0..2 (pad, bos, eos in the tiny test tokenizers) are never made up


@dataclass(frozen=True)
class FakeModel:
    vocab_size: int = 384
    eos_token_id: int = 2
    eos_after_token: int | None = None  # the token after this one is EOS
    max_model_len: int = 128
    max_num_seqs: int = 16
    block_size: int = 16
    num_kv_blocks: int = 129  # 16 sequences of 128 tokens, plus the null block
    load_delay_s: float = 0.0
    step_delay_s: float = 0.0
    fail_load: str | None = None  # send WorkerFailure(fatal=True) instead of ready
    crash_after_steps: int | None = None  # SIGKILL itself on step N + 1
    fail_step_on_token: int | None = None  # a chunk holding this token fails its step


def next_token(last: int, model: FakeModel = FakeModel()) -> int:
    if model.eos_after_token is not None and last == model.eos_after_token:
        return model.eos_token_id
    return NUM_SPECIAL + (last * 7 + 1) % (model.vocab_size - NUM_SPECIAL)


def expected_tokens(prompt: list[int], n: int, model: FakeModel = FakeModel()) -> list[int]:
    """The first ``n`` tokens the fake generates after ``prompt`` (ignoring EOS)."""
    out, last = [], prompt[-1]
    for _ in range(n):
        last = next_token(last, model)
        out.append(last)
    return out


class ContractError(Exception):
    pass


class FakeRunner:
    def __init__(self, model: FakeModel, max_num_seqs: int | None = None):
        self.model = model
        self.max_num_seqs = max_num_seqs or model.max_num_seqs
        self.cache: dict[str, list[int]] = {}  # seq_id -> tokens "in the KV cache"
        self.tables: dict[str, list[int]] = {}  # seq_id -> its block table

    def step(self, batch: StepBatch) -> StepOutput:
        for seq_id in batch.freed:
            if self.cache.pop(seq_id, None) is None:
                raise ContractError(f"freed unknown sequence {seq_id}")
            del self.tables[seq_id]
        for seq_id in batch.preempted:
            if seq_id not in self.cache:
                raise ContractError(f"preempted unknown sequence {seq_id}")
            self.cache[seq_id], self.tables[seq_id] = [], []
        for new in batch.new:
            if new.seq_id in self.cache:
                raise ContractError(f"sequence {new.seq_id} announced twice")
            self.cache[new.seq_id], self.tables[new.seq_id] = [], []
        if len(self.cache) > self.max_num_seqs:
            raise ContractError(f"{len(self.cache)} sequences > {self.max_num_seqs} in a batch")
        samples = []
        for chunk in batch.chunks:
            samples.extend(self._chunk(chunk))
        return StepOutput(batch.step_id, samples)

    def _chunk(self, chunk) -> list[SampledToken]:
        cached = self.cache.get(chunk.seq_id)
        if cached is None:
            raise ContractError(f"chunk for unknown sequence {chunk.seq_id}")
        table, size = self.tables[chunk.seq_id], self.model.block_size
        if not table and chunk.start_pos % size == 0:  # after a cached prefix the engine handed over
            cached.extend([-1] * (chunk.start_pos - len(cached)))
        if chunk.start_pos != len(cached) or not chunk.token_ids:
            raise ContractError(f"{chunk.seq_id}: chunk at {chunk.start_pos}, cache has {len(cached)}")
        if self.model.fail_step_on_token in chunk.token_ids:
            raise ContractError(f"poisoned token {self.model.fail_step_on_token}")
        if not all(0 < b < self.model.num_kv_blocks for b in chunk.block_ids):
            raise ContractError(f"{chunk.seq_id}: block ids {chunk.block_ids} outside the pool")
        table.extend(chunk.block_ids)
        end = chunk.start_pos + len(chunk.token_ids)
        if len(table) * size < end:
            raise ContractError(f"{chunk.seq_id}: {len(table)} blocks for {end} tokens")
        for block in {table[p // size] for p in range(chunk.start_pos, end)}:
            holders = [s for s, t in self.tables.items() if s != chunk.seq_id and block in t]
            if holders:
                raise ContractError(f"{chunk.seq_id} writes block {block}, which {holders[0]} holds")
        cached.extend(chunk.token_ids)
        if len(cached) > self.model.max_model_len:
            raise ContractError(f"{chunk.seq_id}: position {len(cached) - 1} beyond the window")
        if not chunk.sample:
            return []
        return [SampledToken(chunk.seq_id, next_token(cached[-1], self.model), -0.5)]


def run_fake_worker(conn, config, model: FakeModel = FakeModel()) -> None:
    channel = Channel(conn, protocol)

    def send(message, call_id: int = 0) -> None:
        channel.send(call_id, message)

    time.sleep(model.load_delay_s)
    if model.fail_load:
        send(WorkerFailure("model_load_error", model.fail_load, fatal=True))
        return
    info = ModelInfo(
        model_type="fake",
        model_path=str(config.model),
        vocab_size=model.vocab_size,
        max_model_len=model.max_model_len,
        eos_token_ids=[model.eos_token_id],
        device="cpu",
        dtype="float32",
        max_num_seqs=config.max_num_seqs or model.max_num_seqs,  # as the real worker resolves it
        load_time_s=model.load_delay_s,
        kv_block_size=model.block_size,
        num_kv_blocks=model.num_kv_blocks,
        kv_bytes_per_token=64,
    )
    send(WorkerReady(info))
    runner, steps = FakeRunner(model, info.max_num_seqs), 0
    while True:
        call_id, message, _ = channel.receive()
        if isinstance(message, Shutdown):
            return
        steps += 1
        if model.crash_after_steps is not None and steps > model.crash_after_steps:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(model.step_delay_s)
        try:
            send(runner.step(message), call_id)
        except ContractError as exc:
            send(WorkerFailure("contract_error", str(exc), fatal=False), call_id)


def fake_target(model: FakeModel = FakeModel()):
    """A picklable worker target for ModelExecutor / LLMEngine.start."""
    return functools.partial(run_fake_worker, model=model)
