"""The agent over a fake endpoint: plan then act, RAG and CAG, sessions, the calls it makes."""

from __future__ import annotations

import json

import pytest
from fake_endpoint import EMBEDDING_MODEL, LLM_MODEL, FakeEndpoint
from llm_byoc.agent.agent import AgentSettings, KnowledgeAgent, cag_session
from llm_byoc.agent.chunking import ChunkingConfig
from llm_byoc.agent.documents import Document
from llm_byoc.agent.embeddings import EndpointEmbedder
from llm_byoc.agent.errors import AgentError, KnowledgeBaseTooLarge
from llm_byoc.agent.ingest import build_index
from llm_byoc.agent.knowledge import CacheAugmentedKnowledge, RetrievalKnowledge
from llm_byoc.agent.llm import ChatModel
from llm_byoc.client import EndpointError

DOCUMENTS = [
    Document("cache.md", "The KV cache holds keys and values in blocks of sixteen tokens each."),
    Document("http.txt", "Gunicorn runs the HTTP front end; each worker has many threads."),
    Document("evict.md", "The multi-model endpoint evicts the least recently used idle model first."),
]
THREE_STEPS = {"steps": [{"action": "query_rag", "input": "How many tokens does a KV cache block hold?"},
                         {"action": "generate_analysis", "input": "why blocks"},
                         {"action": "generate_summary", "input": "the block size"}], "reasoning": "r"}


def rag_agent(endpoint: FakeEndpoint, top_k: int = 2) -> KnowledgeAgent:
    embedder = EndpointEmbedder(endpoint.client(), EMBEDDING_MODEL)
    index = build_index(DOCUMENTS, embedder, ChunkingConfig(tokens=32, overlap=4))
    endpoint.calls.clear()
    settings = AgentSettings(top_k=top_k)
    return KnowledgeAgent(ChatModel(endpoint.client(), LLM_MODEL), RetrievalKnowledge(index, embedder, top_k),
                          settings)


def test_rag_runs_the_plan_in_order_feeding_each_result_to_the_next():
    endpoint = FakeEndpoint([json.dumps(THREE_STEPS), "sixteen tokens", "an analysis", "a summary"])
    answer = rag_agent(endpoint).answer("How big is a KV cache block?")
    assert [r.action for r in answer.results] == ["query_rag", "generate_analysis", "generate_summary"]
    assert answer.answer == "a summary" and answer.mode == "rag" and not answer.plan.fallback
    # planner, embed the step's query, then one LLM call per action
    assert [c.kind for c in endpoint.calls] == ["chat", "embed", "chat", "chat", "chat"]
    assert endpoint.calls[1].body["inputs"] == ["How many tokens does a KV cache block hold?"]
    assert endpoint.calls[1].route.target_model == EMBEDDING_MODEL
    query, analysis, summary = (c.body["messages"][-1]["content"] for c in endpoint.chats()[1:])
    assert answer.results[0].sources[0] == "cache.md#t0" and len(answer.results[0].sources) == 2
    assert "(cache.md#t0) The KV cache holds" in query
    assert "(cache.md#t0)" in analysis and "Previous result:\nsixteen tokens" in analysis
    assert summary.startswith("Text:\nan analysis") and answer.results[2].sources == ()


def test_analysis_first_retrieves_for_the_question():
    plan = {"steps": [{"action": "generate_analysis", "input": "eviction"}], "reasoning": ""}
    endpoint = FakeEndpoint([json.dumps(plan), "an analysis"])
    answer = rag_agent(endpoint, top_k=1).answer("Which model is evicted first?")
    assert [c.kind for c in endpoint.calls] == ["chat", "embed", "chat"]
    assert endpoint.calls[1].body["inputs"] == ["Which model is evicted first?"]
    assert answer.results[0].sources == ("evict.md#t0",)


def test_a_plan_that_never_parses_falls_back_to_query_rag():
    endpoint = FakeEndpoint(default="not a plan")
    answer = rag_agent(endpoint).answer("q?")
    assert answer.plan.fallback and [r.action for r in answer.results] == ["query_rag"]
    assert len(answer.results[0].sources) == 2


