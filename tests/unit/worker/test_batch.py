"""Step inputs: row order, sample rows, slots from block tables, masks, decode groups, cascade groups."""

from __future__ import annotations

import pytest
import torch

from llm_byoc.protocol import ScheduledChunk
from llm_byoc.worker import batch
from llm_byoc.worker.batch import DECODE_SPLIT_MIN, DecodeGroup, build_step_inputs, order_chunks
from llm_byoc.worker.kv_cache import NULL_SLOT

CPU = torch.device("cpu")
BS = 4  # tokens per block


def test_decodes_first_by_context_then_prefills():
    chunks = [
        ScheduledChunk("p", [1, 2, 3], 4, True),
        ScheduledChunk("d2", [9], 10, True),
        ScheduledChunk("d0", [8], 5, False),
    ]
    tables = {"p": [7, 3], "d2": [1, 2, 5], "d0": [4, 6]}
    ordered = order_chunks(chunks)
    assert [c.seq_id for c in ordered] == ["d0", "d2", "p"]
    inputs = build_step_inputs(ordered, tables, BS, CPU)
    assert inputs.token_ids.tolist() == [8, 9, 1, 2, 3]
    assert inputs.positions.tolist() == [5, 10, 4, 5, 6]
    # position p of a sequence lives in block table[p // 4], offset p % 4
    assert inputs.slot_mapping.tolist() == [6 * 4 + 1, 5 * 4 + 2, 3 * 4 + 0, 3 * 4 + 1, 3 * 4 + 2]
    assert inputs.sample_rows.tolist() == [1, 4] and inputs.sample_seq_ids == ["d2", "p"]
    span = inputs.prefills[0]
    assert (span.row, span.length, span.start) == (2, 3, 4)
    assert span.gather.tolist() == [28, 29, 30, 31, 12, 13, 14]  # the cached prefix, then the chunk
    assert span.mask[0, 0].sum(-1).tolist() == [5, 6, 7]  # causal over the cached prefix
    (group,) = inputs.decode_groups
    assert (group.row_lo, group.row_hi, group.kv_len) == (0, 2, 11)
    rows = group.gather.view(2, 11)
    assert rows[0, :6].tolist() == [16, 17, 18, 19, 24, 25] and set(rows[0, 6:].tolist()) == {NULL_SLOT}
    assert rows[1].tolist() == [4, 5, 6, 7, 8, 9, 10, 11, 20, 21, 22]
    assert group.mask[:, 0, 0].sum(-1).tolist() == [6, 11]


def test_a_prompt_from_position_zero_gathers_nothing():
    inputs = build_step_inputs([ScheduledChunk("a", [1, 2, 3, 4, 5], 0, True)], {"a": [2, 9]}, BS, CPU)
    span = inputs.prefills[0]
    assert span.gather is None and span.mask is None
    assert inputs.decode_groups == [] and inputs.slot_mapping.tolist() == [8, 9, 10, 11, 36]


def test_equal_contexts_need_no_mask():
    chunks = [ScheduledChunk("a", [1], 6, True), ScheduledChunk("b", [2], 6, True)]
    (group,) = build_step_inputs(chunks, {"a": [1, 2], "b": [3, 4]}, BS, CPU).decode_groups
    assert group.mask is None and group.kv_len == 7


