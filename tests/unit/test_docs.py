"""The documentation: the MkDocs site builds strictly, the README stays short, its links resolve.

mkdocs is in the ``test`` extra, so a missing mkdocs fails here rather than skipping.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

README_MAX_LINES = 300

# [text](target) or [text](target "title"); images too. Targets with spaces are not used here.
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_EXTERNAL = ("http://", "https://", "mailto:", "#")


def _relative_links(markdown: str) -> list[str]:
    """Relative link targets of a Markdown text, outside fenced code and inline code."""
    targets: list[str] = []
    in_fence = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for target in _LINK.findall(line):
            if not target.startswith(_EXTERNAL):
                targets.append(target)
    return targets


def test_mkdocs_build_strict(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}\n{result.stdout}"
    assert (tmp_path / "site" / "index.html").is_file()


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


@pytest.mark.parametrize("name", ["README.md", "deploy/README.md"])
def test_relative_links_point_at_files(name):
    path = ROOT / name
    targets = _relative_links(path.read_text(encoding="utf-8"))
    assert targets, f"{name} links to no file: the docs are reached from it"
    broken = [t for t in targets if not (path.parent / t.split("#", 1)[0]).is_file()]
    assert not broken, f"{name} links to files that do not exist: {broken}"


def test_link_finder():
    text = (
        "[a](docs/x.md#y) [b](https://e.com) [c](#z) `[d](not/a/link.md)`\n"
        "```\n[e](inside/fence.md)\n```\n![f](img.png) [g](mailto:a@b)\n"
    )
    assert _relative_links(text) == ["docs/x.md#y", "img.png"]
