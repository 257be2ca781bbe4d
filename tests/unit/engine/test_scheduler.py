"""The scheduler with fake step outputs: no worker, no torch."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from llm_byoc.engine.scheduler import Scheduler, SchedulerLimits
from llm_byoc.errors import InvalidRequest, QueueFull
from llm_byoc.protocol import (
    AddSequence,
    FinishReason,
    PromptLogprobs,
    RopeByLength,
    SampledToken,
    SamplingParams,
    StepBatch,
    StepOutput,
)

EOS = 2


def make(max_num_seqs=4, max_batched_tokens=32, max_model_len=64, max_waiting=8, num_kv_blocks=65,
         block_size=16, prefix_caching=True, rope_by_length=None, prefill_chunk_tokens=0) -> Scheduler:
    return Scheduler(
        SchedulerLimits(
            max_num_seqs=max_num_seqs,
            max_batched_tokens=max_batched_tokens,
            max_model_len=max_model_len,
            max_waiting=max_waiting,
            max_new_tokens_limit=1000,
            vocab_size=100,
            eos_token_ids=frozenset({EOS}),
            num_kv_blocks=num_kv_blocks,
            block_size=block_size,
            enable_prefix_caching=prefix_caching,
            rope_by_length=rope_by_length,
            prefill_chunk_tokens=prefill_chunk_tokens,
        )
    )


def add(s: Scheduler, seq_id: str, n_prompt: int, max_new_tokens=5, prompt=None, **params) -> None:
    prompt = prompt or [10 + (sum(map(ord, seq_id)) * 7 + i) % 50 for i in range(n_prompt)]  # rarely a shared prefix
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
    assert s.num_running == 0
    assert s.schedule() == StepBatch(4, freed=["a"])  # the worker drops it even while idle
    assert not s.has_work() and s.schedule() is None


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


def test_beside_decodes_later_prompts_join_a_step_only_within_the_prefill_chunk():
    s = make(max_num_seqs=8, max_batched_tokens=64, max_model_len=128, prefill_chunk_tokens=12)
    add(s, "a", 3, max_new_tokens=20)
    run_step(s)
    for name in "bcd":
        add(s, name, 5)
    batch, updates = run_step(s)
    # a decodes; b and c fit in the 12 prompt tokens (5 + 5), d gets the 2 left and waits for the rest
    assert chunk_sizes(batch) == {"a": 1, "b": 5, "c": 5, "d": 2}
    assert {u.seq_id for u in updates} == {"a", "b", "c"}
    batch, _ = run_step(s)
    assert chunk_sizes(batch) == {"a": 1, "b": 1, "c": 1, "d": 3}


def test_the_first_prompt_in_a_step_takes_the_whole_budget_and_no_cap_applies_without_decodes():
    s = make(max_num_seqs=8, max_batched_tokens=32, max_model_len=128, prefill_chunk_tokens=8)
    for name in "abc":
        add(s, name, 10, max_new_tokens=20)
    batch, _ = run_step(s)  # nothing decodes yet: the budget is the only limit
    assert chunk_sizes(batch) == {"a": 10, "b": 10, "c": 10}
    add(s, "long", 60)
    add(s, "e", 4)
    batch, _ = run_step(s)  # a long prompt is not cut below the budget; nothing joins it beyond the cap
    assert chunk_sizes(batch) == {"a": 1, "b": 1, "c": 1, "long": 29}
    batch, _ = run_step(s)
    assert chunk_sizes(batch) == {"a": 1, "b": 1, "c": 1, "long": 29}
    batch, _ = run_step(s)  # the long prompt's last 2 tokens leave 6 of the cap: e's 4 join
    assert chunk_sizes(batch) == {"a": 1, "b": 1, "c": 1, "long": 2, "e": 4}


def test_a_long_queue_of_prompts_widens_the_prefill_chunk():
    s = make(max_num_seqs=64, max_batched_tokens=256, max_model_len=128, prefill_chunk_tokens=8)
    add(s, "a", 3, max_new_tokens=20)
    run_step(s)
    for i in range(30):
        add(s, f"q{i:02d}", 10)
    batch, _ = run_step(s)
    # 30 prompts of 300 tokens in all wait beside 1 decode: the cap is isqrt(300 * (1 + 30 / 3)) = 57, not 8
    prompt_tokens = sum(n for seq_id, n in chunk_sizes(batch).items() if seq_id != "a")
    assert prompt_tokens == 57 and chunk_sizes(batch)["q05"] == 7


@given(requests=st.lists(st.tuples(st.integers(0, 8), st.integers(1, 60), st.integers(1, 6)), min_size=1, max_size=16),
       chunk=st.integers(0, 40), budget=st.integers(16, 64))
def test_with_any_prefill_chunk_every_sequence_finishes_each_token_computed_once(requests, chunk, budget):
    """(arrival step, prompt tokens, new tokens) per request: whatever the cap, no step exceeds the budget,
    nothing starves, and every prompt and generated token is computed exactly once (no prefix cache, no
    preemption: the pool holds every sequence)."""
    s = make(max_num_seqs=8, max_batched_tokens=budget, max_model_len=128, num_kv_blocks=129,
             prefix_caching=False, prefill_chunk_tokens=chunk)
    arrivals = sorted(enumerate(requests), key=lambda r: r[1][0])
    computed: dict[str, int] = {}
    finished: dict[str, FinishReason] = {}
    step = 0
    while arrivals or s.has_work():
        while arrivals and arrivals[0][1][0] <= step:
            i, (_, prompt_tokens, new_tokens) = arrivals.pop(0)
            add(s, f"s{i}", prompt_tokens, max_new_tokens=new_tokens)
        step += 1
        assert step < 1000, "a sequence starved"
        batch = s.schedule()
        if batch is None:
            continue
        assert sum(len(c.token_ids) for c in batch.chunks) <= budget
        for c in batch.chunks:
            computed[c.seq_id] = computed.get(c.seq_id, 0) + len(c.token_ids)
        finished.update((u.seq_id, u.finish_reason) for u in s.postprocess(reply(batch)) if u.finish_reason)
    assert finished == {f"s{i}": FinishReason.LENGTH for i in range(len(requests))}
    assert computed == {f"s{i}": n + new - 1 for i, (_, n, new) in enumerate(requests)}  # the last token is not fed


def test_the_prefill_chunk_is_64_tokens_on_a_cpu_and_off_elsewhere_unless_set():
    from llm_byoc.config import EngineConfig
    from llm_byoc.protocol import ModelInfo

    def limits(device: str, env: dict) -> SchedulerLimits:
        info = ModelInfo("llama", "/m", 100, 256, [2], device, "float32", max_num_seqs=4, load_time_s=0.0,
                         num_kv_blocks=65, kv_block_size=4)
        return SchedulerLimits.from_config(EngineConfig.from_env(env), info)

    assert limits("cpu", {}).prefill_chunk_tokens == 64
    assert limits("cuda:0", {}).prefill_chunk_tokens == 0
    assert limits("cuda:0", {"LLM_BYOC_PREFILL_CHUNK_TOKENS": "512"}).prefill_chunk_tokens == 512
    assert limits("cpu", {"LLM_BYOC_PREFILL_CHUNK_TOKENS": "256"}).prefill_chunk_tokens == 256


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


def test_a_stop_token_id_stops_even_with_ignore_eos():
    s = make()
    add(s, "stops", 3, max_new_tokens=10, stop_token_ids=(9,), ignore_eos=True)
    add(s, "other", 3, max_new_tokens=10)
    _, updates = run_step(s, token=7)
    assert all(u.finish_reason is None for u in updates)
    _, updates = run_step(s, token=9)
    by_id = {u.seq_id: u for u in updates}
    assert by_id["stops"].finish_reason is FinishReason.STOP and by_id["stops"].token_ids == [9]
    assert by_id["other"].finish_reason is None


def test_bias_and_stop_ids_outside_the_vocabulary_are_refused():
    s = make()
    with pytest.raises(InvalidRequest, match="logit_bias: token id 1000000 is not in the vocabulary"):
        add(s, "a", 3, logit_bias=((10**6, 1.0),))
    with pytest.raises(InvalidRequest, match="stop_token_ids: token id 1000000 is not in the vocabulary"):
        add(s, "b", 3, stop_token_ids=(10**6,))
    assert s.num_waiting == 0


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
    assert s.num_waiting == 0 and s.num_running == 0
    assert s.schedule() == StepBatch(2, freed=["a"])  # "b" never reached the worker
    assert not s.has_work()


# --- KV memory: blocks, admission, preemption, prefix caching --------------------------


def test_a_sequence_holds_the_blocks_its_tokens_need():
    s = make(block_size=4)
    add(s, "a", 6, max_new_tokens=10)
    batch, _ = run_step(s)
    assert batch.chunks[0].block_ids == [1, 2]  # 6 tokens: two blocks of 4
    for expected in ([], [], [3], [], [], [], [4]):  # tokens 7, 8 fit; the 9th needs block 3 ...
        batch, _ = run_step(s)
        assert batch.chunks[0].block_ids == expected
    assert s.kv_stats().blocks_used == 4 and s.kv_stats().tokens_used == 13


def test_admission_waits_for_memory_then_proceeds():
    s = make(max_num_seqs=4, block_size=4, num_kv_blocks=7, max_model_len=24)  # 6 usable blocks
    add(s, "a", 16, max_new_tokens=2)  # 4 blocks
    add(s, "b", 12, max_new_tokens=2)  # 3 blocks: does not fit beside "a" (and the reserve)
    batch, _ = run_step(s)
    assert [n.seq_id for n in batch.new] == ["a"] and s.num_waiting == 1
    batch, updates = run_step(s)  # "a" decodes (a fifth block) and finishes
    assert [u.finish_reason for u in updates] == [FinishReason.LENGTH]
    batch, _ = run_step(s)
    assert [n.seq_id for n in batch.new] == ["b"] and batch.freed == ["a"]


def test_the_newest_sequence_is_preempted_and_resumes_where_it_was():
    s = make(max_num_seqs=4, block_size=4, num_kv_blocks=7, max_model_len=24, max_batched_tokens=64)
    add(s, "old", 8, max_new_tokens=12)
    add(s, "new", 8, max_new_tokens=12)
    out = {"old": [], "new": []}
    preempted_at = None
    for step in range(60):
        batch = s.schedule()
        if batch is None:
            break
        if "new" in batch.preempted:
            preempted_at = step
            assert "new" not in {c.seq_id for c in batch.chunks}
        if preempted_at is not None and batch.new == [] and any(
                c.seq_id == "new" and c.start_pos == 0 for c in batch.chunks):
            chunk = next(c for c in batch.chunks if c.seq_id == "new")
            assert len(chunk.token_ids) == 8 + len(out["new"])  # recomputed: prompt + what it had made
        for update in s.postprocess(reply(batch, token=30)):
            out[update.seq_id].extend(update.token_ids)
    assert preempted_at is not None and s.num_preemptions >= 1
    assert out == {"old": [30] * 12, "new": [30] * 12}  # nothing lost, nothing twice
    assert s.kv_stats().preemptions == s.num_preemptions


def test_an_aborted_preempted_sequence_is_still_freed_in_the_worker():
    s = make(max_num_seqs=4, block_size=4, num_kv_blocks=5, max_model_len=16)
    add(s, "old", 4, max_new_tokens=10)
    add(s, "new", 4, max_new_tokens=10)
    for _ in range(10):
        batch = s.schedule()
        s.postprocess(reply(batch))
        if s.num_preemptions:
            break
    assert s.num_preemptions == 1 and s.num_waiting == 1
    assert s.abort("new").finish_reason is FinishReason.ABORT
    assert "new" in s.schedule().freed


def test_prefix_caching_skips_cached_blocks_and_reports_them():
    s = make(block_size=4, max_batched_tokens=64)
    doc = list(range(20, 34))  # 14 tokens: three full blocks
    add(s, "first", 0, max_new_tokens=1, prompt=doc + [40])
    run_step(s)
    add(s, "second", 0, max_new_tokens=1, prompt=doc + [41, 42])
    batch, updates = run_step(s)
    chunk = next(c for c in batch.chunks if c.seq_id == "second")
    assert chunk.start_pos == 12 and chunk.token_ids == doc[12:] + [41, 42]
    assert chunk.block_ids[:3] == [1, 2, 3]  # the first's blocks, shared
    assert {u.seq_id: u.num_cached_tokens for u in updates} == {"second": 12}
    stats = s.kv_stats()
    assert stats.prefix_queried_tokens == 15 + 16 and stats.prefix_hit_tokens == 12


def test_a_prompt_entirely_cached_still_computes_its_last_token():
    s = make(block_size=4, max_batched_tokens=64)
    prompt = list(range(20, 28))  # exactly two blocks
    add(s, "a", 0, max_new_tokens=1, prompt=prompt)
    run_step(s)
    add(s, "b", 0, max_new_tokens=1, prompt=prompt)
    batch, updates = run_step(s)
    chunk = next(c for c in batch.chunks if c.seq_id == "b")
    assert (chunk.start_pos, chunk.token_ids) == (4, prompt[4:])  # block 2 is recomputed for its logits
    assert updates[0].num_cached_tokens == 4


def test_copies_of_a_prompt_wait_for_its_blocks_then_share_them():
    """n samples of one prompt arrive together: the first computes the prompt, the others take its blocks."""
    s = make(block_size=4, max_batched_tokens=64)
    prompt = list(range(20, 34))  # 14 tokens: three full blocks
    for j in range(3):
        add(s, f"c{j}", 0, max_new_tokens=2, prompt=prompt)
    add(s, "other", 0, max_new_tokens=2, prompt=list(range(60, 70)))
    batch, _ = run_step(s)
    assert chunk_sizes(batch) == {"c0": 14, "other": 10}  # the copies wait, the unrelated prompt goes past them
    batch, updates = run_step(s)
    assert {c.seq_id: c.start_pos for c in batch.chunks if len(c.token_ids) > 1} == {"c1": 12, "c2": 12}
    assert {u.seq_id: u.num_cached_tokens for u in updates if u.seq_id in ("c1", "c2")} == {"c1": 12, "c2": 12}


def test_a_sequence_asking_for_prompt_logprobs_computes_its_whole_prompt_and_leaves_its_blocks_cached():
    s = make(block_size=4, max_batched_tokens=64)
    prompt = list(range(20, 34))  # 14 tokens: three full blocks
    add(s, "first", 0, max_new_tokens=1, prompt=prompt)
    add(s, "copy", 0, max_new_tokens=1, prompt=prompt, prompt_logprobs=2)  # does not wait for first's blocks
    batch, _ = run_step(s)
    assert chunk_sizes(batch) == {"first": 14, "copy": 14}
    add(s, "again", 0, max_new_tokens=3, prompt=prompt + [50], prompt_logprobs=0)
    add(s, "later", 0, max_new_tokens=1, prompt=prompt + [51])
    batch, updates = run_step(s)
    starts = {c.seq_id: c.start_pos for c in batch.chunks}
    assert starts == {"again": 0, "later": 12}  # cached blocks skipped only by the one that did not ask
    assert {u.seq_id: u.num_cached_tokens for u in updates} == {"again": 0, "later": 12}
    assert batch.new[0].params.prompt_logprobs == 0  # the worker is told


def test_prompt_logprobs_from_the_worker_reach_the_first_update():
    s = make()
    add(s, "a", 5, max_new_tokens=2, prompt_logprobs=0)
    batch = s.schedule()
    prompt = PromptLogprobs([-1.0, -2.0, -3.0, -4.0])
    updates = s.postprocess(StepOutput(batch.step_id, [SampledToken("a", 7, prompt=prompt)]))
    assert updates[0].prompt_logprobs == prompt
    _, updates = run_step(s)
    assert updates[0].prompt_logprobs is None


def test_prompt_logprobs_out_of_range_are_refused():
    s = make()
    for bad in (-1, 21, 1.5, True):
        with pytest.raises(InvalidRequest, match="prompt_logprobs"):
            add(s, f"bad{bad}", 5, prompt_logprobs=bad)


def test_prefix_caching_off_shares_nothing():
    s = make(block_size=4, max_batched_tokens=64, prefix_caching=False)
    add(s, "a", 0, max_new_tokens=1, prompt=list(range(20, 33)))
    run_step(s)
    add(s, "b", 0, max_new_tokens=1, prompt=list(range(20, 33)))
    batch, updates = run_step(s)
    assert batch.chunks[0].start_pos == 0 and updates[0].num_cached_tokens == 0
    assert s.kv_stats().prefix_queried_tokens == 0


def test_a_context_the_cache_cannot_hold_is_refused_with_the_numbers():
    s = make(block_size=4, num_kv_blocks=9, max_model_len=32)  # 8 blocks: 32 tokens
    with pytest.raises(InvalidRequest, match="context window is 32 tokens.*KV cache holds 32 tokens"):
        add(s, "long", 32)
    with pytest.raises(ValueError, match="KV cache holds 32 tokens, less than one sequence"):
        make(block_size=4, num_kv_blocks=9, max_model_len=64)


def test_with_no_prefix_shared_prefix_caching_changes_no_step():
    """W1's shape (distinct prompts, a closed loop: a new request when one finishes, blocks of finished
    sequences reused): the worker is sent the very same steps on and off; only which blocks differ.
    Off, freed blocks are reused at once (the fewest blocks ever touched); on, finished sequences'
    blocks keep their prefixes while never-used blocks remain."""
    from dataclasses import replace

    def steps(prefix_caching: bool) -> tuple[list[StepBatch], int]:
        s = make(max_num_seqs=4, max_batched_tokens=24, num_kv_blocks=33, block_size=4,
                 prefix_caching=prefix_caching)
        prompts = [[10 + (7 * j + 3 * i) % 80 for i in range(9 + j % 4)] for j in range(12)]
        for j in range(4):
            add(s, f"r{j}", 0, max_new_tokens=6 + j % 3, prompt=prompts[j])
        sent, batches, peak = 4, [], 0
        while (batch := s.schedule()) is not None:
            batches.append(batch)
            peak = max(peak, s.kv_stats().blocks_used)
            for update in s.postprocess(reply(batch)):
                if update.finish_reason is not None and sent < len(prompts):
                    add(s, f"r{sent}", 0, max_new_tokens=6 + sent % 3, prompt=prompts[sent])
                    sent += 1
        assert sent == len(prompts)
        return batches, peak

    def block_ids(batches: list[StepBatch]) -> set[int]:
        return {i for b in batches for c in b.chunks for i in c.block_ids}

    def without_blocks(batches: list[StepBatch]) -> list[StepBatch]:
        return [replace(b, chunks=[replace(c, block_ids=[]) for c in b.chunks]) for b in batches]

    (on, _), (off, peak_off) = steps(True), steps(False)
    assert len(on) > 20 and not any(b.preempted for b in on)
    assert without_blocks(on) == without_blocks(off)
    assert len(block_ids(off)) == peak_off < 32  # off: only as many blocks as were ever held at once
    assert len(block_ids(on)) == 32  # on: the whole pool, finished prompts' blocks kept for later hits


def test_chunks_carry_the_prompt_length_their_rope_goes_by():
    s = make(max_batched_tokens=8, rope_by_length=RopeByLength("dynamic", 32, False))
    add(s, "a", 20, max_new_tokens=3)
    batches = [run_step(s)[0] for _ in range(5)]
    assert [(c.start_pos, len(c.token_ids), c.rope_length) for b in batches for c in b.chunks] == [
        (0, 8, 20), (8, 8, 20), (16, 4, 20), (20, 1, 20), (21, 1, 20)]  # prompt chunks and decodes alike
    plain = make(max_batched_tokens=8)
    add(plain, "a", 20)
    assert run_step(plain)[0].chunks[0].rope_length == 0


def test_blocks_are_shared_only_between_prompts_rotated_alike():
    s = make(block_size=4, max_batched_tokens=64, rope_by_length=RopeByLength("longrope", 12, False))
    doc = list(range(20, 40))
    cached = {}
    for seq_id, n in [("short", 10), ("short2", 11), ("long", 16), ("long2", 18)]:
        add(s, seq_id, 0, max_new_tokens=1, prompt=doc[:n])
        cached.update({u.seq_id: u.num_cached_tokens for u in run_step(s)[1]})
    assert cached == {"short": 0, "short2": 8, "long": 0, "long2": 16}


def test_a_phi3_sequence_outgrowing_the_threshold_is_computed_again_with_its_whole_length():
    """transformers' Phi-3 drops its cache when a sequence first passes original_max_position_embeddings: the
    sequence goes back to be computed from its first token, its rope_length now its whole length."""
    s = make(block_size=4, max_batched_tokens=64, rope_by_length=RopeByLength("longrope", 12, True))
    add(s, "a", 10, max_new_tokens=6)
    add(s, "b", 20, max_new_tokens=2)  # past the threshold from the start: never recomputed
    steps = [run_step(s)[0] for _ in range(4)]
    assert [c.rope_length for c in steps[0].chunks] == [10, 20]
    assert steps[2].preempted == [] and steps[3].preempted == ["a"]  # 13 tokens: the 13th computes past 12
    (chunk,) = [c for c in steps[3].chunks if c.seq_id == "a"]
    assert (chunk.start_pos, len(chunk.token_ids), chunk.rope_length, chunk.sample) == (0, 13, 13, True)
    assert s.num_preemptions == 0
    batch, _ = run_step(s)
    assert batch.preempted == [] and [(c.start_pos, c.rope_length) for c in batch.chunks] == [(13, 13)]


def windowed(window: int, **kwargs) -> Scheduler:
    s = make(**kwargs)
    s.limits = replace(s.limits, window=window)
    return s


def test_every_layer_windowed_a_long_generation_holds_its_window_and_a_block():
    s = windowed(20, block_size=4, max_model_len=200, num_kv_blocks=80)
    add(s, "a", 10, max_new_tokens=150)
    most = 0
    while s.num_running or s.num_waiting:
        batch, _ = run_step(s)
        seq = s._running.get("a")
        if seq is not None:  # blocks wholly below num_computed - 19 are gone, and only those
            gone = max(0, seq.num_computed - 19) // 4
            assert [b.block_id == 0 for b in seq.blocks] == [True] * gone + [False] * (len(seq.blocks) - gone)
        most = max(most, s.kv_stats().blocks_used)
    assert most <= 20 // 4 + 2  # the window's blocks, one being filled, one more as a step straddles a block
    assert s.kv_stats().blocks_used == 0  # finished: the rest are back too
    plain = make(block_size=4, max_model_len=200, num_kv_blocks=80)
    add(plain, "a", 10, max_new_tokens=150)
    for _ in range(100):
        run_step(plain)
    assert plain.kv_stats().blocks_used > 20  # without a window every block stays


def test_windowed_sequences_preempted_after_freeing_are_recomputed_from_their_first_token():
    s = windowed(16, block_size=4, max_model_len=40, num_kv_blocks=11, max_batched_tokens=16)
    for i in range(4):
        add(s, f"s{i}", 12, max_new_tokens=28)
    restarted, steps = set(), 0
    while (batch := s.schedule()) is not None and steps < 500:
        steps += 1
        restarted |= set(batch.preempted)
        for chunk in batch.chunks:
            seq = s._running[chunk.seq_id]
            assert chunk.token_ids == seq.token_ids[chunk.start_pos : chunk.start_pos + len(chunk.token_ids)]
            if chunk.seq_id in batch.preempted:  # back in the same step: from scratch or whole cached blocks
                assert chunk.start_pos % 4 == 0
            # the next query reads keys >= start_pos - 15: none of them is in a freed block
            lowest = max(0, chunk.start_pos - 15) // 4
            assert all(b.block_id != 0 for b in seq.blocks[lowest:]), chunk.seq_id
        s.postprocess(reply(batch))
    assert s.num_preemptions > 0 and s.num_running == 0 and s.num_waiting == 0
    assert s.kv_stats().blocks_used == 0


def test_a_session_keeps_its_prompt_blocks_while_the_rest_falls_out_of_the_window():
    s = windowed(8, block_size=4, max_model_len=60, num_kv_blocks=40)
    session = s.sessions.open()
    s.add(AddSequence("a", list(range(10, 22)), SamplingParams(max_new_tokens=20), session_id=session))
    for _ in range(15):
        run_step(s)
    blocks = [b.block_id for b in s._running["a"].blocks]
    assert blocks[:3] == [1, 2, 3] and 0 in blocks[3:]  # the prompt's three blocks stay, generated ones go
    while s.num_running:
        run_step(s)
    assert s.sessions.num_pinned == 3 and s.kv.pool.block(0).ref_count == 1
