"""The README is the front door and docs/ the manual: every relative link and image in them resolves.

A link to a file must name one that exists (relative to the page, as GitHub resolves it), and a
``#anchor`` must be the slug of a heading of the page it points into, made by GitHub's rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def prose(markdown: str) -> str:
    """The text outside fenced blocks and code spans: a link inside code is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", markdown))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, each space a hyphen.

    >>> slug("Sizing: `MemorySize`")
    'sizing-memorysize'
    >>> slug("Many streams per environment (Lambda Managed Instances)")
    'many-streams-per-environment-lambda-managed-instances'
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's slug; a repeated one gets -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text("utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text("utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, flags=re.IGNORECASE)]


def test_the_manual_has_its_pages() -> None:
    names = {p.name for p in PAGES}
    assert {
        "README.md",
        "architecture.md",
        "api.md",
        "auth.md",
        "deploy.md",
        "observability.md",
        "limits-and-troubleshooting.md",
        "benchmark.md",
        "development.md",
    } <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    links = relative_links(page)
    broken = []
    for target in links:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading with that anchor")
    assert broken == []


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(ROOT / "README.md")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 200
    assert "make run" in readme
    assert "make test" in readme


def test_each_manual_page_starts_with_what_a_reader_comes_to_it_for() -> None:
    # A title, then a paragraph of prose saying what the page is for, before any section, table or code.
    for page in PAGES[1:]:
        title, lead, *_ = page.read_text("utf-8").split("\n\n")
        assert title.startswith("# ") and "\n" not in title, page.name
        assert lead[:1].isalpha() and len(lead.split()) >= 12, page.name


def test_the_checker_finds_what_it_should() -> None:
    # The checker itself: a link in code is not one, an image is, a heading's punctuation is dropped.
    text = "[a](x.md) `[b](y.md)` ![c](img/p.png)\n```\n[d](z.md)\n```\n[e](#f-g)"
    assert LINK.findall(prose(text)) == ["x.md", "img/p.png", "#f-g"]
    assert slug("Signed-in users: `AUTH_MODE=jwt`") == "signed-in-users-auth_modejwt"
