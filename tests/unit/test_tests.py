"""The tests' own shape: files share helpers (tests/helpers/), never one
another's modules, and stay under 300 lines, split by behaviour."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MAX_LINES = 300


def names_of_test_modules() -> set[str]:
    return {p.stem for p in TESTS.rglob("test_*.py")} | {"conftest"}


def imported_modules(path: Path) -> set[str]:
    """Top-level names of every module a file imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found


def test_no_test_module_imports_another():
    names = names_of_test_modules()
    found = [f"{path.relative_to(TESTS)} imports {', '.join(sorted(imported_modules(path) & names))}"
             for path in sorted(TESTS.rglob("*.py")) if imported_modules(path) & names]
    assert found == [], "share it through tests/helpers/ instead"


def test_an_import_of_a_test_module_is_caught(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text("def f():\n    from test_workflow import tiny_experiment\n")
    assert imported_modules(path) & names_of_test_modules() == {"test_workflow"}


def test_test_files_are_short():
    long = {str(p.relative_to(TESTS)): n for p in sorted(TESTS.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by behaviour (at most {MAX_LINES} lines)"
