"""Split documents into chunks of about N tokens that overlap by M.

Tokens are counted the way a word-piece or BPE tokenizer roughly would,
without needing the model's tokenizer on the client: a word (``\\w+``) or a
punctuation mark is one token. On English text all-MiniLM-L6-v2's WordPiece
makes about 1.2 tokens of each (the agent benchmark prints the measured
ratio), so the default 128-token chunk stays well under the 256 word pieces
the model was trained to embed. A chunk's text is the exact slice of the
document between its first and last token, so it reads as written.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from .documents import Document
from .errors import AgentError

TOKEN = re.compile(r"\w+|[^\w\s]")
DEFAULT_CHUNK_TOKENS = 128  # README "Knowledge agent": recall@k measured at several sizes
DEFAULT_OVERLAP_TOKENS = 32


@dataclass(frozen=True)
class ChunkingConfig:
    tokens: int = DEFAULT_CHUNK_TOKENS
    overlap: int = DEFAULT_OVERLAP_TOKENS

    def __post_init__(self) -> None:
        if self.tokens < 8:
            raise AgentError(f"chunks must be at least 8 tokens long, not {self.tokens}")
        if not 0 <= self.overlap < self.tokens:
            raise AgentError(f"the overlap must be from 0 to {self.tokens - 1} tokens, not {self.overlap}")

    @property
    def stride(self) -> int:
        return self.tokens - self.overlap

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Chunk:
    source: str
    text: str
    start_token: int  # the chunk's first token, counted in its document
    page: int | None = None  # PDFs: the page it starts on

    @property
    def label(self) -> str:
        """What an answer cites, unique in an index: ``engine.md#t96``, ``deployment.pdf#p2-t480``."""
        page = f"p{self.page}-" if self.page is not None else ""
        return f"{self.source}#{page}t{self.start_token}"


def count_tokens(text: str) -> int:
    return sum(1 for _ in TOKEN.finditer(text))


def chunk_document(document: Document, config: ChunkingConfig) -> list[Chunk]:
    spans = [m.span() for m in TOKEN.finditer(document.text)]
    chunks = []
    for start in range(0, len(spans), config.stride):
        window = spans[start : start + config.tokens]
        begin, end = window[0][0], window[-1][1]
        chunks.append(Chunk(document.source, document.text[begin:end], start, document.page_at(begin)))
        if start + config.tokens >= len(spans):
            break  # this window reached the end: another would only repeat its tail
    return chunks


def chunk_documents(documents: list[Document], config: ChunkingConfig) -> list[Chunk]:
    return [chunk for document in documents for chunk in chunk_document(document, config)]


def normalized(text: str) -> str:
    """Whitespace collapsed: how a passage is compared with a chunk, whatever the layout."""
    return " ".join(text.split())
