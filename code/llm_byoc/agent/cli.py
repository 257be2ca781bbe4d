"""``python -m llm_byoc.agent ingest|ask``: the knowledge agent as a command.

    python -m llm_byoc.agent ingest local_test/agent_docs --index /tmp/kb --local http://localhost:8080
    python -m llm_byoc.agent ask "How many tokens does a KV block hold?" --index /tmp/kb \\
        --local http://localhost:8080 --llm-model smollm2-135m-instruct           # RAG
    python -m llm_byoc.agent ask "..." --cag local_test/agent_docs --local ... --llm-model ...   # CAG
    python -m llm_byoc.agent ask "..." --index /tmp/kb --endpoint my-mme --llm-model smollm2.tar.gz --tools

One endpoint holds both models (a multi-model container: ``--llm-model`` and
``--embedding-model`` name them), or the embedding model has its own
(``--embedding-local`` / ``--embedding-endpoint``). The answer goes to stdout
(``--json``: the whole run as one object); the plan and every action are
logged to stderr as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from ..client import EndpointClient, EndpointError
from ..logging_setup import configure_logging
from .agent import SESSION_MODES, AgentAnswer, AgentSettings, KnowledgeAgent, cag_session
from .chunking import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP_TOKENS, ChunkingConfig
from .documents import load_documents
from .embeddings import DEFAULT_BATCH_SIZE, DEFAULT_EMBEDDING_MODEL, EndpointEmbedder
from .errors import AgentError
from .index import VectorIndex
from .ingest import ingest
from .knowledge import DEFAULT_CONTEXT_TOKENS, DEFAULT_TOP_K, CacheAugmentedKnowledge, RetrievalKnowledge
from .llm import ChatModel
from .planner import STRUCTURED_MODES
from .tool_loop import ToolLoopResult


def _endpoint_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", help="SageMaker endpoint name")
    where.add_argument("--local", metavar="URL", help="a container reached directly, e.g. http://localhost:8080")
    p.add_argument("--region", help="AWS region (default: the AWS configuration)")
    p.add_argument("--embedding-model", default=DEFAULT_EMBEDDING_MODEL,
                   help=f"the embedding model's name in a multi-model endpoint (default {DEFAULT_EMBEDDING_MODEL}; "
                        "'' when the embedding endpoint is that model)")
    other = p.add_mutually_exclusive_group()
    other.add_argument("--embedding-endpoint", help="the embedding model's own SageMaker endpoint")
    other.add_argument("--embedding-local", metavar="URL", help="the embedding model's own container")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="texts per embedding request")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for an answer (default 300)")
    p.add_argument("--log-level", default="info", help="stderr JSON logs: debug, info, warning (default info)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m llm_byoc.agent", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ingest", help="documents -> chunks -> embeddings -> an index folder")
    p.add_argument("paths", nargs="+", type=Path, help="PDF, Markdown and text files, or folders of them")
    p.add_argument("--index", type=Path, required=True, help="the folder to write the index to")
    p.add_argument("--chunk-tokens", type=int, default=DEFAULT_CHUNK_TOKENS)
    p.add_argument("--overlap", type=int, default=DEFAULT_OVERLAP_TOKENS)
    _endpoint_args(p)

    p = sub.add_parser("ask", help="answer a question: plan, then act (or --tools)")
    p.add_argument("question")
    knowledge = p.add_mutually_exclusive_group(required=True)
    knowledge.add_argument("--index", type=Path, help="RAG: an index built by `ingest`")
    knowledge.add_argument("--cag", type=Path, nargs="+", metavar="PATH",
                           help="CAG: these documents, whole, as every prompt's fixed prefix")
    p.add_argument("--llm-model", help="the LLM's name in a multi-model endpoint (default: the endpoint is the LLM)")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    p.add_argument("--answer-tokens", type=int, default=AgentSettings.answer_tokens)
    p.add_argument("--context-tokens", type=int, default=DEFAULT_CONTEXT_TOKENS,
                   help="CAG: the LLM's context window (LLM_BYOC_MAX_MODEL_LEN)")
    p.add_argument("--structured-output", choices=STRUCTURED_MODES, default="auto",
                   help="the plan's JSON: on = response_format json_schema, off = asked for in the prompt "
                        "(validated, retried), auto = on unless the server refuses it (default)")
    p.add_argument("--tools", action="store_true", help="an OpenAI tool-calling loop instead of plan-then-act")
    p.add_argument("--tool-choice", choices=("auto", "required"), default="auto",
                   help="with --tools: the first round's tool_choice (required: the model must call an action)")
    p.add_argument("--session", choices=SESSION_MODES, default="auto",
                   help="CAG: a stateful session for the run (auto: when the endpoint has them)")
    p.add_argument("--json", action="store_true", help="print the whole run as one JSON object")
    _endpoint_args(p)
    return parser


def _client(endpoint: str | None, local: str | None, args: argparse.Namespace) -> EndpointClient:
    if local:
        return EndpointClient.local(local, timeout_s=args.timeout)
    return EndpointClient.sagemaker(endpoint, region=args.region, timeout_s=args.timeout)


def make_clients(args: argparse.Namespace) -> tuple[EndpointClient, EndpointClient]:
    """(LLM client, embedding client): the same one unless the embedding model has its own endpoint."""
    main = _client(args.endpoint, args.local, args)
    if args.embedding_endpoint or args.embedding_local:
        return main, _client(args.embedding_endpoint, args.embedding_local, args)
    return main, main


def run_ingest(args: argparse.Namespace, embedding_client: EndpointClient, out: TextIO) -> None:
    embedder = EndpointEmbedder(embedding_client, args.embedding_model or None, args.batch_size)
    index = ingest(args.paths, args.index, embedder, ChunkingConfig(args.chunk_tokens, args.overlap))
    sources = sorted({chunk.source for chunk in index.chunks})
    print(f"{len(index.chunks)} chunks of {len(sources)} documents ({index.dimension}-d {index.embedding_model}) "
          f"-> {args.index}", file=out)


def run_ask(args: argparse.Namespace, llm_client: EndpointClient, embedding_client: EndpointClient,
            out: TextIO) -> None:
    settings = AgentSettings(top_k=args.top_k, answer_tokens=args.answer_tokens, context_tokens=args.context_tokens,
                             structured_output=args.structured_output)
    llm = ChatModel(llm_client, args.llm_model)
    if args.index:
        embedder = EndpointEmbedder(embedding_client, args.embedding_model or None, args.batch_size)
        knowledge = RetrievalKnowledge(VectorIndex.load(args.index), embedder, settings.top_k)
        _answer(args, KnowledgeAgent(llm, knowledge, settings), out)
        return
    knowledge = CacheAugmentedKnowledge(load_documents(args.cag), settings.context_tokens, settings.answer_tokens)
    with cag_session(llm, args.session):
        knowledge.preload(llm)
        _answer(args, KnowledgeAgent(llm, knowledge, settings), out)


def _answer(args: argparse.Namespace, agent: KnowledgeAgent, out: TextIO) -> None:
    if args.tools:
        result = agent.answer_with_tools(args.question, tool_choice=args.tool_choice)
        report = tool_loop_json(args.question, result)
    else:
        report = answer_json(agent.answer(args.question))
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False), file=out)
        return
    print(report["answer"], file=out)
    sources = report["sources"]
    if sources:
        print("\nSources: " + ", ".join(sources), file=out)


def _sources(results) -> list[str]:
    return list(dict.fromkeys(label for result in results for label in result.sources))


def _steps(results) -> list[dict]:
    return [{"action": r.action, "input": r.input, "output": r.output, "sources": list(r.sources),
             "latency_s": round(r.latency_s, 3)} for r in results]


def answer_json(answer: AgentAnswer) -> dict:
    return {"question": answer.question, "mode": answer.mode, "answer": answer.answer,
            "sources": _sources(answer.results),
            "plan": {**answer.plan.plan.to_json(), "planner": answer.plan.mode, "fallback": answer.plan.fallback,
                     "attempts": len(answer.plan.attempts)},
            "steps": _steps(answer.results), "latency_s": round(answer.latency_s, 3)}


def tool_loop_json(question: str, result: ToolLoopResult) -> dict:
    return {"question": question, "answer": result.answer, "sources": _sources(result.results),
            "tool_rounds": result.rounds, "steps": _steps(result.results)}


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        configure_logging(args.log_level)
        llm_client, embedding_client = make_clients(args)
        if args.command == "ingest":
            run_ingest(args, embedding_client, out)
        else:
            run_ask(args, llm_client, embedding_client, out)
    except (AgentError, EndpointError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
