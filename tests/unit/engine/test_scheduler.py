"""The scheduler with fake step outputs: no worker, no torch."""

from __future__ import annotations

import pytest
from llm_byoc.engine.scheduler import Scheduler, SchedulerLimits
from llm_byoc.errors import InvalidRequest, QueueFull
from llm_byoc.protocol import (
    AddSequence,
    FinishReason,
    SampledToken,
    SamplingParams,
    StepBatch,
    StepOutput,
)

EOS = 2


def make(max_num_seqs=4, max_batched_tokens=32, max_model_len=64, max_waiting=8) -> Scheduler:
    return Scheduler(
        SchedulerLimits(
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            max_model_len=max_model_len,
            max_waiting=max_waiting,
            max_new_tokens_limit=1000,
            vocab_size=100,
            eos_token_ids=frozenset({EOS}),
        )
    )


def add(s: Scheduler, seq_id: str, n_prompt: int, max_new_tokens=5, **params) -> None:
    prompt = [10 + i % 50 for i in range(n_prompt)]
    s.add(AddSequence(seq_id, prompt, SamplingParams(max_new_tokens=max_new_tokens, **params)))


def reply(batch: StepBatch, token: int = 7, overrides: dict | None = None) -> StepOutput:
    """A fake worker: one sample per chunk that asks for one."""
    overrides = overrides or {}
    samples = [SampledToken(c.seq_id, overrides.get(c.seq_id, token)) for c in batch.chunks if c.sample]
    return StepOutput(batch.step_id, samples)


def run_step(s: Scheduler, token: int = 7, overrides: dict | None = None):
    batch = s.schedule()
    assert batch is not None
    return batch, s.postprocess(reply(batch, token, overrides))


def chunk_sizes(batch: StepBatch) -> dict[str, int]:
    return {c.seq_id: len(c.token_ids) for c in batch.chunks}


def test_prefill_then_decode_until_length():
    s = make()
    add(s, "a", 5, max_new_tokens=3)
    batch, updates = run_step(s)
    assert [n.seq_id for n in batch.new] == ["a"]
    chunk = batch.chunks[0]
    assert (chunk.start_pos, len(chunk.token_ids), chunk.sample) == (0, 5, True)
    assert updates[0].token_ids == [7] and updates[0].finish_reason is None
    assert updates[0].num_prompt_tokens == 5
    batch, _ = run_step(s)
    assert batch.new == [] and batch.chunks[0].token_ids == [7] and batch.chunks[0].start_pos == 5
    _, updates = run_step(s)
    assert updates[0].finish_reason is FinishReason.LENGTH
    assert s.num_running == 0 and s.schedule() is None


def test_continuous_batching_join_next_step_and_leave_when_finished():
    s = make()
    add(s, "a", 4, max_new_tokens=2)
    run_step(s)
    add(s, "b", 4, max_new_tokens=3)  # arrives while "a" decodes
    batch, updates = run_step(s)
    assert [n.seq_id for n in batch.new] == ["b"]
    assert chunk_sizes(batch) == {"a": 1, "b": 4}
    assert {u.seq_id: u.finish_reason for u in updates} == {"a": FinishReason.LENGTH, "b": None}
    assert s.num_running == 1  # "a" left the batch in the step it finished
    batch, _ = run_step(s)
    assert batch.freed == ["a"] and chunk_sizes(batch) == {"b": 1}
    batch, _ = run_step(s)
    assert batch.freed == []


def test_chunked_prefill_respects_budget_and_decodes_first():
    s = make(max_batched_tokens=16)
    add(s, "a", 3, max_new_tokens=10)
    run_step(s)
    add(s, "b", 40)
    add(s, "c", 5)
    batch, updates = run_step(s)
    # "a" decodes first (1), "b" gets the rest of the budget, "c" must wait (no budget left)
    assert chunk_sizes(batch) == {"a": 1, "b": 15}
    assert [n.seq_id for n in batch.new] == ["b"]
    assert not next(c for c in batch.chunks if c.seq_id == "b").sample
    assert [u.seq_id for u in updates] == ["a"]  # no token for a partial prefill
    batch, _ = run_step(s)
    assert chunk_sizes(batch) == {"a": 1, "b": 15}
    b_chunk = next(c for c in batch.chunks if c.seq_id == "b")
    assert b_chunk.start_pos == 15
    batch, updates = run_step(s)
    # b needs 10 more: done (sample), c admitted with the remaining 16 - 1 - 10 = 5 tokens
    assert chunk_sizes(batch) == {"a": 1, "b": 10, "c": 5}
    assert {u.seq_id for u in updates} == {"a", "b", "c"}


