"""Every docs page can be found: each docs/*.md is linked from docs/index.md
and from README.md, the pages a newcomer looks for first by name; and the
configuration reference checked into docs/configuration.md is what the schema
gives today (docs/hooks/config_reference.py). Files only, no processes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name != "index.md")
LINK = re.compile(r"\]\(([^)\s#]+\.md)(#[\w-]+)?\)")


def links(page: Path, base: str = "") -> set[tuple[str, str]]:
    """(page, anchor) of every Markdown link to a .md file, relative to docs/ when `base` is its prefix."""
    found = set()
    for target, anchor in LINK.findall(page.read_text()):
        if target.startswith(base):
            found.add((target[len(base):], anchor))
    return found


def linked_pages(page: Path, base: str = "") -> set[str]:
    return {target for target, _ in links(page, base)}


def headings(page: Path) -> set[str]:
    """MkDocs' anchors of a page's headings (toc's slugs; an explicit {#id} wins)."""
    found = set()
    for line in page.read_text().splitlines():
        if m := re.match(r"#{1,6} (.*?)(?: \{#([\w-]+)\})?$", line):
            found.add(m[2] or re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", m[1].lower())).strip("-"))
    return found


def test_there_are_pages_to_check():
    assert {"own-data.md", "tracking.md", "coming-from-the-trainer.md", "fault-tolerance.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_is_linked_from_the_docs_home_and_the_readme(page):
    assert page in linked_pages(DOCS / "index.md"), f"docs/index.md does not link {page}"
    assert page in linked_pages(REPO / "README.md", "docs/"), f"README.md does not link docs/{page}"


def test_resuming_a_run_has_its_heading_linked_from_both():
    assert "resuming-a-run" in headings(DOCS / "fault-tolerance.md")
    assert ("fault-tolerance.md", "#resuming-a-run") in links(DOCS / "index.md")
    assert ("fault-tolerance.md", "#resuming-a-run") in links(REPO / "README.md", "docs/")


def test_every_link_of_the_home_pages_leads_to_a_page_and_heading():
    for home, base in ((DOCS / "index.md", ""), (REPO / "README.md", "docs/")):
        for target, anchor in links(home, base):
            assert (DOCS / target).is_file(), f"{home.name} links {target}, which is not a page"
            if anchor:
                assert anchor[1:] in headings(DOCS / target), f"{home.name} links {target}{anchor}: no such heading"


def reference_hook():
    spec = importlib.util.spec_from_file_location("config_reference", DOCS / "hooks" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_configuration_reference_is_the_schemas():
    hook = reference_hook()
    page = (DOCS / "configuration.md").read_text()
    assert hook.MARKER in page and hook.END in page, "docs/configuration.md lost its reference markers"
    assert hook.with_reference(page) == page, \
        "docs/configuration.md's reference is not what workflow/schemas/config.schema.yaml gives: " \
        "run make config-reference and commit docs/configuration.md"
    assert "| `train.learning_rate` |" in page  # the tables are there, not only the markers
