"""Every rule the code cites lives in the repository's docs/: no citation of an outside contract document, and
every ``docs/<page>.md#<anchor>`` (from code) or ``<page>.md#<anchor>`` (from a docs page) names a real heading.

Anchors follow GitHub's rule: lower-case, punctuation dropped, spaces become ``-``, a repeated heading gets
``-1``, ``-2``, ... Headings inside fenced code blocks are not headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
SCANNED = ("packages", "tests", "tools", "examples", "docs")
SUFFIXES = {".py", ".md", ".toml", ".cfg", ".txt", ".yaml", ".yml", ".json", ".sh"}
# The outside contract's name, spelled in two parts so that this file does not cite it.
OUTSIDE = re.compile(r"\b" + "SP" + r"EC\b")
CODE_LINK = re.compile(r"docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?")
DOC_LINK = re.compile(r"\]\(((?:\.\./|[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?\)|\]\(#([\w-]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _files():
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and ".venv" not in path.parts:
                yield path
    yield ROOT / "README.md"


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of every heading of a Markdown page, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_slug_follows_githubs_rule():
    assert slug("Static graph: level L2 (GRAPH_MODE, `jit`)") == "static-graph-level-l2-graph_mode-jit"
    assert slug("Durability: the training run always goes on") == "durability-the-training-run-always-goes-on"
    assert slug("Attribution: made here, or inherited? (`--attribute`)") == (
        "attribution-made-here-or-inherited---attribute")


def test_anchors_skip_code_blocks_and_number_repeats(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n## Part\n```\n# not a heading\n```\n## Part\n", encoding="utf-8")
    assert anchors(page) == {"title", "part", "part-1"}


def test_no_citation_of_a_document_outside_the_repository():
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _files()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "cite the docs/ page that states the rule instead:\n" + "\n".join(hits)


def _citations():
    """(citing file, line, page, anchor or None) for every docs link in the scanned files."""
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if path.suffix == ".md" and DOCS in path.parents:
                for relative, anchor, local in DOC_LINK.findall(line):
                    page = path if local else (path.parent / relative).resolve()
                    yield path, number, page, local or anchor or None
            else:
                for relative, anchor in CODE_LINK.findall(line):
                    yield path, number, DOCS / relative, anchor or None


@pytest.fixture(scope="module")
def citations():
    return list(_citations())


def test_the_scan_finds_citations(citations):
    assert any(anchor for *_, anchor in citations), "no docs/...md#anchor found: the pattern is broken"


def test_every_cited_docs_page_and_heading_exists(citations):
    cache: dict[Path, set[str]] = {}
    broken = []
    for path, number, page, anchor in citations:
        where = f"{path.relative_to(ROOT)}:{number}"
        if not page.is_file():
            broken.append(f"{where}: no page {page.relative_to(ROOT) if ROOT in page.parents else page}")
        elif anchor is not None and anchor not in cache.setdefault(page, anchors(page)):
            broken.append(f"{where}: no heading #{anchor} in {page.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)
