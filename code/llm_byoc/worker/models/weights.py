"""A checkpoint's tensors as a decoder keeps them, each read once into its final place.

``tensor`` and ``fused`` allocate the destination once, in the model's dtype on its
device, and have the checkpoint's reader fill it (its safetensors files, or the GGUF a
GGUF cache entry names: models/gguf_tensors.py): a fused q/k/v (or gate/up)
projection is one allocation whose row slices q, k and v are read into, so no
second copy of the weights ever exists. The decoders build their layers in order
and hand each projection to ``make_linear`` as soon as it is read. When the linear
backend copies every weight into a layout of its own (oneDNN), ``projection`` reads
each one into the same reused buffer instead, so the unpacked originals never
accumulate, nor leave freed holes the allocator keeps.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...models.gguf_tensors import GGUFTensorReader, is_gguf_entry
from ...models.safetensors_reader import SafetensorsReader, checkpoint_files
from ..linear import Linear, MakeLinear
from ..rotation import Fold
from .config import NeedsTransformers


class CheckpointWeights:
    """Named checkpoint tensors in ``dtype`` on ``device``; ``nbytes``: what has been allocated so far."""

    def __init__(self, reader: SafetensorsReader | GGUFTensorReader, dtype: torch.dtype, device: torch.device,
                 reuse_projection_buffer: bool = False):
        self.reader, self.dtype, self.device = reader, dtype, device
        self.reuse_projection_buffer = reuse_projection_buffer
        self.nbytes = 0
        self._buffer: torch.Tensor | None = None

    @classmethod
    def open(cls, folder: Path, dtype: torch.dtype, device: torch.device,
             reuse_projection_buffer: bool = False) -> "CheckpointWeights":
        """The folder's safetensors files, or for a GGUF cache entry the GGUF its manifest names."""
        if is_gguf_entry(folder):
            return cls(GGUFTensorReader(folder), dtype, device, reuse_projection_buffer)
        files = checkpoint_files(folder)
        if files is None:
            raise NeedsTransformers(f"{folder} has neither model.safetensors nor model.safetensors.index.json")
        return cls(SafetensorsReader(files), dtype, device, reuse_projection_buffer)

    def close(self) -> None:
        self.reader.close()
        self._buffer = None

    def __contains__(self, name: str) -> bool:
        return name in self.reader

    def prefix(self, probe: str, candidates: tuple[str, ...]) -> str:
        """The first of ``candidates`` that ``probe`` is stored under (checkpoints of the bare model omit 'model.')."""
        for candidate in candidates:
            if candidate + probe in self.reader:
                return candidate
        raise NeedsTransformers(f"its checkpoint has no {probe} under {' or '.join(map(repr, candidates))}")

    def tensor(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        return self.fused([(name, shape)])

    def fused(self, parts: list[tuple[str, tuple[int, ...]]]) -> torch.Tensor:
        """The named tensors of the given shapes, stacked along dim 0 in one allocation."""
        shape = self._stacked_shape(parts)
        return self._fill(torch.empty(shape, dtype=self.dtype, device=self.device), parts)

    def projection(self, parts: list[tuple[str, tuple[int, ...]]]) -> torch.Tensor:
        """A projection's weight for ``make_linear``, as ``fused``; with ``reuse_projection_buffer``, a view of
        one buffer that the next call overwrites (so only for a backend that copies the weight it is given)."""
        if not self.reuse_projection_buffer:
            return self.fused(parts)
        shape = self._stacked_shape(parts)
        numel = shape[0] * (shape[1] if len(shape) > 1 else 1)
        if self._buffer is None or self._buffer.numel() < numel:
            self._buffer = None  # the smaller one goes before the larger one is allocated
            self._buffer = torch.empty(numel, dtype=self.dtype, device=self.device)
        return self._fill(self._buffer[:numel].view(shape), parts)

    def linear(self, make_linear: MakeLinear, parts: list[tuple[str, int]], columns: int, bias: bool,
               fold: Fold | None = None) -> Linear:
        """The projection whose rows are the named layers' (``(name, rows)``: '...q_proj', 576) stacked, over
        ``columns`` inputs, with their biases stacked when ``bias``: read, then handed to ``make_linear``
        (through ``fold`` first, if given: worker/rotation.py)."""
        weight = self.projection([(name + ".weight", (rows, columns)) for name, rows in parts])
        biases = self.fused([(name + ".bias", (rows,)) for name, rows in parts]) if bias else None
        return make_linear(*(fold(weight, biases) if fold else (weight, biases)))

    def model_prefix(self) -> str:
        """The prefix the decoder's tensors are stored under: 'model.', or '' (checkpoints of the bare model)."""
        return self.prefix("embed_tokens.weight", ("model.", ""))

    def embedding_and_head(self, vocab: int, hidden: int, tied: bool, make_linear: MakeLinear,
                           fold: Fold | None = None) -> tuple[str, torch.Tensor, Linear]:
        """(the prefix the decoder's tensors are stored under, 'model.' or '', the embedding [vocab, hidden], the
        LM head): the head is the embedding when ``tied`` or when the checkpoint has none (``fold``: as in
        ``linear``)."""
        base = self.model_prefix()
        embed = self.tensor(base + "embed_tokens.weight", (vocab, hidden))
        # The head before the layers: a backend that repacks it holds it twice for a moment, best while little
        # else is loaded; its own allocation (not the reused projection buffer) is freed once it is packed.
        tied = tied or "lm_head.weight" not in self
        head = embed if tied else self.tensor("lm_head.weight", (vocab, hidden))
        return base, embed, make_linear(*(fold(head, None) if fold else (head, None)))

    def _stacked_shape(self, parts: list[tuple[str, tuple[int, ...]]]) -> tuple[int, ...]:
        trailing = parts[0][1][1:]
        if any(shape[1:] != trailing for _, shape in parts):
            raise ValueError(f"cannot stack {parts}: their trailing dimensions differ")
        for name, _ in parts:
            if name not in self.reader:
                raise NeedsTransformers(f"its checkpoint has no {name}")
        return (sum(shape[0] for _, shape in parts), *trailing)

    def _fill(self, out: torch.Tensor, parts: list[tuple[str, tuple[int, ...]]]) -> torch.Tensor:
        row = 0
        for name, shape in parts:
            self.reader.read_into(name, out[row : row + shape[0]])
            row += shape[0]
        self.nbytes += out.numel() * out.element_size()
        return out
