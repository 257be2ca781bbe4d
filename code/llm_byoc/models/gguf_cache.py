"""GGUF files converted once into safetensors folders, cached on disk.

Dequantizing a GGUF through transformers takes tens of seconds, so the result
is kept under ``cache_dir()/gguf/<name>-<key>``. The key is built from the
file's resolved path, size and modification time: replacing the file makes a
new entry. A file lock keeps two processes from converting the same file at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
from pathlib import Path

from ..errors import ModelLoadError
from .default_model import cache_dir, convert_gguf_to_folder

log = logging.getLogger(__name__)


def gguf_cache_key(gguf_path: Path) -> str:
    stat = gguf_path.stat()
    ident = f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def converted_gguf_folder(gguf_path: Path, root: Path | None = None) -> Path:
    """The safetensors folder for ``gguf_path``, converting it on first use."""
    if not gguf_path.is_file():
        raise ModelLoadError(f"GGUF file {gguf_path} does not exist")
    root = Path(root) if root else cache_dir() / "gguf"
    dest = root / f"{gguf_path.stem}-{gguf_cache_key(gguf_path)}"
    if _is_complete(dest):
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be converting it
        if _is_complete(dest):
            return dest
        try:
            return convert_gguf_to_folder(gguf_path, dest)
        except Exception as exc:
            raise ModelLoadError(
                f"cannot convert GGUF file {gguf_path}: {type(exc).__name__}: {exc}"
            ) from exc