def test_rag_refuses_an_index_of_another_embedding_model():
    endpoint = FakeEndpoint()
    index = build_index(DOCUMENTS, EndpointEmbedder(endpoint.client(), EMBEDDING_MODEL), ChunkingConfig())
    with pytest.raises(AgentError, match="same model"):
        RetrievalKnowledge(index, EndpointEmbedder(endpoint.client(), "other-model"))


def cag_run(endpoint: FakeEndpoint, mode: str = "auto", question: str = "How big is a block?"):
    knowledge = CacheAugmentedKnowledge(DOCUMENTS, context_tokens=4096)
    llm = ChatModel(endpoint.client(), LLM_MODEL)
    with cag_session(llm, mode) as session:
        knowledge.preload(llm)
        answer = KnowledgeAgent(llm, knowledge).answer(question)
    return answer, session, knowledge


def test_cag_sends_one_fixed_prefix_in_a_session_and_never_embeds():
    plan = {"steps": THREE_STEPS["steps"][:2], "reasoning": ""}
    endpoint = FakeEndpoint(["OK", json.dumps(plan)], prompt_tokens=900)
    answer, session, knowledge = cag_run(endpoint)
    kinds = [c.kind for c in endpoint.calls]
    assert kinds == ["NEW_SESSION", "chat", "chat", "chat", "chat", "CLOSE"] and "embed" not in kinds
    chats = endpoint.chats()
    assert chats[0].body["max_tokens"] == 1 and knowledge.prompt_tokens == 900  # the preload
    prefixes = {json.dumps(c.body["messages"][0]) for c in chats}
    assert len(prefixes) == 1 and all(c.body["messages"][0]["role"] == "system" for c in chats)
    assert all(d.text in knowledge.prefix for d in DOCUMENTS)
    assert {c.route.session_id for c in endpoint.calls[1:]} == {session.id} and endpoint.open_ids == set()
    assert answer.mode == "cag" and not answer.plan.fallback and len(answer.results) == 2
    assert all(r.sources == () for r in answer.results)


def test_cag_goes_on_without_a_session_when_the_endpoint_has_none():
    answer, session, _ = cag_run(FakeEndpoint(sessions=False), mode="auto")
    assert session is None and answer.results


def test_cag_session_on_requires_one_and_off_never_asks():
    with pytest.raises(AgentError, match="no stateful session"):
        cag_run(FakeEndpoint(sessions=False), mode="on")
    endpoint = FakeEndpoint()
    cag_run(endpoint, mode="off")
    assert {c.route.session_id for c in endpoint.calls} == {None}


def test_the_session_is_closed_after_an_error():
    endpoint = FakeEndpoint()
    llm = ChatModel(endpoint.client(), LLM_MODEL)
    with pytest.raises(RuntimeError), cag_session(llm, "on"):
        raise RuntimeError("boom")
    assert endpoint.calls[-1].kind == "CLOSE" and endpoint.open_ids == set() and llm.session is None


def test_cag_refuses_a_knowledge_base_over_the_context_before_sending_anything():
    big = [Document("big.txt", "word " * 5000)]
    with pytest.raises(KnowledgeBaseTooLarge, match="at least 5"):
        CacheAugmentedKnowledge(big, context_tokens=4096)


def test_cag_refuses_when_the_servers_count_is_over_the_context():
    knowledge = CacheAugmentedKnowledge(DOCUMENTS, context_tokens=1200)
    with pytest.raises(KnowledgeBaseTooLarge, match="is 900 tokens"):
        knowledge.preload(ChatModel(FakeEndpoint(prompt_tokens=900).client(), LLM_MODEL))
    endpoint = FakeEndpoint()
    endpoint._chat_completion = lambda body: (_ for _ in ()).throw(EndpointError(
        "a prompt has 5000 tokens; the context window is 2048 tokens", 400, "invalid_request"))
    with pytest.raises(KnowledgeBaseTooLarge, match="context of 2048 tokens"):
        knowledge.preload(ChatModel(endpoint.client(), LLM_MODEL))


@pytest.mark.parametrize("field", ["top_k", "answer_tokens", "plan_attempts"])
def test_settings_are_checked(field):
    with pytest.raises(AgentError, match=field):
        AgentSettings(**{field: 0})
