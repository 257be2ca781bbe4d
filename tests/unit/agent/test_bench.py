"""The agent benchmark's pieces over the fake endpoint; and the shipped questions' labels stay true."""

from __future__ import annotations

from pathlib import Path

from fake_endpoint import EMBEDDING_MODEL, LLM_MODEL, FakeEndpoint
from llm_byoc.agent.bench import answer_rank, bench_latency, bench_retrieval, load_questions
from llm_byoc.agent.chunking import ChunkingConfig
from llm_byoc.agent.documents import load_documents
from llm_byoc.agent.embeddings import EndpointEmbedder
from llm_byoc.agent.ingest import build_index
from llm_byoc.agent.knowledge import CacheAugmentedKnowledge, RetrievalKnowledge
from llm_byoc.agent.llm import ChatModel

LOCAL_TEST = Path(__file__).resolve().parents[3] / "local_test"


def test_every_shipped_question_has_its_passage_in_one_chunk_at_every_size():
    documents = load_documents([LOCAL_TEST / "agent_docs"])
    questions = load_questions(LOCAL_TEST / "agent_questions.json")
    assert len(questions) >= 30
    rows = bench_retrieval(documents, questions, EndpointEmbedder(FakeEndpoint().client(), EMBEDDING_MODEL))
    assert [r["chunk_tokens"] for r in rows] == [64, 128, 256]
    for row in rows:
        assert row["passage_split_across_chunks"] == []
        assert 0 <= row["recall_at_1"] <= row["recall_at_5"] <= 1


def test_answer_rank_needs_the_source_and_the_passage():
    question = {"source": "a.md", "passage": "sixteen  tokens"}
    assert answer_rank(question, [("b.md", "sixteen tokens"), ("a.md", "x"), ("a.md", "hold sixteen\ntokens")]) == 3
    assert answer_rank(question, [("b.md", "sixteen tokens")]) is None


def test_latency_streams_every_question_in_both_modes():
    endpoint = FakeEndpoint()
    embedder = EndpointEmbedder(endpoint.client(), EMBEDDING_MODEL)
    documents = load_documents([LOCAL_TEST / "agent_docs"])
    rag = RetrievalKnowledge(build_index(documents, embedder, ChunkingConfig()), embedder)
    cag = CacheAugmentedKnowledge(documents)
    questions = load_questions(LOCAL_TEST / "agent_questions.json")[:3]
    endpoint.calls.clear()
    result = bench_latency(ChatModel(endpoint.client(), LLM_MODEL), rag, cag, questions, 8, "auto")
    assert result["session"] and result["cag_first_call"]["ttft_s"]["count"] == 1
    assert result["cag_later_calls"]["ttft_s"]["count"] == 2 and result["rag"]["e2e_s"]["count"] == 3
    chats = endpoint.chats()
    assert [c.body.get("stream") for c in chats] == [True] * 6
    assert {c.body["messages"][0]["content"] for c in chats[:3]} == {cag.prefix}
    assert [c.kind for c in endpoint.calls].count("embed") == 3
