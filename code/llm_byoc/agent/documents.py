"""Read the user's documents: PDF (pypdf), Markdown and plain text.

A folder is read recursively, in sorted order, keeping the files it knows and
logging the ones it skips; a file named on its own must be one of the kinds.
A document's ``source`` is its path relative to the folder it was found in
(or its file name), which is what answers cite.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .errors import AgentError

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
PDF_SUFFIX = ".pdf"
SUFFIXES = TEXT_SUFFIXES + (PDF_SUFFIX,)


@dataclass(frozen=True)
class Document:
    source: str
    text: str
    page_starts: tuple[int, ...] = ()  # PDFs: the character offset where each page's text starts

    def page_at(self, offset: int) -> int | None:
        """The 1-based page that holds character ``offset`` (None for a document without pages)."""
        if not self.page_starts:
            return None
        return sum(1 for start in self.page_starts if start <= offset) or 1


def read_text_file(path: Path, source: str) -> Document:
    try:
        return Document(source, path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise AgentError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_pdf(path: Path, source: str) -> Document:
    """One document, its pages' text in order; whitespace inside a page collapsed (PDF lines are layout)."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        raise AgentError("reading PDFs needs pypdf: pip install 'llm-byoc[agent]'") from None
    try:
        reader = PdfReader(path)
        if reader.is_encrypted:
            raise AgentError(f"{path}: the PDF is encrypted")
        pages = [" ".join((page.extract_text() or "").split()) for page in reader.pages]
    except PdfReadError as exc:
        raise AgentError(f"{path}: not a readable PDF ({exc})") from None
    text, starts = "", []
    for page in pages:
        if text:
            text += "\n\n"
        starts.append(len(text))
        text += page
    if not text.strip():
        log.warning("a PDF without extractable text (scanned images?)", extra={"source": source})
    return Document(source, text, tuple(starts))


def read_document(path: Path, source: str | None = None) -> Document:
    source = source or path.name
    suffix = path.suffix.lower()
    if suffix == PDF_SUFFIX:
        return read_pdf(path, source)
    if suffix in TEXT_SUFFIXES:
        return read_text_file(path, source)
    raise AgentError(f"{path}: not a document kind the agent reads ({', '.join(SUFFIXES)})")


def load_documents(paths: list[Path]) -> list[Document]:
    """Every document under ``paths`` (files and folders), in a stable order."""
    documents = []
    for path in paths:
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                if file.suffix.lower() in SUFFIXES:
                    documents.append(read_document(file, file.relative_to(path).as_posix()))
                else:
                    log.info("skipped: not a document", extra={"path": str(file)})
        elif path.is_file():
            documents.append(read_document(path))
        else:
            raise AgentError(f"{path}: no such file or folder")
    if not documents:
        raise AgentError(f"no documents ({', '.join(SUFFIXES)}) in {', '.join(map(str, paths))}")
    sources = [d.source for d in documents]
    duplicates = sorted({s for s in sources if sources.count(s) > 1})
    if duplicates:
        raise AgentError(f"two documents have the same name: {', '.join(duplicates)}")
    return documents
