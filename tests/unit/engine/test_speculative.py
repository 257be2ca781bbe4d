"""Speculative decoding in the scheduler, with a fake worker: proposals, rollback of rejected blocks,
prefix-cache hashes only over accepted tokens, the budget, opt-outs."""

from __future__ import annotations

from llm_byoc.engine.kv_cache_manager import block_hash, root_hash
from llm_byoc.engine.scheduler import Scheduler, SchedulerLimits
from llm_byoc.engine.speculative import COOL_DOWN_TOKENS, can_speculate, propose_ngram
from llm_byoc.protocol import AddSequence, GrammarSpec, SampledToken, SamplingParams, StepOutput

PHRASE = [11, 12, 13, 14, 15, 16, 17, 18]


def make(**spec) -> Scheduler:
    limits = dict(max_num_seqs=4, max_batched_tokens=64, max_model_len=256, max_waiting=8, max_new_tokens_limit=1000,
                  vocab_size=100, eos_token_ids=frozenset({2}), num_kv_blocks=65, block_size=4,
                  speculative="ngram", num_speculative_tokens=4, ngram_min=1, ngram_max=3, spec_min_acceptance=0.0)
    return Scheduler(SchedulerLimits(**{**limits, **spec}))


def step(s: Scheduler, answers: dict[str, list[int]]):
    """Schedule, and answer each sampling chunk with the given tokens (accepted proposals + one)."""
    batch = s.schedule()
    samples = [SampledToken(c.seq_id, t) for c in batch.chunks if c.sample for t in answers.get(c.seq_id, [7])]
    return batch, s.postprocess(StepOutput(batch.step_id, samples))


def test_prompt_lookup_proposes_what_followed_the_longest_suffix():
    assert propose_ngram([1, 2, 3, 4, 5, 9, 2, 3], 2, 1, 3) == [4, 5]
    assert propose_ngram([1, 2, 3, 4, 5, 9, 1, 2, 3, 8, 2, 3], 3, 1, 3) == [8, 2, 3]  # the latest occurrence
    assert propose_ngram([1, 2, 3], 2, 1, 3) == []


def test_rejected_proposals_free_their_blocks_and_only_accepted_tokens_are_hashed():
    s = make()
    s.add(AddSequence("a", PHRASE * 2, SamplingParams(max_new_tokens=50)))
    step(s, {"a": [11]})  # prefill: 16 tokens, then 11 (the phrase starts again)
    batch, _ = step(s, {"a": [99]})  # proposals 12 13 14 15; the model says 99: none accepted
    chunk = batch.chunks[0]
    assert (chunk.token_ids, chunk.num_draft, chunk.start_pos) == ([11, 12, 13, 14, 15], 4, 16)
    seq = s._running["a"]
    assert seq.num_computed == 17 and len(seq.blocks) == 5  # the block for positions 20.. went back
    assert s.kv.pool.num_free == s.kv.pool.num_usable - 5
    batch, _ = step(s, {"a": [11]})  # nothing earlier follows 99: a plain decode
    assert batch.chunks[0].num_draft == 0
    batch, updates = step(s, {"a": [99, 11, 50]})  # 11 -> what followed its latest occurrence: 99 11; both accepted
    assert batch.chunks[0].token_ids == [11, 99, 11] and updates[0].token_ids == [99, 11, 50]
    assert seq.num_computed == 21 and seq.token_ids[-4:] == [11, 99, 11, 50]
    assert seq.num_registered == 5  # positions 16..19 (11 99 11 99) are computed and known: hashed
    # every registered block's hash is that of the tokens the sequence really holds
    hashes, parent = [], root_hash("")
    for i in range(seq.num_registered):
        parent = block_hash(parent, seq.token_ids[i * 4:(i + 1) * 4])
        hashes.append(parent)
    assert [b.block_hash for b in seq.blocks[: seq.num_registered]] == hashes
    stats = s.spec_stats()
    assert stats.num_drafts == 2 and stats.num_accepted_tokens == len(updates[0].token_ids) - 1


