"""``python -m llm_byoc.agent ingest|ask`` over the fake endpoint: the index it writes, the answer it prints."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fake_endpoint import LLM_MODEL, FakeEndpoint
from llm_byoc.agent import cli
from llm_byoc.agent.index import VectorIndex

SHIPPED = Path(__file__).resolve().parents[3] / "local_test" / "agent_docs"
PLAN = {"steps": [{"action": "query_rag", "input": "How long is the graceful timeout?"}], "reasoning": ""}
LOCAL = ["--local", "http://127.0.0.1:9"]


@pytest.fixture(autouse=True)
def restore_logging(restore_root_logger):
    """The command configures the root logger (JSON lines on stderr)."""


@pytest.fixture()
def endpoint(monkeypatch) -> FakeEndpoint:
    fake = FakeEndpoint()
    monkeypatch.setattr(cli, "make_clients", lambda args: (fake.client(), fake.client()))
    return fake


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main([*argv, "--log-level", "warning"], out=out)
    return code, out.getvalue()


def test_ingest_then_ask_with_rag(endpoint, tmp_path):
    code, out = run("ingest", str(SHIPPED), "--index", str(tmp_path / "kb"), "--chunk-tokens", "96",
                    "--overlap", "16", "--batch-size", "8", *LOCAL)
    assert code == 0, out
    index = VectorIndex.load(tmp_path / "kb")
    assert {c.source for c in index.chunks} == {"deployment.pdf", "engine.md", "multi_model.txt"}
    assert index.chunking.tokens == 96 and index.chunking.overlap == 16
    assert f"{len(index.chunks)} chunks of 3 documents" in out
    assert all(len(c.body["inputs"]) <= 8 for c in endpoint.calls)

    endpoint.calls.clear()
    endpoint.replies = [json.dumps(PLAN), "30 seconds"]
    code, out = run("ask", "How long is the graceful timeout?", "--index", str(tmp_path / "kb"), "--json",
                    "--llm-model", LLM_MODEL, "--top-k", "3", *LOCAL)
    assert code == 0, out
    report = json.loads(out)
    assert report["answer"] == "30 seconds" and report["mode"] == "rag" and len(report["sources"]) == 3
    assert report["plan"]["planner"] == "structured" and not report["plan"]["fallback"]
    assert report["steps"][0]["sources"] == report["sources"]
    assert {c.route.target_model for c in endpoint.chats()} == {LLM_MODEL}


def test_ask_with_cag_prints_the_answer(endpoint):
    endpoint.replies = ["OK", json.dumps(PLAN), "30 seconds"]
    code, out = run("ask", "How long?", "--cag", str(SHIPPED), "--structured-output", "off", *LOCAL)
    assert code == 0 and out == "30 seconds\n"
    kinds = [c.kind for c in endpoint.calls]
    assert kinds[0] == "NEW_SESSION" and kinds[-1] == "CLOSE" and "embed" not in kinds
    assert "response_format" not in endpoint.chats()[1].body


def test_errors_are_one_line_and_exit_1(endpoint, tmp_path, capsys):
    code, _ = run("ask", "q", "--index", str(tmp_path / "none"), *LOCAL)
    assert code == 1 and "not an index" in capsys.readouterr().err
    code, _ = run("ingest", str(tmp_path / "missing"), "--index", str(tmp_path / "kb"), *LOCAL)
    assert code == 1 and "no such file" in capsys.readouterr().err
    code, _ = run("ask", "q", "--cag", str(SHIPPED), "--context-tokens", "1000", *LOCAL)
    assert code == 1 and "--context-tokens" in capsys.readouterr().err
