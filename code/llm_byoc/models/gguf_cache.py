"""GGUF files made loadable once, cached on disk.

A Llama-family GGUF (``gguf_tensors.DIRECT_ARCHITECTURES``) becomes an entry of
config.json, the tokenizer and a manifest of its tensors: the decoder reads the
weights from the GGUF itself at every load (``gguf_tensors.GGUFTensorReader``), so
nothing the size of the model is written. Any other GGUF, and any entry that must
load through transformers (``transformers_folder``), is dequantized once into a
safetensors folder (``default_model.convert_gguf_to_folder``, tens of seconds).

Entries live under ``cache_dir()/gguf/<name>-<key>``. The key is built from the
file's resolved path, size and modification time: replacing the file makes a
new entry. A file lock keeps two processes from writing the same entry at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelLoadError
from .default_model import cache_dir, convert_gguf_to_folder
from .gguf_tensors import build_manifest, is_gguf_entry, read_manifest, write_manifest

log = logging.getLogger(__name__)

_FULL_SUFFIX = "-safetensors"


def gguf_cache_key(gguf_path: Path) -> str:
    stat = gguf_path.stat()
    ident = f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _is_complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and (is_gguf_entry(folder) or any(folder.glob("*.safetensors")))


def converted_gguf_folder(gguf_path: Path, root: Path | None = None) -> Path:
    """The folder the engine loads ``gguf_path`` from, made on first use: an entry reading the GGUF's
    tensors in place (Llama family), else a safetensors conversion."""
    if not gguf_path.is_file():
        raise ModelLoadError(f"GGUF file {gguf_path} does not exist")
    root = Path(root) if root else cache_dir() / "gguf"
    return _cached(gguf_path, root / f"{gguf_path.stem}-{gguf_cache_key(gguf_path)}", write_gguf_entry)


def transformers_folder(folder: Path) -> Path:
    """``folder``, or for an entry that reads its GGUF in place, the GGUF converted to safetensors beside it
    (what transformers loads: the generic path, a model the native decoder does not take)."""
    folder = Path(folder)
    if not is_gguf_entry(folder):
        return folder
    gguf_path = Path(read_manifest(folder)["gguf"])
    if not gguf_path.is_file():
        raise ModelLoadError(f"GGUF file {gguf_path} (of {folder}) does not exist")
    log.info("%s loads through transformers, which needs its weights as safetensors", gguf_path)
    return _cached(gguf_path, folder.with_name(folder.name + _FULL_SUFFIX), convert_gguf_to_folder)


def _cached(gguf_path: Path, dest: Path, make: Callable[[Path, Path], Path]) -> Path:
    if _is_complete(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be writing it
        if _is_complete(dest):
            return dest
        try:
            return make(gguf_path, dest)
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(
                f"cannot convert GGUF file {gguf_path}: {type(exc).__name__}: {exc}"
            ) from exc


def write_gguf_entry(gguf_path: Path, dest: Path) -> Path:
    """config.json, generation_config.json, the tokenizer and the tensor manifest of a Llama-family GGUF
    (transformers reads the first three from the GGUF's metadata); any other GGUF is converted whole."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    started = time.monotonic()
    manifest = build_manifest(gguf_path)
    if manifest is None:
        return convert_gguf_to_folder(gguf_path, dest)
    log.info("reading %s's config and tokenizer (one time); its tensors stay in the GGUF", gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    # What a conversion through the model writes: its class, and the float32 its tensors are dequantized to.
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
    config.dtype = "float32"
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    config.save_pretrained(tmp)
    GenerationConfig.from_model_config(config).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_manifest(manifest, tmp)
    tmp.rename(dest)  # atomic: a half-written entry is never mistaken for a model
    log.info("GGUF entry written in %.1f s into %s (%d tensors read from %s at each load)",
             time.monotonic() - started, dest, len(manifest["tensors"]), gguf_path.name)
    return dest
