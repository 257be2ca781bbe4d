"""The tensors of one step: every scheduled token flattened into one row list.

Rows are ordered decode-first: single-token chunks sorted by KV slot, then the
multi-token (prefill) chunks, each a contiguous run of rows. All layers of the
model reuse what is built here once per step (indices, attention masks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..protocol import ScheduledChunk

# Decode attention reads a run of slots as a view when the run is at most this
# many times the number of decoding rows; otherwise it gathers the slots.
_COMPACT_FACTOR = 2


@dataclass(frozen=True)
class DecodeGroup:
    """Single-token chunks, rows ``0..num_rows-1`` of the step, attended in one call."""

    num_rows: int
    slot_lo: int  # first slot of the cache run read (compact case)
    slot_hi: int  # one past the last slot of the run
    scatter: torch.Tensor | None  # [B] row -> index in the run; None when the run is exactly the rows
    gather: torch.Tensor | None  # [B] slot per row when the slots are too spread for a view
    kv_len: int  # keys read per slot: the longest decoding sequence
    mask: torch.Tensor  # [R, 1, 1, kv_len] bool, R = run length (or B when gathering)


@dataclass(frozen=True)
class PrefillSpan:
    """A multi-token chunk of one sequence: rows ``row..row+length-1``."""

    row: int
    length: int
    slot: int
    kv_len: int  # start_pos + length: cached prefix plus this chunk
    mask: torch.Tensor  # [1, 1, length, kv_len] bool, causal over the cached prefix


@dataclass(frozen=True)
class StepInputs:
    token_ids: torch.Tensor  # [T] long
    positions: torch.Tensor  # [T] long
    slots: torch.Tensor  # [T] long: KV slot of each row
    decode: DecodeGroup | None
    prefills: list[PrefillSpan]
    sample_rows: torch.Tensor  # [S] long: rows whose next token is sampled
    sample_seq_ids: list[str]  # sequence of each sample row, same order


def order_chunks(chunks: list[ScheduledChunk], slot_of: dict[str, int]) -> list[ScheduledChunk]:
    """Decode-like chunks (one token) first, by slot; then longer chunks in given order."""
    singles = sorted((c for c in chunks if len(c.token_ids) == 1), key=lambda c: slot_of[c.seq_id])
    return singles + [c for c in chunks if len(c.token_ids) > 1]


def build_step_inputs(
    chunks: list[ScheduledChunk], slot_of: dict[str, int], device: torch.device
) -> StepInputs:
    """``chunks`` must already be in ``order_chunks`` order."""
    token_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    sample_rows: list[int] = []
    sample_seq_ids: list[str] = []
    prefills: list[PrefillSpan] = []
    num_single = sum(1 for c in chunks if len(c.token_ids) == 1)
    for chunk in chunks:
        row, n, slot = len(token_ids), len(chunk.token_ids), slot_of[chunk.seq_id]
        token_ids.extend(chunk.token_ids)
        positions.extend(range(chunk.start_pos, chunk.start_pos + n))
        slots.extend([slot] * n)
        if chunk.sample:
            sample_rows.append(row + n - 1)
            sample_seq_ids.append(chunk.seq_id)
        if n > 1:
            mask = _causal_mask(chunk.start_pos, n, device)
            prefills.append(PrefillSpan(row, n, slot, chunk.start_pos + n, mask))
    decode = _decode_group(chunks[:num_single], slot_of, device) if num_single else None

    def as_tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return StepInputs(
        as_tensor(token_ids), as_tensor(positions), as_tensor(slots),
        decode, prefills, as_tensor(sample_rows), sample_seq_ids,
    )


def _causal_mask(start: int, n: int, device: torch.device) -> torch.Tensor:
    """[1, 1, n, start + n]: query i (position start+i) sees keys 0..start+i."""
    keys = torch.arange(start + n, device=device)
    queries = torch.arange(start, start + n, device=device)
    return (keys[None, :] <= queries[:, None])[None, None]


def _decode_group(
    singles: list[ScheduledChunk], slot_of: dict[str, int], device: torch.device
) -> DecodeGroup:
    slots = [slot_of[c.seq_id] for c in singles]  # ascending
    lengths = [c.start_pos + 1 for c in singles]
    kv_len = max(lengths)
    lo, hi = slots[0], slots[-1] + 1
    if hi - lo > _COMPACT_FACTOR * len(slots):
        gather = torch.tensor(slots, dtype=torch.long, device=device)
        run_lengths = torch.tensor(lengths, device=device)
        mask = torch.arange(kv_len, device=device)[None, :] < run_lengths[:, None]
        return DecodeGroup(len(slots), lo, hi, None, gather, kv_len, mask[:, None, None, :])
    run = [1] * (hi - lo)  # idle slots inside the run attend to one (ignored) key
    for slot, length in zip(slots, lengths):
        run[slot - lo] = length
    mask = torch.arange(kv_len, device=device)[None, :] < torch.tensor(run, device=device)[:, None]
    scatter = None
    if hi - lo != len(slots):
        scatter = torch.tensor([s - lo for s in slots], dtype=torch.long, device=device)
    return DecodeGroup(len(slots), lo, hi, scatter, None, kv_len, mask[:, None, None, :])
