"""A safetensors checkpoint's layout without reading its tensors (and without torch): which files
transformers would load, and each file's header (every tensor's dtype, shape and byte range),
checked against the file's size. ``safetensors_reader`` reads the tensors themselves;
``footprint`` sizes a model from these headers.

The format: an 8-byte little-endian header length, a JSON header giving each tensor's dtype, shape
and byte range (``data_offsets``, counted from the end of the header), then the raw data. A sharded
folder has ``model.safetensors.index.json``, whose ``weight_map`` names each tensor's file.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelLoadError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_HEADER_BYTES = 100 << 20
# Bytes per element of each dtype the header may name (safetensors' own names).
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}


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
        itemsize = DTYPE_BYTES.get(entry.dtype)
        fits = 0 <= begin <= end and entry.offset + entry.nbytes <= size
        if not fits or (itemsize is not None and math.prod(entry.shape) * itemsize != entry.nbytes):
            raise ModelLoadError(f"{path}: tensor {name}'s byte range does not match its shape or the file")
        entries[name] = entry
    return entries
