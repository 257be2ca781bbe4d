"""Where an answer's knowledge comes from: retrieval (RAG) or the whole knowledge base in the prompt (CAG).

Every prompt the agent sends starts with ``system_message()``. With RAG it is a
short fixed instruction and each task brings its own retrieved chunks
(``context_for``). With CAG it is the entire knowledge base, built once and
byte-for-byte the same on every call, so the engine's prefix cache computes
it once and serves it from memory afterwards (and a stateful session keeps it
pinned on one instance); ``context_for`` then adds nothing.

CAG only works while the knowledge base fits in the model's context with room
for the task: checked first on a token estimate before anything is sent, then
exactly, with the server's own token count, by ``preload`` (the call that puts
the prefix in the cache).
"""

from __future__ import annotations

import re
from typing import Protocol

from ..client import EndpointError
from .chunking import count_tokens
from .documents import Document
from .embeddings import EndpointEmbedder
from .errors import AgentError, KnowledgeBaseTooLarge
from .index import Hit, VectorIndex
from .llm import ChatModel, Completion

RAG_SYSTEM = ("You are a careful assistant. Answer from the documents you are given, briefly and plainly. "
              "If they do not hold the answer, say that you do not know.")
CAG_SYSTEM = ("You are a careful assistant. The knowledge base below holds everything you know about the "
              "user's documents. Answer from it, briefly and plainly. If it does not hold the answer, say that "
              "you do not know.")
DEFAULT_TOP_K = 5  # README "Knowledge agent": every shipped question's passage is in the top 5 at 128 tokens
DEFAULT_CONTEXT_TOKENS = 4096  # the container's default context (LLM_BYOC_MAX_MODEL_LEN: the model's, at most 4096)
TASK_TOKENS = 640  # beyond the prefix, what a task needs: its instructions, a question, earlier results
_SERVER_WINDOW = re.compile(r"the context window is (\d+) tokens")


class Knowledge(Protocol):
    mode: str

    def system_message(self) -> dict: ...

    def context_for(self, query: str) -> tuple[str, list[Hit]]: ...


def format_hits(hits: list[Hit]) -> str:
    return "\n\n".join(f"[{hit.rank}] ({hit.chunk.label}) {hit.chunk.text}" for hit in hits)


class RetrievalKnowledge:
    mode = "rag"

    def __init__(self, index: VectorIndex, embedder: EndpointEmbedder, top_k: int = DEFAULT_TOP_K):
        if index.embedding_model != embedder.model_name:
            raise AgentError(f"the index was built with {index.embedding_model!r}; queries would be embedded "
                             f"with {embedder.model_name!r}: embed both with the same model")
        self.index = index
        self.embedder = embedder
        self.top_k = top_k

    def system_message(self) -> dict:
        return {"role": "system", "content": RAG_SYSTEM}

    def retrieve(self, query: str, k: int | None = None) -> list[Hit]:
        return self.index.search(self.embedder.embed_one(query), k or self.top_k)

    def context_for(self, query: str) -> tuple[str, list[Hit]]:
        hits = self.retrieve(query)
        return format_hits(hits), hits


def knowledge_base_text(documents: list[Document]) -> str:
    """The prefix: instructions, then every document under its name, in source order."""
    parts = [CAG_SYSTEM, "", "=== KNOWLEDGE BASE ==="]
    for document in sorted(documents, key=lambda d: d.source):
        parts += ["", f"--- {document.source} ---", document.text.strip()]
    parts += ["", "=== END OF KNOWLEDGE BASE ==="]
    return "\n".join(parts)


class CacheAugmentedKnowledge:
    mode = "cag"

    def __init__(self, documents: list[Document], context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                 answer_tokens: int = 256):
        self.prefix = knowledge_base_text(documents)
        self.context_tokens = context_tokens
        self.room_tokens = answer_tokens + TASK_TOKENS
        self.prompt_tokens: int | None = None  # the server's count, once preloaded
        # Word and punctuation tokens: fewer than any subword tokenizer makes of English, so an
        # estimate over the limit is certainly over it (nothing is sent).
        self._check(count_tokens(self.prefix), "at least ")

    def system_message(self) -> dict:
        return {"role": "system", "content": self.prefix}

    def context_for(self, query: str) -> tuple[str, list[Hit]]:
        return "", []  # the whole knowledge base is already in the prefix

    def preload(self, llm: ChatModel) -> Completion:
        """Send the prefix once (one new token): the server counts its tokens and caches its blocks."""
        messages = [self.system_message(), {"role": "user", "content": "Reply with OK."}]
        try:
            completion = llm.complete(messages, max_tokens=1)
        except EndpointError as exc:
            window = _SERVER_WINDOW.search(exc.message) if exc.status_code == 400 else None
            if window is None:
                raise
            raise KnowledgeBaseTooLarge(
                f"the knowledge base does not fit in the model's context of {window.group(1)} tokens "
                f"(the server said: {exc.message}); use RAG (ingest + ask --index), or fewer documents") from None
        if completion.prompt_tokens is None:
            raise AgentError("the LLM's answer has no usage.prompt_tokens: cannot check the knowledge base's size")
        self.prompt_tokens = completion.prompt_tokens
        self._check(completion.prompt_tokens, "")
        return completion

    def _check(self, prefix_tokens: int, qualifier: str) -> None:
        if prefix_tokens + self.room_tokens > self.context_tokens:
            raise KnowledgeBaseTooLarge(
                f"the knowledge base is {qualifier}{prefix_tokens} tokens; with {self.room_tokens} for a task and "
                f"its answer it needs {prefix_tokens + self.room_tokens}, over the model's context of "
                f"{self.context_tokens} (--context-tokens): use RAG (ingest + ask --index), or fewer documents")
