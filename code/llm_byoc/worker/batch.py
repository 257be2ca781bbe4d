"""The tensors of one step: every scheduled token flattened into one row list.

Rows are ordered decode-first: single-token chunks by context-length bucket
(so that each decode group is a run of rows) and, within a bucket, by LoRA
slot (so that a LoRA layer can read each adapter's rows as a plain view), then
the multi-token (prefill) chunks, each a contiguous run of rows. All layers of the model reuse what is
built here once per step: the slot each row's keys and values are written to,
and the slots each attention call gathers.

A slot is ``block * block_size + offset`` in the paged cache (worker/kv_cache.py).
Decode rows of very different context lengths are split into groups, so that a
few long contexts do not make every short one gather (and attend over) their
length: contexts up to ``DECODE_SPLIT_MIN`` tokens form one group, longer ones
one group per power of two.

Prefill chunks that start right after the same cached blocks (requests that
share a system prompt or a document and were admitted behind its cached
blocks) form a ``SharedPrefix`` when the device can run cascade attention
(``attention.CASCADE_DEVICES``): their queries attend over the shared prefix
in one call, so the prefix is gathered once, not once per chunk. Decode
rows whose contexts start with the same full blocks, at least
``CASCADE_DECODE_MIN`` tokens of them (clients asking about one cached
document), form a ``SharedDecode`` the same way and leave their decode
groups (a group's run of rows is split around them).

A model with sliding-window layers (``window``) gets a second set of indices
for those layers, ``StepInputs.windowed``, whenever some row's context is
longer than the window: a query at position p attends over keys p-window+1..p
only (transformers' ``kv_idx > q_idx - sliding_window``), so each decode row
gathers at most ``window`` keys, and each prefill chunk its window's keys
under a banded mask. Cascade groups are not formed there (each chunk's window
is its own). When every layer is windowed (``all_windowed``: Mistral), those
indices serve every layer and the full-context ones are not built at all, so
no position below a row's window is ever read: the engine frees such blocks
and their entries in a block table are stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ..protocol import ScheduledChunk
from .kv_cache import NULL_SLOT

DECODE_SPLIT_MIN = 256
CASCADE_DECODE_MIN = 256  # shared cached tokens that make decode rows attend by cascade


@dataclass(frozen=True)
class DecodeGroup:
    """Single-token rows ``row_lo..row_hi-1``, attended in one call."""

    row_lo: int
    row_hi: int
    kv_len: int  # keys gathered per row: the group's longest context
    gather: torch.Tensor  # [B * kv_len] slots; the null slot past a row's own context
    mask: torch.Tensor | None  # [B, 1, 1, kv_len] bool; None when every row has kv_len keys
    _biases: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def bias(self, dtype: torch.dtype) -> torch.Tensor | None:
        """``mask`` in SDPA's additive form (0 where a row may look, -inf past its context), made once per step
        for every layer. Same bits as the bool mask; on CPU SDPA runs a 16-row group over ~100 keys 1.5x faster
        with it (0.18 vs 0.28 ms, 2 threads), as fast from ~400 keys on."""
        if self.mask is None:
            return None
        if dtype not in self._biases:
            self._biases[dtype] = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device).masked_fill_(
                ~self.mask, float("-inf"))
        return self._biases[dtype]


@dataclass(frozen=True)
class PrefillSpan:
    """A multi-token chunk of one sequence: rows ``row..row+length-1``, positions start.."""

    row: int
    length: int
    start: int
    gather: torch.Tensor | None  # [K] slots of the keys it attends over (cached ones and its own); None: its own
    mask: torch.Tensor | None  # [1, 1, length, K] bool; None (only with gather None): causal over its own keys


@dataclass(frozen=True)
class SharedPrefix:
    """Prefill chunks (``spans``, each with ``start == length``) after the same ``length`` cached tokens."""

    spans: list[PrefillSpan]  # gather and mask None: their own keys are this step's, attended causally
    rows: torch.Tensor  # [sum of the spans' lengths] long: their rows, span after span
    gather: torch.Tensor  # [length] slots of the shared prefix
    length: int


@dataclass(frozen=True)
class SharedDecode:
    """Single-token rows ``rows`` whose contexts start with the same ``length`` cached tokens (``gather``), then
    each its own ``own_len`` keys or fewer (``own_gather``, like a ``DecodeGroup``'s past the prefix)."""

    rows: torch.Tensor  # [B] long
    gather: torch.Tensor  # [length] slots of the shared prefix
    length: int
    own_len: int  # keys gathered per row after the prefix: the longest remainder
    own_gather: torch.Tensor  # [B * own_len] slots of positions length..; the null slot past a row's context
    own_mask: torch.Tensor | None  # [B, 1, 1, own_len] bool; None when every row has own_len keys


@dataclass(frozen=True)
class StepInputs:
    token_ids: torch.Tensor  # [T] long
    positions: torch.Tensor  # [T] long
    slot_mapping: torch.Tensor  # [T] long: where each row's keys/values are written
    decode_groups: list[DecodeGroup]
    prefills: list[PrefillSpan]
    sample_rows: torch.Tensor  # [S] long: rows whose next token is sampled
    sample_seq_ids: list[str]  # sequence of each sample row, same order
    shared_prefixes: list[SharedPrefix] = ()  # prefill chunks attended by cascade (not in ``prefills``)
    shared_decodes: list[SharedDecode] = ()  # decode rows attended by cascade (in no ``decode_groups``)
    rope_lengths: list[int] | None = None  # [T]: each row's sequence length as RoPE sees it; None: not needed
    window: int | None = None  # the sliding window these inputs were built for
    windowed: "StepInputs | None" = None  # the indices of sliding-window layers; None: these serve them too


def length_bucket(kv_len: int) -> int:
    """Decode rows of one bucket attend in one call: all up to DECODE_SPLIT_MIN, then powers of two."""
    return 0 if kv_len <= DECODE_SPLIT_MIN else (kv_len - 1).bit_length()


def order_chunks(chunks: list[ScheduledChunk], lora_slot=None) -> list[ScheduledChunk]:
    """Decode-like chunks (one token) first, by length bucket, then ``lora_slot(seq_id)``, then length;
    then longer chunks in given order."""
    def key(c: ScheduledChunk):
        return length_bucket(c.start_pos + 1), lora_slot(c.seq_id) if lora_slot else 0, c.start_pos

    singles = sorted((c for c in chunks if len(c.token_ids) == 1), key=key)
    return singles + [c for c in chunks if len(c.token_ids) > 1]


def build_step_inputs(
    chunks: list[ScheduledChunk], tables: dict[str, list[int]], block_size: int, device: torch.device,
    cascade: bool = False, rope_lengths: bool = False, window: int | None = None, all_windowed: bool = False,
) -> StepInputs:
    """``chunks`` in ``order_chunks`` order; ``tables``: each sequence's block table, this step's blocks included.
    ``cascade``: group prefill chunks behind the same cached blocks into ``SharedPrefix``es. ``rope_lengths``:
    the model's RoPE depends on the length (``protocol.RopeByLength``): a row at position p of a sequence with
    ``rope_length`` L is rotated as transformers' forward over max(L, p + 1) tokens rotates it (the prompt's
    length for every prompt token, chunked or not; p + 1 for a generated one). ``window``: the model's sliding
    window (None: it has none); ``all_windowed``: every layer attends within it."""
    token_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    sample_rows: list[int] = []
    sample_seq_ids: list[str] = []
    prefills: list[PrefillSpan] = []
    lengths: list[int] | None = [] if rope_lengths else None
    behind: dict[tuple[int, ...], list[tuple[int, ScheduledChunk]]] = {}  # cached blocks -> chunks after them
    windowed = window is not None and any(c.start_pos + len(c.token_ids) > window for c in chunks)
    full = not (windowed and all_windowed)  # some layer attends over the whole context
    for chunk in chunks:
        row, n, table = len(token_ids), len(chunk.token_ids), tables[chunk.seq_id]
        token_ids.extend(chunk.token_ids)
        span = range(chunk.start_pos, chunk.start_pos + n)
        positions.extend(span)
        if lengths is not None:
            lengths.extend(max(chunk.rope_length, p + 1) for p in span)
        slots.extend(table[p // block_size] * block_size + p % block_size for p in span)
        if chunk.sample:  # with proposals: a row after the last known token and after each proposal
            for r in range(row + n - 1 - chunk.num_draft, row + n):
                sample_rows.append(r)
                sample_seq_ids.append(chunk.seq_id)
        if not full:
            continue
        if n > 1 and cascade and chunk.start_pos > 0 and chunk.start_pos % block_size == 0:
            behind.setdefault(tuple(table[: chunk.start_pos // block_size]), []).append((row, chunk))
        elif n > 1:
            prefills.append(_prefill_span(row, chunk, table, block_size, device))
    shared: list[SharedPrefix] = []
    for blocks, members in behind.items():
        if len(members) == 1:  # nothing to share: the plain path
            row, chunk = members[0]
            prefills.append(_prefill_span(row, chunk, tables[chunk.seq_id], block_size, device))
        else:
            shared.append(_shared_prefix(list(blocks), members, block_size, device))
    singles = [c for c in chunks if len(c.token_ids) == 1]
    decodes = _shared_decodes(singles, tables, block_size) if cascade and full else []
    in_cascade = {row for members, _ in decodes for row in members}

    def as_tensor(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    inputs = StepInputs(
        as_tensor(token_ids), as_tensor(positions), as_tensor(slots),
        [_decode_group(lo, hi, singles[lo:hi], tables, block_size, device)
         for lo, hi in _group_bounds(singles, in_cascade)] if full else [],
        prefills, as_tensor(sample_rows), sample_seq_ids, shared,
        [_shared_decode(members, blocks, singles, tables, block_size, device) for members, blocks in decodes],
        lengths, window,
    )
    if not windowed:
        return inputs
    local = _windowed(inputs, chunks, tables, block_size, device, window)
    return replace(inputs, windowed=local) if full else local


def _windowed(inputs: StepInputs, chunks: list[ScheduledChunk], tables: dict[str, list[int]], block_size: int,
              device: torch.device, window: int) -> StepInputs:
    """``inputs`` with the attention indices of sliding-window layers: the same decode groups over each row's
    last ``window`` keys, every prefill chunk over its window (no cascade)."""
    singles = [c for c in chunks if len(c.token_ids) == 1]
    groups = [_window_group(lo, hi, singles[lo:hi], tables, block_size, device, window)
              for lo, hi in _group_bounds(singles)]
    spans, row = [], 0
    for chunk in chunks:
        if len(chunk.token_ids) > 1:
            spans.append(_window_span(row, chunk, tables[chunk.seq_id], block_size, device, window))
        row += len(chunk.token_ids)
    return replace(inputs, decode_groups=groups, prefills=spans, shared_prefixes=[], shared_decodes=[],
                   windowed=None)


def _window_group(lo: int, hi: int, chunks, tables, block_size: int, device, window: int) -> DecodeGroup:
    """``group``'s rows over their last ``window`` keys each, right-aligned: [B, min(window, longest)]."""
    lengths = [c.start_pos + 1 for c in chunks]
    kv_len = min(window, max(lengths))
    pos = torch.tensor(lengths, device=device)[:, None] - kv_len + torch.arange(kv_len, device=device)  # [B, L]
    valid = pos >= 0  # a context shorter than kv_len: padded on the left
    slots = _slots_at([tables[c.seq_id] for c in chunks], pos.clamp(min=0), max(lengths), block_size, device)
    mask = None
    if min(lengths) < kv_len:
        slots = torch.where(valid, slots, NULL_SLOT)
        mask = valid[:, None, None, :]
    return DecodeGroup(lo, hi, kv_len, slots.reshape(-1), mask)


def _window_span(row: int, chunk: ScheduledChunk, table: list[int], block_size: int, device, window: int
                 ) -> PrefillSpan:
    """A chunk's queries over keys start-window+1..end-1, each query over the last ``window`` of them."""
    n, start = len(chunk.token_ids), chunk.start_pos
    end = start + n
    if end <= window:  # no query reaches past its window
        return _prefill_span(row, chunk, table, block_size, device)
    keys = torch.arange(max(0, start - window + 1), end, device=device)
    queries = torch.arange(start, end, device=device)[:, None]
    mask = ((keys[None, :] <= queries) & (keys[None, :] > queries - window))[None, None]  # [1, 1, n, K]
    if start == 0:  # its own keys only, already in this step's k and v
        return PrefillSpan(row, n, start, None, mask)
    return PrefillSpan(row, n, start, _slots_at([table], keys[None], end, block_size, device)[0], mask)


def _shared_prefix(blocks: list[int], members: list[tuple[int, ScheduledChunk]], block_size: int,
                   device: torch.device) -> SharedPrefix:
    length = len(blocks) * block_size
    spans = [PrefillSpan(row, len(chunk.token_ids), length, None, None) for row, chunk in members]
    rows = torch.cat([torch.arange(span.row, span.row + span.length, device=device) for span in spans])
    return SharedPrefix(spans, rows, _slots([blocks], length, block_size, device)[0], length)


def _slots(tables: list[list[int]], kv_len: int, block_size: int, device: torch.device) -> torch.Tensor:
    """[R, kv_len] slots of positions 0..kv_len-1 of each table (short tables padded with the null block)."""
    width = -(-kv_len // block_size)
    padded = [table[:width] + [0] * (width - len(table[:width])) for table in tables]
    blocks = torch.tensor(padded, dtype=torch.long, device=device)  # [R, width]
    pos = torch.arange(kv_len, device=device)
    return blocks[:, pos // block_size] * block_size + pos % block_size


def _slots_at(tables: list[list[int]], positions: torch.Tensor, end: int, block_size: int,
              device: torch.device) -> torch.Tensor:
    """[R, L] slots of ``positions`` [R, L] (all below ``end``) in each table."""
    width = -(-end // block_size)
    padded = [table[:width] + [0] * (width - len(table[:width])) for table in tables]
    blocks = torch.tensor(padded, dtype=torch.long, device=device)  # [R, width]
    return blocks.gather(1, positions // block_size) * block_size + positions % block_size


def _prefill_span(row: int, chunk: ScheduledChunk, table: list[int], block_size: int, device) -> PrefillSpan:
    n, start = len(chunk.token_ids), chunk.start_pos
    if start == 0:
        return PrefillSpan(row, n, 0, None, None)
    kv_len = start + n
    gather = _slots([table], kv_len, block_size, device)[0]
    keys = torch.arange(kv_len, device=device)
    queries = torch.arange(start, kv_len, device=device)
    mask = (keys[None, :] <= queries[:, None])[None, None]  # query i (position start+i) sees keys 0..start+i
    return PrefillSpan(row, n, start, gather, mask)


def _group_bounds(singles: list[ScheduledChunk], skip: set[int] = frozenset()) -> list[tuple[int, int]]:
    """(lo, hi) of each run of single-token chunks in the same length bucket (``order_chunks`` made them runs),
    split around the rows in ``skip``."""
    bounds: list[tuple[int, int]] = []
    lo = None
    for row in range(len(singles) + 1):
        if lo is not None and (row == len(singles) or row in skip or
                               length_bucket(singles[row].start_pos + 1) != length_bucket(singles[lo].start_pos + 1)):
            bounds.append((lo, row))
            lo = None
        if lo is None and row < len(singles) and row not in skip:
            lo = row
    return bounds


def _shared_decodes(singles: list[ScheduledChunk], tables: dict[str, list[int]], block_size: int
                    ) -> list[tuple[list[int], list[int]]]:
    """(rows, blocks): decode rows whose contexts start with the same ``blocks``, at least CASCADE_DECODE_MIN
    tokens of them. Rows in the order of their leading blocks, each run as long as the blocks its rows all
    share stay that long (a row that shares less starts the next run)."""
    cached = {row: tables[c.seq_id][: c.start_pos // block_size] for row, c in enumerate(singles)}  # full blocks
    least = -(-CASCADE_DECODE_MIN // block_size)
    runs: list[tuple[list[int], list[int]]] = []
    for row in sorted((r for r, blocks in cached.items() if len(blocks) >= least), key=cached.get):
        if runs:
            members, blocks = runs[-1]
            common = _common_length(blocks, cached[row])
            if common >= least:
                runs[-1] = members + [row], blocks[:common]
                continue
        runs.append(([row], cached[row]))
    return [(sorted(members), blocks) for members, blocks in runs if len(members) > 1]


def _common_length(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _shared_decode(members: list[int], blocks: list[int], singles: list[ScheduledChunk],
                   tables: dict[str, list[int]], block_size: int, device: torch.device) -> SharedDecode:
    """``members``' rows over ``blocks`` (shared), then each over its own keys after them."""
    length = len(blocks) * block_size
    ends = torch.tensor([singles[r].start_pos + 1 for r in members], device=device)  # [B] context lengths
    own_len = int(ends.max()) - length
    pos = length + torch.arange(own_len, device=device)[None, :]  # [1, S]
    valid = pos < ends[:, None]  # [B, S]
    slots = _slots_at([tables[singles[r].seq_id] for r in members], torch.where(valid, pos, length),
                      length + own_len, block_size, device)
    mask = None
    if not bool(valid.all()):
        slots = torch.where(valid, slots, NULL_SLOT)  # past a row's context: zeros, never stale data
        mask = valid[:, None, None, :]
    return SharedDecode(torch.tensor(members, dtype=torch.long, device=device),
                        _slots([blocks], length, block_size, device)[0], length, own_len, slots.reshape(-1), mask)


def _decode_group(lo, hi, chunks, tables, block_size, device) -> DecodeGroup:
    lengths = [c.start_pos + 1 for c in chunks]
    kv_len = max(lengths)
    slots = _slots([tables[c.seq_id] for c in chunks], kv_len, block_size, device)  # [B, L]
    mask = None
    if min(lengths) != kv_len:
        valid = torch.arange(kv_len, device=device)[None, :] < torch.tensor(lengths, device=device)[:, None]
        slots = torch.where(valid, slots, NULL_SLOT)  # past a row's context: zeros, never stale data
        mask = valid[:, None, None, :]
    return DecodeGroup(lo, hi, kv_len, slots.reshape(-1), mask)
