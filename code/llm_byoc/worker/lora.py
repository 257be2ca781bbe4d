"""LoRA in the worker: adapters' weights, the batch's slots, and the low-rank products of a step.

The base projections stay fused and untouched (the fast path costs nothing
when no row uses an adapter). An adapter row adds ``(x @ A) @ B`` on top of a
projection's output, at four points per layer, the same inputs the fused base
matmuls take:

    qkv      q_proj | k_proj | v_proj     input: the normed hidden state
    o        o_proj                       input: the attention output
    gate_up  gate_proj | up_proj          input: the normed hidden state
    down     down_proj                    input: act(gate) * up

At a point with several modules, A holds their A matrices side by side and B
is block-diagonal, so one pair of matmuls covers the fused output. Scaling
(alpha / r) is folded into B at load.

``AdapterStore`` keeps adapters loaded in memory (the engine says which, up to
``LLM_BYOC_MAX_CPU_LORAS``); ``LoRASlots`` holds the ``LLM_BYOC_MAX_LORAS``
adapters one step may use, stacked: ``A[point]: [S, in, m*R]``,
``B[point]: [S, m*R, out]`` per layer, with R the largest rank loaded so far.
Rows are grouped by slot into one batched matmul pair per point
(``torch.bmm`` over the slots, gathered there and back); a long prompt chunk
(many rows, one adapter) gets its own matmul pair.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..adapters.messages import AdapterSpec
from ..adapters.peft_folder import FUSED_MODULES, TENSOR_KEY, WEIGHTS_FILE, BaseShapes, check_tensors

POINTS: dict[str, tuple[str, ...]] = {
    "qkv": ("q_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "gate_up": ("gate_proj", "up_proj"),
    "down": ("down_proj",),
}


@dataclass
class AdapterWeights:
    """One adapter's matrices, per layer and module: A [in, r] and B [r, out] (scaled)."""

    spec: AdapterSpec
    a: list[dict[str, torch.Tensor]]
    b: list[dict[str, torch.Tensor]]
    load_seconds: float = 0.0

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.a + self.b for t in layer.values())


