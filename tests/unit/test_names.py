"""Names point to what exists: a docstring, comment or message in
workflow/, bench/, mk/ or requirements*.txt that names a repository path
(`workflow/scripts/x.py`, `tests/...`, `docs/x.md`, or `train/x.py` relative
to workflow/scripts) names a file or folder that is there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "workflow" / "scripts"
STAGES = tuple(sorted(p.name for p in SCRIPTS.iterdir() if (p / "__init__.py").is_file()))
TOP = ("workflow", "tests", "docs", "bench", "mk", "profiles", "experiments", "envs")
# A path starts a word (not the tail of results/<x>/data/...) and ends on a word character.
PATH = re.compile(r"(?<![\w./~-])((?:" + "|".join(TOP + STAGES) + r")/[\w./-]*\w)")
SUFFIXES = (".py", ".smk", ".sh", ".mk", ".yaml", ".md")


def scanned() -> list[Path]:
    files = [p for top in ("workflow", "bench", "mk") for p in sorted((REPO / top).rglob("*"))
             if p.is_file() and p.suffix in SUFFIXES]
    return files + sorted(REPO.glob("requirements*.txt"))


def exists(path: str) -> bool:
    """A top-level path from the repository, a stage's module from workflow/scripts."""
    if path.split("/")[0] in TOP:
        return (REPO / path).exists()
    return not path.endswith(".py") or (SCRIPTS / path).exists()  # data/dev.tsv is a user's file


def missing_paths(text: str) -> list[str]:
    return [m.group(1) for m in PATH.finditer(text) if not exists(m.group(1))]


def test_named_paths_exist():
    stale = [f"{path.relative_to(REPO)}:{number}: {name}" for path in scanned()
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             for name in missing_paths(line)]
    assert stale == []


def test_a_stale_name_is_caught():
    assert missing_paths("measured (train/profile.py); charts in workflow/scripts/plots.py") == [
        "train/profile.py", "workflow/scripts/plots.py"]
    assert missing_paths("plan/profile.py, tests/unit, docs/performance.md, results/x/data/a.py, data/dev.tsv") == []
