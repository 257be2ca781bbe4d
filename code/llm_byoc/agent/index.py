"""The vector index: chunk embeddings in ``vectors.npy``, everything else in ``manifest.json``.

    INDEX/vectors.npy     float32 [chunks, dim], unit rows (numpy's own format, no pickles)
    INDEX/manifest.json   {"format": 1, "embedding_model", "dimension", "chunking": {...},
                           "chunks": [{"source", "text", "start_token", "page"}, ...]}

A folder of a few thousand chunks is a few megabytes and searched by one
matrix-vector product; a vector database would only add a service to run.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .chunking import Chunk, ChunkingConfig
from .errors import AgentError, IndexFormatError

log = logging.getLogger(__name__)

FORMAT = 1
VECTORS_FILE = "vectors.npy"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float  # cosine similarity to the query
    rank: int  # 1 for the best
    index: int  # the chunk's row in the index


def top_k(vectors: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cosine scores) of the ``k`` rows most similar to ``query``, best first; rows are unit vectors."""
    if k < 1:
        raise AgentError(f"top-k must be at least 1, not {k}")
    norm = float(np.linalg.norm(query))
    if norm == 0:
        raise AgentError("the query embedding is all zeros")
    scores = vectors @ (query / norm)  # [N]
    k = min(k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.lexsort((best, -scores[best]))]  # by score, ties by row: a stable order
    return best, scores[best]


class VectorIndex:
    def __init__(self, chunks: list[Chunk], vectors: np.ndarray, embedding_model: str, chunking: ChunkingConfig):
        if vectors.ndim != 2 or len(chunks) != vectors.shape[0]:
            raise AgentError(f"{len(chunks)} chunks but vectors of shape {vectors.shape}")
        self.chunks = chunks
        self.vectors = vectors.astype(np.float32, copy=False)
        self.embedding_model = embedding_model
        self.chunking = chunking

    @property
    def dimension(self) -> int:
        return int(self.vectors.shape[1])

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        if query.shape != (self.dimension,):
            raise AgentError(f"a query vector of shape {query.shape}; this index holds {self.dimension}-d vectors "
                             f"of {self.embedding_model!r}")
        rows, scores = top_k(self.vectors, query, k)
        return [Hit(self.chunks[r], float(s), rank, int(r)) for rank, (r, s) in enumerate(zip(rows, scores), 1)]

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        manifest = {
            "format": FORMAT,
            "embedding_model": self.embedding_model,
            "dimension": self.dimension,
            "chunking": self.chunking.to_json(),
            "chunks": [{"source": c.source, "text": c.text, "start_token": c.start_token, "page": c.page}
                       for c in self.chunks],
        }
        _replace(folder / VECTORS_FILE, lambda f: np.save(f, self.vectors, allow_pickle=False))
        _replace(folder / MANIFEST_FILE, lambda f: f.write(json.dumps(manifest, ensure_ascii=False, indent=1).encode()))
        log.info("index saved", extra={"path": str(folder), "chunks": len(self.chunks), "dimension": self.dimension})
        return folder

    @classmethod
    def load(cls, folder: Path) -> "VectorIndex":
        manifest_file, vectors_file = folder / MANIFEST_FILE, folder / VECTORS_FILE
        if not manifest_file.is_file() or not vectors_file.is_file():
            raise IndexFormatError(f"{folder}: not an index (needs {MANIFEST_FILE} and {VECTORS_FILE}; "
                                   "build one with `python -m llm_byoc.agent ingest`)")
        try:
            manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
            vectors = np.load(vectors_file, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise IndexFormatError(f"{folder}: unreadable index ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise IndexFormatError(f"{folder}: index format {manifest.get('format') if isinstance(manifest, dict) else '?'}"
                                   f", this version reads {FORMAT}")
        try:
            chunks = [Chunk(c["source"], c["text"], int(c["start_token"]), c.get("page")) for c in manifest["chunks"]]
            chunking = ChunkingConfig(**manifest["chunking"])
            index = cls(chunks, vectors, str(manifest["embedding_model"]), chunking)
        except (KeyError, TypeError, AgentError) as exc:
            raise IndexFormatError(f"{folder}: inconsistent index ({exc})") from None
        if index.dimension != manifest.get("dimension"):
            raise IndexFormatError(f"{folder}: vectors are {index.dimension}-d, the manifest says {manifest.get('dimension')}")
        return index


def _replace(path: Path, write) -> None:
    """Write next to ``path``, then rename: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        write(handle)
    os.replace(tmp, path)
