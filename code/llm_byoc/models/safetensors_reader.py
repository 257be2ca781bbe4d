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

import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ModelLoadError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
STAGING_BYTES = 8 << 20  # the most a dtype conversion or a device copy holds at once
_MAX_HEADER_BYTES = 100 << 20
_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class TensorEntry:
    path: Path
    dtype: str  # as the header spells it: "BF16", "F32", ...
    shape: tuple[int, ...]
    offset: int  # of the first byte, from the start of the file
    nbytes: int


def checkpoint_files(folder: Path) -> list[Path] | None:
    """The files transformers would load: the index's shards, else model.safetensors; None if neither."""
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"{index} is unreadable: {exc}") from None
        return [folder / name for name in sorted(set(weight_map.values()))]
    single = folder / SINGLE_FILE
    return [single] if single.is_file() else None


def read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors of one file, checked against its size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8).ljust(8, b"\0"))
            if not 2 <= length <= min(_MAX_HEADER_BYTES, size - 8):
                raise ValueError(f"header length {length} does not fit a {size}-byte file")
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path} is not a readable safetensors file: {exc}") from None
    entries = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = meta["data_offsets"]
            entry = TensorEntry(path, meta["dtype"], tuple(int(d) for d in meta["shape"]), 8 + length + begin,
                                end - begin)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelLoadError(f"{path}: tensor {name} has a malformed header entry ({exc})") from None
        itemsize = _DTYPES[entry.dtype].itemsize if entry.dtype in _DTYPES else None
        fits = 0 <= begin <= end and entry.offset + entry.nbytes <= size
        if not fits or (itemsize is not None and math.prod(entry.shape) * itemsize != entry.nbytes):
            raise ModelLoadError(f"{path}: tensor {name}'s byte range does not match its shape or the file")
        entries[name] = entry
    return entries


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
            _pread_exact(fd, flat.view(torch.uint8).numpy(), entry.offset, entry.path)  # straight into its final place
            return
        staging = self._staging_for(out.device)
        per_piece = STAGING_BYTES // source_dtype.itemsize
        for first in range(0, flat.numel(), per_piece):
            count = min(per_piece, flat.numel() - first)
            piece = staging[: count * source_dtype.itemsize]
            _pread_exact(fd, piece.numpy(), entry.offset + first * source_dtype.itemsize, entry.path)
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


def _pread_exact(fd: int, buffer, offset: int, path: Path) -> None:
    """Read ``len(buffer)`` bytes at ``offset`` into ``buffer`` (a writable uint8 array)."""
    view = memoryview(buffer).cast("B")
    while view.nbytes:
        got = os.preadv(fd, [view], offset)
        if got <= 0:
            raise ModelLoadError(f"{path} ends early, at byte {offset}")
        view, offset = view[got:], offset + got