def test_accepted_run_stops_at_a_stop_token_and_at_max_new_tokens():
    s = make()
    s.add(AddSequence("a", PHRASE * 2, SamplingParams(max_new_tokens=4, stop_token_ids=(13,))))
    step(s, {"a": [11]})
    batch, updates = step(s, {"a": [12, 13, 99]})
    assert batch.chunks[0].num_draft == 2  # max_new_tokens 4, one generated: at most two proposals + one token
    s2 = make()
    s2.add(AddSequence("b", PHRASE * 2, SamplingParams(max_new_tokens=20, stop_token_ids=(13,))))
    step(s2, {"b": [11]})
    _, updates = step(s2, {"b": [12, 13, 14, 15, 16]})
    assert updates[0].token_ids == [12, 13] and updates[0].finish_reason.value == "stop"
    assert s2.kv.pool.num_free == s2.kv.pool.num_usable


def test_no_proposals_when_opted_out_constrained_penalised_or_the_batch_is_full():
    for params in (SamplingParams(max_new_tokens=9, speculative=False),
                   SamplingParams(max_new_tokens=9, repetition_penalty=1.2), SamplingParams(max_new_tokens=9, min_tokens=2)):
        s = make()
        s.add(AddSequence("a", PHRASE * 2, params))
        step(s, {"a": [11]})  # the phrase starts again: 12 13 14 15 would be proposed
        batch, _ = step(s, {})
        assert batch.chunks[0].num_draft == 0, params
    assert not can_speculate(SamplingParams(grammar=GrammarSpec("regex", "a+")))
    assert can_speculate(SamplingParams(temperature=0.8, top_p=0.9, logprobs=True, logit_bias=((3, 1.0),)))
    s = make(spec_max_num_seqs=2)
    for name in "abc":
        s.add(AddSequence(name, [ord(name)] + PHRASE * 2, SamplingParams(max_new_tokens=9)))
    step(s, {name: [11] for name in "abc"})
    batch, _ = step(s, {})
    assert all(c.num_draft == 0 for c in batch.chunks)  # three running > two
    off = make(speculative="off")
    off.add(AddSequence("a", PHRASE * 2, SamplingParams(max_new_tokens=9)))
    step(off, {"a": [11]})
    batch, _ = step(off, {})
    assert batch.chunks[0].num_draft == 0 and off.spec_stats() is None


def test_the_engine_settings_reach_the_scheduler():
    from llm_byoc.config import EngineConfig
    from llm_byoc.protocol import ModelInfo

    info = ModelInfo("llama", "/m", 100, 256, [2], "cpu", "float32", max_num_seqs=4, load_time_s=0.0,
                     num_kv_blocks=65, kv_block_size=4)
    config = EngineConfig.from_env({"LLM_BYOC_SPECULATIVE": "ngram", "LLM_BYOC_NUM_SPECULATIVE_TOKENS": "3",
                                    "LLM_BYOC_NGRAM_MAX": "2", "LLM_BYOC_SPECULATIVE_MAX_NUM_SEQS": "1",
                                    "LLM_BYOC_SPECULATIVE_MIN_ACCEPTANCE": "0.5"})
    limits = SchedulerLimits.from_config(config, info)
    assert (limits.speculative, limits.num_speculative_tokens, limits.ngram_min, limits.ngram_max,
            limits.spec_max_num_seqs, limits.spec_min_acceptance) == ("ngram", 3, 1, 2, 1, 0.5)
    assert SchedulerLimits.from_config(EngineConfig(), info).speculative == "off"


def test_a_sequence_switched_off_for_low_acceptance_is_tried_again_after_a_cool_down():
    s = make(speculative="draft", spec_min_acceptance=0.5)  # a draft model's proposals: asked for while enabled
    s.add(AddSequence("a", PHRASE * 2, SamplingParams(max_new_tokens=300)))
    step(s, {"a": [7]})
    asked = []
    for _ in range(4 + COOL_DOWN_TOKENS + 1):
        batch, _ = step(s, {"a": [7]})  # every proposal rejected
        asked.append(batch.chunks[0].num_propose)
    assert batch.chunks[0].num_draft == 0 and "a" in s._running
    assert asked[:4] == [4] * 4  # 16 proposed, none accepted: off
    assert asked[4:4 + COOL_DOWN_TOKENS] == [0] * COOL_DOWN_TOKENS  # one token a step while it cools down
    assert asked[4 + COOL_DOWN_TOKENS:] == [4]  # tried again, with fresh counts
    # what it proposes from now on judges it: a good run keeps it on (4 of 8, 8 of 12, 12 of 16, ...)
    for _ in range(5):
        batch, _ = step(s, {"a": [7] * 5})  # all four accepted
        assert batch.chunks[0].num_propose == 4