def test_very_different_contexts_decode_in_separate_groups():
    long = DECODE_SPLIT_MIN * 3
    tables = {"s1": [1], "s2": [2], "long": list(range(3, 3 + long // BS + 1))}
    chunks = order_chunks([ScheduledChunk("long", [5], long - 1, True),
                           ScheduledChunk("s1", [5], 2, True), ScheduledChunk("s2", [6], 3, True)])
    groups = build_step_inputs(chunks, tables, BS, CPU).decode_groups
    assert [(g.row_lo, g.row_hi, g.kv_len) for g in groups] == [(0, 2, 4), (2, 3, long)]


def test_within_a_length_bucket_rows_follow_their_lora_slot():
    chunks = [ScheduledChunk("a", [1], 9, True), ScheduledChunk("b", [2], 3, True), ScheduledChunk("c", [3], 5, True),
              ScheduledChunk("far", [4], DECODE_SPLIT_MIN + 10, True)]
    slots = {"a": 0, "b": 1, "c": 0, "far": 0}
    ordered = order_chunks(chunks, slots.get)
    assert [c.seq_id for c in ordered] == ["c", "a", "b", "far"]
    tables = {"a": [1, 2, 3], "b": [4], "c": [5, 6], "far": list(range(7, 7 + (DECODE_SPLIT_MIN + 11) // BS + 1))}
    groups = build_step_inputs(ordered, tables, BS, CPU).decode_groups
    assert [(g.row_lo, g.row_hi, g.kv_len) for g in groups] == [(0, 3, 10), (3, 4, DECODE_SPLIT_MIN + 11)]
    assert groups[0].mask[:, 0, 0].sum(-1).tolist() == [6, 10, 4]  # each row its own context


def test_chunks_behind_the_same_cached_blocks_share_one_prefix_with_cascade():
    tables = {"a": [3, 4, 7], "b": [3, 4, 8], "c": [3, 5, 9], "d": [3, 4, 6, 2]}
    chunks = [ScheduledChunk("a", [1, 2, 3], 8, True), ScheduledChunk("b", [4, 5], 8, True),
              ScheduledChunk("c", [6, 7], 8, True),  # another second block: alone, the plain path
              ScheduledChunk("d", [8, 9, 1, 2, 3, 4], 8, True)]
    plain = build_step_inputs(chunks, tables, BS, CPU)
    assert plain.shared_prefixes == [] and len(plain.prefills) == 4
    inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=True)
    (shared,) = inputs.shared_prefixes
    assert shared.length == 8 and shared.gather.tolist() == [12, 13, 14, 15, 16, 17, 18, 19]
    assert [(s.row, s.length, s.start) for s in shared.spans] == [(0, 3, 8), (3, 2, 8), (7, 6, 8)]
    assert all(s.gather is None and s.mask is None for s in shared.spans)
    assert shared.rows.tolist() == [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12]
    (alone,) = inputs.prefills
    assert (alone.row, alone.start) == (5, 8) and alone.gather is not None
    assert inputs.slot_mapping.tolist() == plain.slot_mapping.tolist()


def test_cascade_leaves_chunks_from_position_zero_and_inside_a_block_alone():
    tables = {"a": [3, 4], "b": [3, 4], "c": [5], "d": [6]}
    chunks = [ScheduledChunk("a", [1, 2], 5, True), ScheduledChunk("b", [3, 4], 5, True),  # 5: inside block 2
              ScheduledChunk("c", [1, 2, 3], 0, True), ScheduledChunk("d", [1, 2, 3], 0, True)]
    inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=True)
    assert inputs.shared_prefixes == [] and len(inputs.prefills) == 4


@pytest.fixture
def cascade_from_two_blocks(monkeypatch):
    monkeypatch.setattr(batch, "CASCADE_DECODE_MIN", 2 * BS)


def test_decode_rows_behind_the_same_cached_blocks_attend_by_cascade(cascade_from_two_blocks):
    # a, b, d: three cached blocks [3, 4, 5] in common; c shares two, e one; f is alone; g sits in its 2nd block
    tables = {"a": [3, 4, 5, 7], "b": [3, 4, 5, 8, 9], "c": [3, 4, 6, 10], "d": [3, 4, 5, 11],
              "e": [3, 12, 13, 14], "f": [20, 21, 22, 23], "g": [3, 24]}
    starts = {"a": 13, "b": 17, "c": 12, "d": 12, "e": 14, "f": 12, "g": 7}
    chunks = order_chunks([ScheduledChunk(s, [1], p, True) for s, p in starts.items()])
    rows = {c.seq_id: r for r, c in enumerate(chunks)}
    plain = build_step_inputs(chunks, tables, BS, CPU)
    assert plain.shared_decodes == [] and [(g.row_lo, g.row_hi) for g in plain.decode_groups] == [(0, 7)]
    inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=True)
    # sorted by their blocks: [3, 4, 5] a, b, d, then c shares [3, 4] with them (2 blocks: still enough)
    (shared,) = inputs.shared_decodes
    assert shared.rows.tolist() == sorted(rows[s] for s in "abcd")
    assert shared.length == 8 and shared.gather.tolist() == list(range(12, 20))  # blocks 3, 4
    own = {c: shared.own_gather.view(4, shared.own_len)[i].tolist()
           for i, c in enumerate(sorted("abcd", key=rows.get))}
    assert shared.own_len == 10  # b: positions 8..17
    assert own["b"] == [20, 21, 22, 23, 32, 33, 34, 35, 36, 37]
    assert own["a"] == [20, 21, 22, 23, 28, 29] + [NULL_SLOT] * 4  # positions 8..13, then nothing
    assert own["c"] == [24, 25, 26, 27, 40] + [NULL_SLOT] * 5
    assert shared.own_mask[:, 0, 0].sum(-1).tolist() == [len([s for s in slots if s != NULL_SLOT])
                                                          for slots in own.values()]
    # e (one block in common), f and g (no full block in common) decode as before, in runs around the cascade
    alone = [(g.row_lo, g.row_hi) for g in inputs.decode_groups]
    assert sorted(r for lo, hi in alone for r in range(lo, hi)) == sorted(rows[s] for s in "efg")
    assert inputs.slot_mapping.tolist() == plain.slot_mapping.tolist()


def test_a_row_that_shares_too_little_starts_the_next_cascade_group(cascade_from_two_blocks):
    tables = {"a": [3, 4, 5, 7], "b": [3, 4, 5, 8], "c": [3, 6, 9, 10], "d": [3, 6, 9, 11], "e": [30, 31, 32, 33]}
    chunks = order_chunks([ScheduledChunk(s, [1], 12, True) for s in tables])
    inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=True)
    assert sorted((s.rows.tolist(), s.gather.tolist()) for s in inputs.shared_decodes) == [
        ([0, 1], list(range(12, 24))), ([2, 3], [12, 13, 14, 15, 24, 25, 26, 27, 36, 37, 38, 39])]
    assert [(g.row_lo, g.row_hi) for g in inputs.decode_groups] == [(4, 5)]
    assert all(s.own_mask is None and s.own_len == 1 for s in inputs.shared_decodes)  # all at position 12


def test_too_short_a_shared_prefix_or_a_windowed_layer_forms_no_decode_cascade():
    tables = {"a": [3, 4, 5, 7], "b": [3, 4, 5, 8]}
    chunks = [ScheduledChunk("a", [1], 12, True), ScheduledChunk("b", [1], 13, True)]
    assert build_step_inputs(chunks, tables, BS, CPU, cascade=True).shared_decodes == []  # 12 < 256 tokens
    batch.CASCADE_DECODE_MIN, saved = 12, batch.CASCADE_DECODE_MIN
    try:
        assert len(build_step_inputs(chunks, tables, BS, CPU, cascade=True).shared_decodes) == 1
        windowed = build_step_inputs(chunks, tables, BS, CPU, cascade=True, window=8)
        assert len(windowed.shared_decodes) == 1 and windowed.windowed.shared_decodes == []
        assert [(g.row_lo, g.row_hi) for g in windowed.windowed.decode_groups] == [(0, 2)]
        everywhere = build_step_inputs(chunks, tables, BS, CPU, cascade=True, window=8, all_windowed=True)
        assert everywhere.shared_decodes == [] and everywhere.windowed is None
    finally:
        batch.CASCADE_DECODE_MIN = saved


def test_windowed_layers_get_their_own_indices_only_once_a_context_passes_the_window():
    chunks = [ScheduledChunk("a", [1], 4, True), ScheduledChunk("b", [2, 3], 0, True)]
    inputs = build_step_inputs(chunks, {"a": [1, 2], "b": [3]}, BS, CPU, window=5)
    assert inputs.window == 5 and inputs.windowed is None  # 5 keys at most: the plain indices serve
    assert build_step_inputs(chunks, {"a": [1, 2], "b": [3]}, BS, CPU).window is None


def test_a_windowed_decode_row_gathers_its_last_window_keys_right_aligned():
    # "long" at position 9 (10 keys) sees positions 7, 8, 9; "short" at position 1 sees 0, 1 (left-padded)
    chunks = order_chunks([ScheduledChunk("long", [1], 9, True), ScheduledChunk("short", [2], 1, True)])
    tables = {"long": [5, 6, 7], "short": [2]}
    inputs = build_step_inputs(chunks, tables, BS, CPU, window=3)
    (plain,) = inputs.decode_groups
    assert plain.kv_len == 10  # layers over the whole context still gather it all
    (group,) = inputs.windowed.decode_groups
    assert (group.row_lo, group.row_hi, group.kv_len) == (plain.row_lo, plain.row_hi, 3)
    rows = dict(zip([c.seq_id for c in chunks], group.gather.view(2, 3).tolist()))
    assert rows["long"] == [6 * 4 + 3, 7 * 4 + 0, 7 * 4 + 1]
    assert rows["short"] == [NULL_SLOT, 2 * 4 + 0, 2 * 4 + 1]
    masks = dict(zip([c.seq_id for c in chunks], group.mask[:, 0, 0].tolist()))
    assert masks == {"long": [True, True, True], "short": [False, True, True]}
    assert inputs.windowed.slot_mapping is inputs.slot_mapping and inputs.windowed.windowed is None


def test_a_windowed_prefill_chunk_sees_a_band_of_window_keys():
    # a chunk at positions 6..9 after 6 cached tokens, window 3: keys 4..9, query p sees p-2..p
    tables = {"a": [1, 2, 3]}
    chunk = ScheduledChunk("a", [1, 2, 3, 4], 6, True)
    (span,) = build_step_inputs([chunk], tables, BS, CPU, window=3).windowed.prefills
    assert span.gather.tolist() == [8, 9, 10, 11, 12, 13]  # positions 4..9
    assert span.mask[0, 0].int().tolist() == [[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 0],
                                             [0, 0, 0, 1, 1, 1]]
    # from position 0 it attends over its own keys, under the band
    (first,) = build_step_inputs([ScheduledChunk("a", [1] * 5, 0, True)], tables, BS, CPU, window=2).windowed.prefills
    assert first.gather is None and first.mask[0, 0].int().tolist() == [
        [1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]]


def test_windowed_layers_form_no_cascade_groups():
    tables = {"a": [3, 4, 7], "b": [3, 4, 8]}
    chunks = [ScheduledChunk("a", [1, 2, 3], 8, True), ScheduledChunk("b", [4, 5], 8, True)]
    inputs = build_step_inputs(chunks, tables, BS, CPU, cascade=True, window=4)
    assert len(inputs.shared_prefixes) == 1
    assert inputs.windowed.shared_prefixes == [] and [s.row for s in inputs.windowed.prefills] == [0, 3]


def test_every_layer_windowed_no_index_reaches_below_the_window():
    """Blocks below the window are freed by the engine (their table entries are stale, here 90 and 91): with
    ``all_windowed`` the windowed indices serve every layer and the full-context ones are not built."""
    tables = {"d": [90, 91, 5, 6], "p": [90, 91, 7, 8]}  # window 4: "d" at 13 reads 10..13, "p" 9..14 from 12
    chunks = order_chunks([ScheduledChunk("d", [1], 13, True), ScheduledChunk("p", [2, 3, 4], 12, True)])
    both = build_step_inputs(chunks, tables, BS, CPU, window=4)
    only = build_step_inputs(chunks, tables, BS, CPU, window=4, all_windowed=True)
    assert only.windowed is None and only.window == 4
    assert only.decode_groups[0].gather.tolist() == both.windowed.decode_groups[0].gather.tolist()
    assert only.prefills[0].gather.tolist() == both.windowed.prefills[0].gather.tolist()
    stale = set(range(90 * BS, 92 * BS))
    read = set(only.decode_groups[0].gather.tolist()) | set(only.prefills[0].gather.tolist())
    assert read and not read & stale
    assert set(both.decode_groups[0].gather.tolist()) & stale  # the full-context indices would reach them
    short = build_step_inputs([ScheduledChunk("a", [1, 2], 0, True)], {"a": [3]}, BS, CPU, window=4,
                              all_windowed=True)
    assert short.windowed is None and [s.row for s in short.prefills] == [0]  # within the window: the plain ones


def test_a_decode_group_s_additive_mask_is_its_bool_mask_made_once_per_dtype():
    mask = torch.tensor([[True, True, False], [True, True, True]])[:, None, None, :]
    group = DecodeGroup(0, 2, 3, torch.zeros(6, dtype=torch.long), mask)
    bias = group.bias(torch.float32)
    assert bias.shape == mask.shape and bias.dtype == torch.float32
    assert torch.equal(bias == 0, mask) and bool(torch.isneginf(bias[~mask]).all())
    assert group.bias(torch.float32) is bias  # every layer of the step reuses it
    assert group.bias(torch.bfloat16).dtype == torch.bfloat16
    assert DecodeGroup(0, 1, 3, torch.zeros(3, dtype=torch.long), None).bias(torch.float32) is None