# (layer, point, A [in, r], B [r, out]) -> the pair for the decoder's weights as loaded (a rotated int8 decoder's
# inputs and outputs differ from the checkpoint's: LlamaDecoder.adapter_weights)
AdapterTransform = Callable[[int, str, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
_POINT_OF = {module: point for point, modules in POINTS.items() for module in modules}


def load_adapter(spec: AdapterSpec, base: BaseShapes, dtype: torch.dtype,
                 transform: AdapterTransform | None = None) -> AdapterWeights:
    """Read and check an adapter's weights (safetensors only) into ``dtype``; ``transform``: as the decoder needs
    them."""
    from safetensors.torch import load_file

    started = time.perf_counter()
    tensors = load_file(str(Path(spec.path) / WEIGHTS_FILE), device="cpu")
    check_tensors({k: list(t.shape) for k, t in tensors.items()}, spec.rank, base)
    a: list[dict[str, torch.Tensor]] = [{} for _ in range(base.num_layers)]
    b: list[dict[str, torch.Tensor]] = [{} for _ in range(base.num_layers)]
    for key, tensor in tensors.items():
        match = TENSOR_KEY.match(key)
        layer, module, side = int(match.group(1)), match.group(2), match.group(3)
        parts = FUSED_MODULES.get(module, (module,))
        if side == "A":
            for part in parts:  # a fused projection's A serves each of its parts
                a[layer][part] = tensor.to(dtype).t().contiguous()  # [in, r]
        else:
            rows = tensor.split([base.modules[part][1] for part in parts])  # its B, by each part's outputs
            for part, b_rows in zip(parts, rows):
                b[layer][part] = (b_rows.float() * spec.scaling).to(dtype).t().contiguous()  # [r, out]
    for layer in range(base.num_layers):
        if set(a[layer]) != set(b[layer]):
            raise ValueError(f"adapter {spec.name!r}: layer {layer} has A and B for different modules")
        if transform is not None:
            for module in a[layer]:
                a[layer][module], b[layer][module] = transform(layer, _POINT_OF[module], a[layer][module],
                                                               b[layer][module])
    return AdapterWeights(spec, a, b, time.perf_counter() - started)


class AdapterStore:
    """Adapters loaded in the worker's memory, by uid (the engine decides what stays)."""

    def __init__(self, base: BaseShapes, dtype: torch.dtype, transform: AdapterTransform | None = None):
        self.base, self.dtype, self.transform = base, dtype, transform
        self._loaded: dict[str, AdapterWeights] = {}

    def __contains__(self, uid: str) -> bool:
        return uid in self._loaded

    def get(self, uid: str) -> AdapterWeights:
        return self._loaded[uid]

    def load(self, spec: AdapterSpec) -> AdapterWeights:
        if spec.uid not in self._loaded:
            self._loaded[spec.uid] = load_adapter(spec, self.base, self.dtype, self.transform)
        return self._loaded[spec.uid]

    def drop(self, uid: str) -> None:
        self._loaded.pop(uid, None)


class LoRASlots:
    """The adapters one step may use, stacked per layer and point (allocated on first use)."""

    def __init__(self, base: BaseShapes, num_slots: int, dtype: torch.dtype, device: torch.device):
        self.base, self.num_slots, self.dtype, self.device = base, num_slots, dtype, device
        self.rank = 0
        self.uids: list[str | None] = [None] * num_slots
        self.a: list[dict[str, torch.Tensor]] = []
        self.b: list[dict[str, torch.Tensor]] = []

    def slot_of(self, uid: str) -> int | None:
        return self.uids.index(uid) if uid in self.uids else None

    def clear(self, uid: str) -> None:
        for slot, held in enumerate(self.uids):
            if held == uid:
                self.uids[slot] = None

    def activate(self, slot: int, weights: AdapterWeights) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"LoRA slot {slot} out of range [0, {self.num_slots})")
        if weights.spec.rank > self.rank:
            self._grow(weights.spec.rank)
        r, rank = weights.spec.rank, self.rank
        for layer in range(self.base.num_layers):
            for point, modules in POINTS.items():
                a, b = self.a[layer][point][slot], self.b[layer][point][slot]  # [in, m*R], [m*R, out]
                a.zero_()
                b.zero_()
                column = 0
                for j, module in enumerate(modules):
                    width = self.base.modules[module][1]
                    if module in weights.a[layer]:
                        a[:, j * rank : j * rank + r] = weights.a[layer][module]
                        b[j * rank : j * rank + r, column : column + width] = weights.b[layer][module]
                    column += width
        self.uids[slot] = weights.spec.uid

    def _grow(self, rank: int) -> None:
        """Room for rank ``rank`` in every slot, keeping what the slots hold."""
        old_rank, old_a, old_b = self.rank, self.a, self.b
        self.a, self.b = [], []
        for layer in range(self.base.num_layers):
            a_layer, b_layer = {}, {}
            for point, modules in POINTS.items():
                features_in = self.base.modules[modules[0]][0]
                features_out = sum(self.base.modules[m][1] for m in modules)
                a = torch.zeros(self.num_slots, features_in, len(modules) * rank, dtype=self.dtype, device=self.device)
                b = torch.zeros(self.num_slots, len(modules) * rank, features_out, dtype=self.dtype, device=self.device)
                for j in range(len(modules)):
                    if old_rank:
                        a[:, :, j * rank : j * rank + old_rank] = old_a[layer][point][:, :, j * old_rank : (j + 1) * old_rank]
                        b[:, j * rank : j * rank + old_rank] = old_b[layer][point][:, j * old_rank : (j + 1) * old_rank]
                a_layer[point], b_layer[point] = a, b
            self.a.append(a_layer)
            self.b.append(b_layer)
        self.rank = rank

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.a + self.b for t in layer.values())


# A prompt chunk with more rows than this gets its own matmul pair instead of a place in the
# slot layout (every slot of the layout is padded to the fullest one).
LONG_SPAN = 64


