"""Documents -> chunks -> embeddings (in batches, through the endpoint) -> a saved index."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .chunking import ChunkingConfig, chunk_documents
from .documents import Document, load_documents
from .embeddings import EndpointEmbedder
from .index import VectorIndex

log = logging.getLogger(__name__)


def build_index(documents: list[Document], embedder: EndpointEmbedder, chunking: ChunkingConfig,
                progress: bool = False) -> VectorIndex:
    started = time.perf_counter()
    chunks = chunk_documents(documents, chunking)
    vectors = embedder.embed([chunk.text for chunk in chunks], progress=progress)
    log.info("ingested", extra={"documents": len(documents), "chunks": len(chunks), "chunk_tokens": chunking.tokens,
                                "overlap_tokens": chunking.overlap, "embedding_model": embedder.model_name,
                                "seconds": round(time.perf_counter() - started, 3)})
    return VectorIndex(chunks, vectors, embedder.model_name, chunking)


def ingest(paths: list[Path], index_dir: Path, embedder: EndpointEmbedder, chunking: ChunkingConfig,
           progress: bool = True) -> VectorIndex:
    index = build_index(load_documents(paths), embedder, chunking, progress)
    index.save(index_dir)
    return index
