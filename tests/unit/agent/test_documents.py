"""Reading documents: text, Markdown and PDF (made by ``text_pdf``, read back by pypdf)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_byoc.agent.documents import Document, load_documents, read_document
from llm_byoc.agent.errors import AgentError
from llm_byoc.agent.text_pdf import LINES_PER_PAGE, write_text_pdf

SHIPPED = Path(__file__).resolve().parents[3] / "local_test" / "agent_docs"


def test_text_and_markdown_are_read_as_written(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\nSome *text*.\n")
    (tmp_path / "b.txt").write_text("plain\n")
    docs = load_documents([tmp_path])
    assert [d.source for d in docs] == ["a.md", "b.txt"]
    assert docs[0].text == "# Title\n\nSome *text*.\n" and docs[0].page_starts == ()
    assert docs[0].page_at(3) is None


def test_pdf_pages_are_read_in_order_with_their_offsets(tmp_path):
    # One line each plus a blank line between two: three pages of short paragraphs.
    count = LINES_PER_PAGE * 3 // 2
    paragraphs = [f"Paragraph {i} says the value is {i * 7}." for i in range(count)]
    pdf = write_text_pdf(tmp_path / "doc.pdf", paragraphs)
    doc = read_document(pdf)
    assert doc.source == "doc.pdf"
    assert len(doc.page_starts) == 3 and doc.page_starts[0] == 0
    for i in (0, 20, count - 1):
        assert f"Paragraph {i} says the value is {i * 7}." in doc.text
    assert doc.page_at(0) == 1
    assert doc.page_at(doc.page_starts[1]) == 2 and doc.page_at(doc.page_starts[1] - 1) == 1
    assert doc.page_at(len(doc.text) - 1) == 3


def test_the_shipped_pdf_holds_its_text():
    doc = read_document(SHIPPED / "deployment.pdf")
    assert "X-Amzn-SageMaker-New-Session-Id" in doc.text
    assert "LLM_BYOC_GRACEFUL_TIMEOUT, which is 30 seconds by default" in doc.text
    assert len(doc.page_starts) >= 2


def test_a_folder_is_read_recursively_skipping_other_files(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "n.markdown").write_text("nested")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    docs = load_documents([tmp_path])
    assert [d.source for d in docs] == ["sub/n.markdown"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing.txt", "no such file"),
        (lambda p: (p / "x.csv").write_text("a,b") and p / "x.csv", "not a document kind"),
        (lambda p: (p / "bad.txt").write_bytes(b"\xff\xfe\x00") and p / "bad.txt", "not UTF-8"),
        (lambda p: (p / "bad.pdf").write_bytes(b"%PDF-1.4 nonsense") and p / "bad.pdf", "not a readable PDF"),
        (lambda p: p, "no documents"),
    ],
)
def test_unreadable_inputs_are_clear_errors(tmp_path, make, message):
    with pytest.raises(AgentError, match=message):
        load_documents([make(tmp_path)])


def test_two_documents_with_one_name_are_refused(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "same.txt").write_text(folder)
    with pytest.raises(AgentError, match="same name: same.txt"):
        load_documents([tmp_path / "a" / "same.txt", tmp_path / "b" / "same.txt"])


def test_page_at_counts_from_one():
    doc = Document("d.pdf", "one\n\ntwo", (0, 5))
    assert [doc.page_at(i) for i in (0, 4, 5, 7)] == [1, 1, 2, 2]