@dataclass(frozen=True)
class LoRABatch:
    """Which rows of a step use which slot, built once per step.

    Rows that use an adapter are laid out by slot, ``[S', m]``: a gather takes
    them there (``rows``; padding takes row 0, masked to zero) and another
    brings the products back in row order (``back``, one entry per row of the
    step; a row of the base model, or of a long span, takes a padding place,
    whose product is zero). Both are plain gathers: scatter-adds are slow on
    CPU. A long prompt chunk (``spans``) gets its own matmul pair.
    """

    rows: torch.Tensor | None  # [S' * m] the row at each place of the layout
    mask: torch.Tensor | None  # [S', m, 1]: 1 for real rows, 0 for padding
    back: torch.Tensor | None  # [T] each row's place in the layout
    num_slots: int  # S': slots 0..S'-1 are read
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # long prompt chunks: (row, row end, slot)
    # Rows 0..S'*m-1 already are the layout (each slot's m rows in a run, in slot order): no gathers.
    in_place: bool = False
    width: int = 0  # m


def build_lora_batch(row_slots: list[int], chunks: list[tuple[int, int, int]], dtype, device) -> LoRABatch | None:
    """``row_slots[r]``: the slot of row r (-1: the base model); ``chunks``: the step's prompt chunks
    as (row, row end, slot). None when no row uses an adapter."""
    spans = [c for c in chunks if c[2] >= 0 and c[1] - c[0] > LONG_SPAN]
    in_spans = {r for lo, hi, _ in spans for r in range(lo, hi)}
    by_slot: dict[int, list[int]] = {}
    for row, slot in enumerate(row_slots):
        if slot >= 0 and row not in in_spans:
            by_slot.setdefault(slot, []).append(row)
    if not by_slot and not spans:
        return None
    if not by_slot:
        return LoRABatch(None, None, None, 0, spans)
    num_slots = max(by_slot) + 1
    width = max(len(rows) for rows in by_slot.values())
    laid_out = sum(len(rows) for rows in by_slot.values())
    if all(by_slot.get(s) == list(range(s * width, (s + 1) * width)) for s in range(num_slots)):
        return LoRABatch(None, None, None, num_slots, spans, in_place=True, width=width)
    if laid_out < len(row_slots) and all(len(by_slot.get(s, ())) == width for s in range(num_slots)):
        width += 1  # the other rows need a padding place to read zeros from
    rows = torch.zeros(num_slots, width, dtype=torch.long)
    mask = torch.zeros(num_slots, width, 1, dtype=dtype)
    back = torch.empty(len(row_slots), dtype=torch.long)
    padding = None
    for slot in range(num_slots):
        slot_rows = by_slot.get(slot, [])
        rows[slot, : len(slot_rows)] = torch.tensor(slot_rows, dtype=torch.long)
        mask[slot, : len(slot_rows)] = 1
        back[slot_rows] = slot * width + torch.arange(len(slot_rows))
        if padding is None and len(slot_rows) < width:
            padding = slot * width + len(slot_rows)
    others = [row for row in range(len(row_slots)) if row_slots[row] < 0 or row in in_spans]
    if others:
        back[others] = padding
    return LoRABatch(rows.view(-1).to(device), mask.to(device), back.to(device), num_slots, spans)


@dataclass(frozen=True)
class LoRAStep:
    """What a decoder needs for one step's adapter rows."""

    slots: LoRASlots
    batch: LoRABatch

    def add(self, y: torch.Tensor, x: torch.Tensor, layer: int, point: str) -> None:
        add_lora(y, x, self.slots, layer, point, self.batch)


def add_lora(y: torch.Tensor, x: torch.Tensor, slots: LoRASlots, layer: int, point: str, batch: LoRABatch) -> None:
    """y [T, out] += the low-rank products of the rows that use an adapter (x [T, in])."""
    a, b = slots.a[layer][point], slots.b[layer][point]  # [S, in, m*R], [S, m*R, out]
    n = batch.num_slots
    if batch.in_place:  # rows 0..n*m-1 are the layout already
        rows = n * batch.width
        xs = x[:rows].view(n, batch.width, x.shape[1])  # [S', m, in]
        y[:rows] += torch.bmm(torch.bmm(xs, a[:n]), b[:n]).view(rows, y.shape[1])
    elif batch.rows is not None:
        xs = x.index_select(0, batch.rows).view(n, -1, x.shape[1]) * batch.mask  # [S', m, in]
        delta = torch.bmm(torch.bmm(xs, a[:n]), b[:n])  # [S', m, out]
        y += delta.view(-1, y.shape[1]).index_select(0, batch.back)  # [T, out]
    for lo, hi, slot in batch.spans:
        y[lo:hi] += (x[lo:hi] @ a[slot]) @ b[slot]
