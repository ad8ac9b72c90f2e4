"""Every relative link in README.md and docs/*.md points to a file that exists (and, with #anchor, to one of its
headings), so a moved or renamed doc breaks the suite, not a reader's click."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", re.sub(r"```.*?```", "", markdown, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def broken_links(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file(doc):
    assert broken_links(doc) == []


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path):
    (tmp_path / "other.md").write_text("# Kueue versions\n")
    doc = tmp_path / "doc.md"
    doc.write_text("[a](other.md#kueue-versions) [b](gone.md) [c](other.md#nowhere) [d](https://example.com/x)\n"
                   "[e](#here)\n\n## Here\n")
    assert [line.split(":")[0] for line in broken_links(doc)] == ["gone.md", "other.md#nowhere"]
