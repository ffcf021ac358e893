"""Every page a message, the schema, config.yaml or a make file points to
exists: `docs/<page>.md` (with `, Section` or `#anchor`: one of its headings)
and `README, Section` (one of the README's headings); a "see <file>" names
a docs page. Files only, no processes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ["Makefile", "config.yaml", *sorted(str(p.relative_to(REPO)) for p in (REPO / "mk").rglob("*")
                                         if p.is_file() and "__pycache__" not in p.parts),
           *sorted(str(p.relative_to(REPO)) for p in (REPO / "workflow").rglob("*")
                   if p.suffix in (".py", ".smk", ".yaml", ".rst", ".md") and "__pycache__" not in p.parts)]
DOCS = re.compile(r"\bdocs/([\w-]+\.md)(#[\w-]+)?(?:, (.{1,120}))?")
README = re.compile(r"\bREADME, (.{1,120})")
SEE_FILE = re.compile(r"\bsee ([\w./-]+\.(?:py|md|smk|yaml|rst))\b", re.IGNORECASE)


def flat(text: str) -> str:
    """One line per file: adjacent string literals joined, line breaks and comment markers gone."""
    text = re.sub(r"[\"']\s*\n?\s*[rf]{0,2}[\"']", "", text)
    return re.sub(r"\s*\n\s*(?:#+\s*)?", " ", text)


def norm(text: str) -> str:
    return text.replace("`", "").strip().lower()


def headings(page: Path) -> list[str]:
    return [norm(line.lstrip("#")) for line in page.read_text().splitlines() if re.match(r"#{1,6} ", line)]


def slug(heading: str) -> str:
    """MkDocs' anchor of a heading."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading)).strip("-")


def names_a_heading(section: str, found: list[str]) -> bool:
    """`section` (what follows "page, ") starts with a heading, or is the start of one."""
    text = norm(section)
    cut = norm(re.split(r"[);\"]|\. |\.$", section)[0])
    return any(text.startswith(h) or (cut and h.startswith(cut)) for h in found)


def references() -> list[tuple[str, str, str | None, str | None]]:
    found = []
    for name in SCANNED:
        text = flat((REPO / name).read_text(errors="replace"))
        found += [(name, f"docs/{m[1]}", m[2], m[3]) for m in DOCS.finditer(text)]
        found += [(name, "README.md", None, m[1]) for m in README.finditer(text)]
    return found


def test_the_scan_sees_the_references():
    assert len(references()) > 20


@pytest.mark.parametrize("source, page, anchor, section", references())
def test_reference_names_an_existing_page_and_heading(source, page, anchor, section):
    path = REPO / page
    assert path.is_file(), f"{source} points to {page}, which does not exist"
    found = headings(path)
    if anchor:
        assert anchor[1:] in {slug(h) for h in found}, f"{source}: {page}{anchor} is no heading of {page}"
    # Plain prose after a comma ("docs/x.md, which ...") is no section: only capitalized text is checked.
    if section and (page == "README.md" or section[:1].isupper()):
        assert names_a_heading(section, found), f"{source}: '{page}, {section[:50]}' names no heading of {page}"


def test_see_names_a_docs_page():
    wrong = [(name, m[1]) for name in SCANNED for m in SEE_FILE.finditer(flat((REPO / name).read_text()))
             if not m[1].startswith("docs/")]
    assert wrong == []
