"""Embeddings in batches through the endpoint, the index on disk and back, cosine top-k."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_endpoint import EMBEDDING_MODEL, FakeEndpoint
from llm_byoc.agent.chunking import Chunk, ChunkingConfig, count_tokens
from llm_byoc.agent.documents import Document
from llm_byoc.agent.embeddings import EndpointEmbedder
from llm_byoc.agent.errors import AgentError, IndexFormatError
from llm_byoc.agent.index import MANIFEST_FILE, VECTORS_FILE, VectorIndex, top_k
from llm_byoc.agent.ingest import build_index, ingest

FACTS = [
    "The KV cache holds keys and values in blocks of sixteen tokens.",
    "Gunicorn runs the HTTP front end with Flask workers.",
    "A multi-model endpoint evicts the least recently used model first.",
    "SageMaker stops the container with SIGTERM and waits for it.",
    "Adapters are LoRA fine-tunes that share one base model.",
]


def make_index(batch_size: int = 2) -> tuple[VectorIndex, FakeEndpoint]:
    endpoint = FakeEndpoint()
    embedder = EndpointEmbedder(endpoint.client(), EMBEDDING_MODEL, batch_size=batch_size)
    documents = [Document(f"doc{i}.txt", text) for i, text in enumerate(FACTS)]
    return build_index(documents, embedder, ChunkingConfig(tokens=64, overlap=8)), endpoint


def test_embeddings_go_in_batches_to_the_embedding_model():
    index, endpoint = make_index(batch_size=2)
    assert [len(call.body["inputs"]) for call in endpoint.calls] == [2, 2, 1]
    assert {call.route.target_model for call in endpoint.calls} == {EMBEDDING_MODEL}
    assert index.vectors.shape == (5, 256) and index.vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(index.vectors, axis=1), 1.0)


def test_search_finds_the_chunk_that_shares_the_words():
    index, endpoint = make_index()
    embedder = EndpointEmbedder(endpoint.client(), EMBEDDING_MODEL)
    hits = index.search(embedder.embed_one("which model is evicted first from a multi-model endpoint"), k=3)
    assert [hit.rank for hit in hits] == [1, 2, 3]
    assert hits[0].chunk.source == "doc2.txt" and hits[0].index == 2
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_top_k_orders_by_score_and_breaks_ties_by_row():
    vectors = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], dtype=np.float32)
    rows, scores = top_k(vectors, np.array([2.0, 0.0]), k=3)
    assert rows.tolist() == [0, 2, 3] and np.allclose(scores, [1, 1, 0.6])
    assert top_k(vectors, np.array([0.0, 1.0]), k=10)[0].tolist() == [1, 3, 0, 2]
    with pytest.raises(AgentError):
        top_k(vectors, np.zeros(2), k=1)


def test_save_then_load_gives_the_same_index(tmp_path):
    index, _ = make_index()
    index.save(tmp_path / "kb")
    loaded = VectorIndex.load(tmp_path / "kb")
    assert loaded.chunks == index.chunks and loaded.chunking == index.chunking
    assert loaded.embedding_model == EMBEDDING_MODEL and np.array_equal(loaded.vectors, index.vectors)
    assert sorted(p.name for p in (tmp_path / "kb").iterdir()) == [MANIFEST_FILE, VECTORS_FILE]  # no temp files


def test_ingest_writes_an_index_from_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(" ".join(FACTS))
    embedder = EndpointEmbedder(FakeEndpoint().client(), EMBEDDING_MODEL)
    ingest([tmp_path / "docs"], tmp_path / "kb", embedder, ChunkingConfig(tokens=16, overlap=4), progress=False)
    loaded = VectorIndex.load(tmp_path / "kb")
    n = count_tokens(" ".join(FACTS))  # 59: windows at 0, 12, 24, 36 and 48 (which reaches the end)
    assert [c.start_token for c in loaded.chunks] == list(range(0, n - 16 + 12, 12)) and n == 59
    assert {c.source for c in loaded.chunks} == {"a.md"}


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda d: (d / VECTORS_FILE).unlink(), "not an index"),
        (lambda d: (d / MANIFEST_FILE).write_text("{"), "unreadable"),
        (lambda d: _edit(d, format=99), "format 99"),
        (lambda d: _edit(d, dimension=3), "the manifest says 3"),
        (lambda d: _edit(d, chunks=[]), "inconsistent"),
        (lambda d: _edit(d, chunking={"tokens": 2, "overlap": 0}), "inconsistent"),
        (lambda d: np.save(d / VECTORS_FILE, np.array([{"a": 1}], dtype=object)), "unreadable"),  # no pickles
    ],
)
def test_a_damaged_index_is_a_clear_error(tmp_path, spoil, message):
    index, _ = make_index()
    index.save(tmp_path)
    spoil(tmp_path)
    with pytest.raises(IndexFormatError, match=message):
        VectorIndex.load(tmp_path)


def _edit(folder, **changes):
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    manifest.update(changes)
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))


def test_an_endpoint_that_is_not_an_embedding_model_is_named():
    endpoint = FakeEndpoint()
    endpoint.invoke = lambda body, route: b'[{"generated_text": "hi"}]'
    with pytest.raises(AgentError, match="is it a text-embedding model"):
        EndpointEmbedder(endpoint.client(), EMBEDDING_MODEL).embed(["x"])


def test_a_query_of_another_dimension_is_refused():
    index, _ = make_index()
    with pytest.raises(AgentError, match="256-d vectors"):
        index.search(np.ones(384, dtype=np.float32), k=1)


def test_the_batch_size_is_bounded():
    with pytest.raises(AgentError, match="from 1 to 64"):
        EndpointEmbedder(FakeEndpoint().client(), batch_size=65)
    assert Chunk("a", "b", 0).label == "a#t0"
