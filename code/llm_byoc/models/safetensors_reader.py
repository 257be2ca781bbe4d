"""Read a safetensors checkpoint's tensors straight into tensors the caller allocated.

The format: an 8-byte little-endian header length, a JSON header giving each
tensor's dtype, shape and byte range (``data_offsets``, counted from the end of
the header), then the raw little-endian data. A sharded folder has
``model.safetensors.index.json``, whose ``weight_map`` names each tensor's file.

Nothing is memory-mapped: a tensor's bytes are read with ``os.preadv`` into the
destination's own memory when it is a CPU tensor of the file's dtype, else through
one bounded CPU staging buffer (pinned for CUDA), a piece at a time, each piece
converted and copied over by ``copy_`` (the same rounding as ``Tensor.to``). The
process then holds only the tensors; the file's pages stay in the kernel's page
cache, not in this process's RSS.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from ..errors import ModelLoadError
from .safetensors_header import INDEX_FILE, SINGLE_FILE, TensorEntry, checkpoint_files, read_header

__all__ = ["INDEX_FILE", "SINGLE_FILE", "SafetensorsReader", "TensorEntry", "checkpoint_files", "pread_exact",
           "read_header"]

STAGING_BYTES = 8 << 20  # the most a dtype conversion or a device copy holds at once
_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


class SafetensorsReader:
    """The tensors of one or more safetensors files, by name; ``read_into`` fills a given tensor."""

    def __init__(self, files: list[Path]):
        if sys.byteorder != "little":
            raise ModelLoadError("safetensors data is little-endian; this machine is not")
        self.entries: dict[str, TensorEntry] = {}
        for path in files:
            self.entries.update(read_header(path))
        self._fds: dict[Path, int] = {}
        self._staging: torch.Tensor | None = None

    def __enter__(self) -> "SafetensorsReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._staging = None

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def read_into(self, name: str, out: torch.Tensor) -> None:
        """Fill ``out`` (contiguous, of the tensor's shape, any dtype and device) with tensor ``name``."""
        entry = self.entries[name]
        if tuple(out.shape) != entry.shape:
            raise ModelLoadError(f"{entry.path.name}: {name} has shape {list(entry.shape)}, "
                                 f"the model's config.json implies {list(out.shape)}")
        source_dtype = _DTYPES.get(entry.dtype)
        if source_dtype is None:
            raise ModelLoadError(f"{entry.path.name}: {name} is {entry.dtype}, which this loader does not read")
        if not out.is_contiguous():
            raise ValueError("read_into needs a contiguous destination")
        if entry.nbytes == 0:
            return
        fd = self._fd(entry.path)
        flat = out.view(-1)
        if out.device.type == "cpu" and out.dtype == source_dtype:
            pread_exact(fd, flat.view(torch.uint8).numpy(), entry.offset, entry.path)  # straight into its final place
            return
        staging = self._staging_for(out.device)
        per_piece = STAGING_BYTES // source_dtype.itemsize
        for first in range(0, flat.numel(), per_piece):
            count = min(per_piece, flat.numel() - first)
            piece = staging[: count * source_dtype.itemsize]
            pread_exact(fd, piece.numpy(), entry.offset + first * source_dtype.itemsize, entry.path)
            flat[first : first + count].copy_(piece.view(source_dtype))  # synchronous: the buffer is free again

    def _fd(self, path: Path) -> int:
        if path not in self._fds:
            try:
                self._fds[path] = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise ModelLoadError(f"cannot open {path}: {exc}") from None
        return self._fds[path]

    def _staging_for(self, device: torch.device) -> torch.Tensor:
        if self._staging is None:
            self._staging = torch.empty(STAGING_BYTES, dtype=torch.uint8, pin_memory=device.type == "cuda")
        return self._staging


def pread_exact(fd: int, buffer, offset: int, path: Path) -> None:
    """Read ``len(buffer)`` bytes at ``offset`` into ``buffer`` (a writable uint8 array)."""
    view = memoryview(buffer).cast("B")
    while view.nbytes:
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            raise ModelLoadError(f"{path} ends early, at byte {offset}")
        view, offset = view[got:], offset + got