def test_max_num_seqs_limits_the_running_batch():
    s = make(max_num_seqs=2)
    for name in "abc":
        add(s, name, 3, max_new_tokens=2)
    batch, _ = run_step(s)
    assert [n.seq_id for n in batch.new] == ["a", "b"] and s.num_waiting == 1
    batch, _ = run_step(s)  # a and b finish this step
    assert batch.new == [] and s.num_running == 0
    batch, _ = run_step(s)
    assert [n.seq_id for n in batch.new] == ["c"] and sorted(batch.freed) == ["a", "b"]


def test_queue_full_beyond_max_waiting():
    s = make(max_num_seqs=2, max_waiting=3)
    for i in range(5):  # 2 free slots + 3 waiting places
        add(s, f"s{i}", 3)
    with pytest.raises(QueueFull):
        add(s, "too-many", 3)
    run_step(s)  # two start running: the slots are taken, 3 wait
    with pytest.raises(QueueFull):
        add(s, "still-too-many", 3)


def test_abort_waiting_and_running():
    s = make(max_num_seqs=1)
    add(s, "run", 3, max_new_tokens=10)
    add(s, "wait", 3)
    run_step(s)
    update = s.abort("wait")
    assert update.finish_reason is FinishReason.ABORT and s.num_waiting == 0
    update = s.abort("run")
    assert update.finish_reason is FinishReason.ABORT and update.token_ids == []
    assert s.abort("run") is None  # idempotent
    add(s, "next", 3)
    batch = s.schedule()
    assert batch.freed == ["run"]  # the waiting one never reached the worker
    assert [n.seq_id for n in batch.new] == ["next"]


def test_abort_while_the_step_runs_drops_its_sample():
    s = make()
    add(s, "a", 3, max_new_tokens=10)
    batch = s.schedule()
    s.abort("a")
    assert s.postprocess(reply(batch)) == []


def test_eos_stops_unless_ignore_eos():
    s = make()
    add(s, "stops", 3, max_new_tokens=10)
    add(s, "ignores", 3, max_new_tokens=2, ignore_eos=True)
    _, updates = run_step(s, token=EOS)
    by_id = {u.seq_id: u for u in updates}
    assert by_id["stops"].finish_reason is FinishReason.STOP and by_id["stops"].token_ids == [EOS]
    assert by_id["ignores"].finish_reason is None
    _, updates = run_step(s, token=EOS)
    assert updates[0].finish_reason is FinishReason.LENGTH


def test_context_window_full_finishes_with_length():
    s = make(max_model_len=20)
    add(s, "a", 17, max_new_tokens=100)
    reasons = []
    for _ in range(3):
        _, updates = run_step(s)
        reasons.append(updates[0].finish_reason)
    assert reasons == [None, None, FinishReason.LENGTH]  # 17 + 3 = 20 tokens


@pytest.mark.parametrize(
    "prompt, message",
    [([], "empty"), (list(range(10, 74)), "context window"), ([5, 100], "vocabulary"), ([True], "vocabulary")],
)
def test_invalid_sequences_are_refused(prompt, message):
    s = make(max_model_len=64)
    with pytest.raises(InvalidRequest, match=message):
        s.add(AddSequence("x", prompt, SamplingParams()))
    assert s.num_waiting == 0


def test_bad_params_and_duplicate_ids_are_refused():
    s = make()
    with pytest.raises(InvalidRequest, match="temperature"):
        s.add(AddSequence("x", [5], SamplingParams(temperature=-1.0)))
    add(s, "dup", 3)
    with pytest.raises(InvalidRequest, match="already"):
        add(s, "dup", 3)


def test_a_skipped_sample_fails_the_sequence_instead_of_stalling():
    s = make()
    add(s, "a", 3)
    add(s, "b", 3)
    batch = s.schedule()
    output = StepOutput(batch.step_id, [SampledToken("a", 7)])
    updates = {u.seq_id: u for u in s.postprocess(output)}
    assert updates["b"].finish_reason is FinishReason.ERROR
    assert s.num_running == 1


def test_fail_and_finish_all():
    s = make(max_num_seqs=1)
    add(s, "a", 3)
    add(s, "b", 3)
    s.schedule()
    s.fail(["a"])
    assert s.num_running == 0
    assert s.finish_all() == ["b"]
    assert not s.has_work()
