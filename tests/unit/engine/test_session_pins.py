"""Stateful sessions keep their prompt's prefix cached, within a memory limit."""

from __future__ import annotations

import pytest

from llm_byoc.engine.block_pool import BlockPool
from llm_byoc.engine.scheduler import Scheduler, SchedulerLimits
from llm_byoc.engine.session_pins import SessionPins
from llm_byoc.errors import SessionNotFound
from llm_byoc.protocol import AddSequence, SampledToken, SamplingParams, StepOutput


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pins_hold_blocks_and_are_bounded():
    pool = BlockPool(10)
    clock = Clock()
    pins = SessionPins(pool, max_blocks=4, ttl_s=60, clock=clock)
    a, b = pins.open(), pins.open()
    blocks = pool.allocate(6)
    pins.pin(a, blocks[:3])
    pins.pin(b, blocks[3:6])  # 6 pinned > 4: the least recently used session lets go
    assert pins.num_pinned == 3 and pins.num_open == 2
    pool.free(list(reversed(blocks)))
    assert pool.num_free == 9 - 3  # b's pins hold three blocks
    pins.pin(b, blocks[3:5])  # a new prefix replaces the old one
    assert pins.num_pinned == 2 and pool.num_free == 9 - 2
    pins.close(b)
    assert pool.num_free == 9 and pins.num_open == 1


def test_unknown_closed_and_expired_sessions():
    pool, clock = BlockPool(4), Clock()
    pins = SessionPins(pool, 4, ttl_s=10, clock=clock)
    with pytest.raises(SessionNotFound, match="not open on this instance"):
        pins.check("nope")
    session = pins.open()
    pins.pin(session, pool.allocate(1))
    clock.now = 11
    with pytest.raises(SessionNotFound, match="expired after 10 s idle"):
        pins.check(session)
    assert pool.num_free == 2  # its pin went with it (the block itself is still allocated here)


def make(num_blocks=40, share=0.5) -> Scheduler:
    return Scheduler(SchedulerLimits(
        max_num_seqs=4, max_batched_tokens=64, max_model_len=48, max_waiting=8, max_new_tokens_limit=100,
        vocab_size=1000, eos_token_ids=frozenset({2}), num_kv_blocks=num_blocks, block_size=4,
        session_kv_share=share))


def finish(s: Scheduler, seq_id: str, prompt: list[int], session: str = "") -> int:
    """Run one request to its end; the prompt tokens it found cached."""
    s.add(AddSequence(seq_id, prompt, SamplingParams(max_new_tokens=1), session_id=session))
    cached = None
    while s.has_work():
        batch = s.schedule()
        if batch is None:
            break
        for update in s.postprocess(StepOutput(batch.step_id, [SampledToken(c.seq_id, 7) for c in batch.chunks if c.sample])):
            cached = update.num_cached_tokens if cached is None else cached
    return cached or 0


def test_a_session_prefix_survives_traffic_that_evicts_everything_else():
    s = make(num_blocks=13, share=0.75)  # 12 blocks of 4 tokens, up to 9 pinned
    session = s.sessions.open()
    document = list(range(100, 132))  # 8 blocks
    assert finish(s, "first", document + [1], session) == 0
    for i in range(4):  # other prompts that cycle through every unpinned block
        finish(s, f"other{i}", list(range(300 + 40 * i, 315 + 40 * i)))
    assert finish(s, "second", document + [2], session) == 32
    assert finish(s, "no-session", document + [3]) == 32  # pinned blocks are shared with anyone


def test_without_a_session_the_same_traffic_evicts_the_prefix():
    s = make(num_blocks=13, share=0.75)
    document = list(range(100, 132))
    finish(s, "first", document + [1])
    for i in range(4):
        finish(s, f"other{i}", list(range(300 + 40 * i, 315 + 40 * i)))
    assert finish(s, "second", document + [2]) == 0


def test_pins_give_way_before_a_request_would_be_stuck():
    s = make(num_blocks=13, share=1.0)
    session = s.sessions.open()
    finish(s, "first", list(range(100, 144)) + [1], session)  # 11 blocks pinned
    assert s.kv_stats().blocks_pinned == 11
    assert finish(s, "big", list(range(500, 540)) + [2]) == 0  # needs 11: the pins were released
    assert s.kv_stats().blocks_pinned == 0 and s.kv_stats().sessions_open == 1


def test_requests_naming_an_unknown_session_are_refused():
    s = make()
    with pytest.raises(SessionNotFound, match="not open"):
        s.add(AddSequence("x", [5, 6], SamplingParams(), session_id="made-up"))
