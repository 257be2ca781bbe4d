"""Step inputs: row order, sample rows, masks, compact vs gathered decode slots."""

from __future__ import annotations

import torch

from llm_byoc.protocol import ScheduledChunk
from llm_byoc.worker.batch import build_step_inputs, order_chunks

CPU = torch.device("cpu")


def test_decodes_first_by_slot_then_prefills():
    chunks = [
        ScheduledChunk("p", [1, 2, 3], 4, True),
        ScheduledChunk("d2", [9], 10, True),
        ScheduledChunk("d0", [8], 5, False),
    ]
    slots = {"p": 1, "d2": 2, "d0": 0}
    ordered = order_chunks(chunks, slots)
    assert [c.seq_id for c in ordered] == ["d0", "d2", "p"]
    inputs = build_step_inputs(ordered, slots, CPU)
    assert inputs.token_ids.tolist() == [8, 9, 1, 2, 3]
    assert inputs.positions.tolist() == [5, 10, 4, 5, 6]
    assert inputs.slots.tolist() == [0, 2, 1, 1, 1]
    assert inputs.sample_rows.tolist() == [1, 4] and inputs.sample_seq_ids == ["d2", "p"]
    span = inputs.prefills[0]
    assert (span.row, span.length, span.slot, span.kv_len) == (2, 3, 1, 7)
    assert span.mask[0, 0].sum(-1).tolist() == [5, 6, 7]  # the cached prefix plus a causal chunk
    decode = inputs.decode
    assert decode.gather is None and (decode.slot_lo, decode.slot_hi) == (0, 3)
    assert decode.scatter.tolist() == [0, 2] and decode.kv_len == 11
    assert decode.mask[:, 0, 0].sum(-1).tolist() == [6, 1, 11]  # idle slot 1 sees one key


def test_spread_slots_are_gathered():
    chunks = [ScheduledChunk("a", [1], 3, True), ScheduledChunk("b", [2], 7, True)]
    slots = {"a": 0, "b": 15}
    decode = build_step_inputs(order_chunks(chunks, slots), slots, CPU).decode
    assert decode.gather.tolist() == [0, 15] and decode.mask.shape == (2, 1, 1, 8)
