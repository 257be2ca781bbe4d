"""Text embeddings through an endpoint: the multi-model container's text-embedding models.

    POST /invocations  (X-Amzn-SageMaker-Target-Model: all-minilm-l6-v2)
         {"inputs": [...]}  ->  {"embeddings": [[...], ...]}

Texts go in batches (the container takes at most 64 per request), with a
progress bar; vectors come back L2-normalised, so a dot product is the cosine.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from ..client import EndpointClient
from .errors import AgentError

DEFAULT_EMBEDDING_MODEL = "all-minilm-l6-v2"  # its name in the demo model repository
DEFAULT_BATCH_SIZE = 32
MAX_BATCH_SIZE = 64  # the container's limit of texts per request


class EndpointEmbedder:
    """``target_model``: the embedding model's name in a multi-model endpoint (None: the endpoint is that model)."""

    def __init__(self, client: EndpointClient, target_model: str | None = DEFAULT_EMBEDDING_MODEL,
                 batch_size: int = DEFAULT_BATCH_SIZE):
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            raise AgentError(f"the embedding batch size must be from 1 to {MAX_BATCH_SIZE}, not {batch_size}")
        self.client = client
        self.target_model = target_model
        self.batch_size = batch_size

    @property
    def model_name(self) -> str:
        return self.target_model or "endpoint"

    def embed(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """[len(texts), dim] float32, each row of unit length."""
        if not texts:
            raise AgentError("nothing to embed")
        rows: list[np.ndarray] = []
        with tqdm(total=len(texts), desc="embedding", unit="chunk", disable=not progress) as bar:
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start : start + self.batch_size])
                rows.append(self._embed_batch(batch))
                bar.update(len(batch))
        return unit_rows(np.concatenate(rows))

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        answer = self.client.invoke({"inputs": texts}, target_model=self.target_model)
        vectors = answer.get("embeddings") if isinstance(answer, dict) else None
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            raise AgentError(
                f"the embedding model {self.model_name!r} answered {str(answer)[:200]!r}, "
                f'not {{"embeddings": [...]}} with {len(texts)} vectors: is it a text-embedding model?'
            )
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or not np.isfinite(matrix).all():
            raise AgentError(f"the embedding model {self.model_name!r} answered vectors of uneven length or NaN")
        return matrix


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)  # [N, 1]
    if (norms == 0).any():
        raise AgentError("an embedding is all zeros: it has no direction to compare")
    return (matrix / norms).astype(np.float32)
