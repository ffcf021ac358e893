"""No config value reaches a shell unquoted: every placeholder in a rule's
`shell:` line is quoted (`:q`), except the integers Snakemake computes
itself ({threads}, {resources.*}). f-strings are refused too, since they put
a value into the command before Snakemake could quote it."""

from __future__ import annotations

import ast
import string
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]


def shell_commands(path: Path) -> list[tuple[int, ast.expr]]:
    """(line, parsed expression) of every `shell:` directive of a rule file."""
    lines, found = path.read_text().splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() != "shell:":
            continue
        indent, body = len(line) - len(line.lstrip()), []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        found.append((i + 1, ast.parse("(\n" + "\n".join(body) + "\n)", mode="eval").body))
    return found


def unsafe_fields(command: ast.expr) -> list[str]:
    """The placeholders a shell would read unquoted (or why the command cannot be checked)."""
    if not (isinstance(command, ast.Constant) and isinstance(command.value, str)):
        return [f"not a plain string ({type(command).__name__}): pass values through params and quote them"]
    bad = []
    for _, field, spec, _ in string.Formatter().parse(command.value):
        if field is None or (spec or "").endswith("q"):
            continue
        if field == "threads" or field.startswith("resources."):  # integers Snakemake computes
            continue
        bad.append("{" + field + (":" + spec if spec else "") + "}")
    return bad


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_every_shell_placeholder_is_quoted(path):
    unsafe = [f"{path.name}:{line}: {field}" for line, command in shell_commands(path)
              for field in unsafe_fields(command)]
    assert not unsafe, "unquoted in a shell: line (add :q): " + ", ".join(unsafe)


def test_the_rule_files_have_shell_lines_to_check():
    assert sum(len(shell_commands(p)) for p in RULE_FILES) >= 15


@pytest.mark.parametrize("command, unsafe", [
    ('"x {params.model} {input.cfg:q}"', ["{params.model}"]),
    ('"x {params.settings[train]} {log}"', ["{params.settings[train]}", "{log}"]),
    ('"x {params.settings[train]:q} {log:q} {threads} {resources.attempt}"', []),
    ('"x {wildcards.run} {config[model]}"', ["{wildcards.run}", "{config[model]}"]),
    ('f"x {RESULTS}"', ["not a plain string (JoinedStr): pass values through params and quote them"]),
])
def test_the_check_finds_unquoted_placeholders(command, unsafe):
    assert unsafe_fields(ast.parse(command, mode="eval").body) == unsafe
