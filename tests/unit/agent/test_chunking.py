"""Chunks of N tokens with an overlap of M: every token covered, windows overlapping exactly."""

from __future__ import annotations

import pytest
from llm_byoc.agent.chunking import TOKEN, ChunkingConfig, chunk_document, count_tokens
from llm_byoc.agent.documents import Document
from llm_byoc.agent.errors import AgentError


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_token_count_is_words_and_punctuation():
    assert count_tokens("Hello, world!  It's 42.") == 9  # Hello , world ! It ' s 42 .
    assert [m.group() for m in TOKEN.finditer("a-b")] == ["a", "-", "b"]


@pytest.mark.parametrize("n", [1, 15, 16, 17, 40, 100])
def test_windows_cover_every_token_with_the_overlap(n):
    config = ChunkingConfig(tokens=16, overlap=4)
    chunks = chunk_document(Document("d.txt", words(n)), config)
    starts = [c.start_token for c in chunks]
    assert starts == list(range(0, len(starts) * config.stride, config.stride))
    assert all(count_tokens(c.text) == min(16, n - c.start_token) for c in chunks)
    assert chunks[-1].start_token + count_tokens(chunks[-1].text) == n  # the last one reaches the end
    for a, b in zip(chunks, chunks[1:]):
        assert a.text.split()[-4:] == b.text.split()[:4]  # exactly the overlap is repeated
    assert n <= 16 or len(chunks) == -(-(n - 4) // 12)  # no extra window that only repeats a tail


def test_a_chunk_is_the_documents_own_text():
    text = "First line.\n\nSecond   line, with  spaces."
    chunk = chunk_document(Document("d.md", text), ChunkingConfig(tokens=8, overlap=0))[0]
    assert chunk.text == text[:-1] and chunk.label == "d.md#t0"  # 8 tokens: all but the final "."


def test_pdf_chunks_carry_their_page():
    doc = Document("d.pdf", words(30) + "\n\n" + words(30), (0, len(words(30)) + 2))
    chunks = chunk_document(doc, ChunkingConfig(tokens=10, overlap=0))
    assert [c.page for c in chunks] == [1, 1, 1, 2, 2, 2]
    assert chunks[3].label == "d.pdf#p2-t30"


def test_an_empty_document_has_no_chunks():
    assert chunk_document(Document("e.txt", "  \n"), ChunkingConfig()) == []


@pytest.mark.parametrize("tokens, overlap", [(4, 0), (16, 16), (16, -1)])
def test_bad_settings_are_refused(tokens, overlap):
    with pytest.raises(AgentError):
        ChunkingConfig(tokens, overlap)
