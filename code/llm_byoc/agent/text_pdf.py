"""Write plain text as a small PDF (Helvetica, wrapped lines, as many pages as it takes).

The demo's PDF document and the ingestion tests are made with this, so both
are reproducible from text: the same paragraphs give the same bytes. Only the
Latin-1 characters of the standard Helvetica font are written.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

PAGE_WIDTH, PAGE_HEIGHT = 612, 792  # US Letter, in points
MARGIN = 72
FONT_SIZE = 11
LEADING = 14  # points from one line to the next
WRAP_COLUMNS = 90  # about what fits between the margins at 11 pt Helvetica
LINES_PER_PAGE = (PAGE_HEIGHT - 2 * MARGIN) // LEADING


def wrapped_lines(paragraphs: list[str]) -> list[str]:
    """Paragraphs wrapped to the page's width, a blank line between two."""
    lines: list[str] = []
    for paragraph in paragraphs:
        if lines:
            lines.append("")
        lines.extend(textwrap.wrap(" ".join(paragraph.split()), WRAP_COLUMNS) or [""])
    return lines


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _content(lines: list[str]) -> bytes:
    ops = ["BT", f"/F1 {FONT_SIZE} Tf", f"{LEADING} TL", f"{MARGIN} {PAGE_HEIGHT - MARGIN} Td"]
    ops += [f"({_escape(line)}) Tj T*" for line in lines]
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def text_pdf_bytes(paragraphs: list[str]) -> bytes:
    from pypdf import PdfWriter
    from pypdf.generic import ContentStream, DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = DictionaryObject({
        NameObject("/Type"): NameObject("/Font"),
        NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica"),
        NameObject("/Encoding"): NameObject("/WinAnsiEncoding"),
    })
    lines = wrapped_lines(paragraphs)
    for start in range(0, max(len(lines), 1), LINES_PER_PAGE):
        page = writer.add_blank_page(PAGE_WIDTH, PAGE_HEIGHT)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        stream = DecodedStreamObject()
        stream.set_data(_content(lines[start : start + LINES_PER_PAGE]))
        page.replace_contents(ContentStream(stream, writer))
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def write_text_pdf(path: Path, paragraphs: list[str]) -> Path:
    path.write_bytes(text_pdf_bytes(paragraphs))
    return path
