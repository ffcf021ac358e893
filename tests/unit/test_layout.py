"""The code's shape: stage packages without import circles, entry points one
hop from their rules, short modules and functions, and the schema's enums
drawn from the task table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from workflow.scripts.common import tasks
from workflow.scripts.data.readers import FORMATS

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "workflow" / "scripts"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 50


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of workflow.scripts."""
    found = {}
    for path in sorted(SCRIPTS.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: Path, known: dict) -> set[str]:
    """The workflow.scripts modules a module imports (at any depth)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workflow.scripts"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
    return found - {"workflow.scripts"}


def is_entry(path: Path) -> bool:
    """A module run with `python -m`: it ends in `if __name__ == "__main__":`."""
    body = ast.parse(path.read_text()).body
    return path.name == "__main__.py" or any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in body)


def test_no_import_circle():
    known = modules()
    graph = {name: imports(path, known) for name, path in known.items()}
    state: dict[str, str] = {}

    def visit(name, trail):
        state[name] = "open"
        for dep in sorted(graph.get(name, ())):
            assert state.get(dep) != "open", "import circle: " + " -> ".join([*trail, name, dep])
            if dep not in state:
                visit(dep, [*trail, name])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [])


# Which stage packages each imports: the stages run down this table, never
# back up it (a rule's code may use what earlier stages provide, not the
# reverse); `common` holds the leaves that several stages share. It lists
# exactly the ties that exist: an unused one fails too, so that the table
# (and docs/architecture.md, checked against it) says what the code does.
ALLOWED_STAGE_IMPORTS = {
    "common": set(),
    "settings": {"common"},
    "probes": {"common"},
    "launch": {"common", "settings", "probes"},
    "nodes": {"common", "settings", "probes", "launch"},
    "data": {"common", "settings"},
    "train": {"common", "settings", "probes", "launch", "nodes", "data"},
    "infer": {"common", "settings", "probes", "data"},
    "report": {"common", "settings"},
    "plan": {"common", "settings", "probes", "launch", "nodes", "data", "train", "report"},
}
# The package itself (workflow/scripts/__init__.py) runs first in every
# program: it may use the leaves in common, no stage.
ROOT_IMPORTS = {"common"}
ARCHITECTURE = REPO / "docs" / "architecture.md"


def stage_of(module: str) -> str | None:
    return module.split(".")[2] if module.count(".") >= 2 else None


def allowed_imports(module: str) -> set[str]:
    return ROOT_IMPORTS if module == "workflow.scripts" else ALLOWED_STAGE_IMPORTS.get(stage_of(module), set())


def wrong_way_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every import from one stage package to another that the table does not allow."""
    return [f"{name} imports {dep}: stage {stage_of(name)} may import only "
            f"{', '.join(sorted(allowed_imports(name))) or 'nothing'}"
            for name, deps in sorted(graph.items()) for dep in sorted(deps)
            if stage_of(dep) not in (stage_of(name), None) and stage_of(dep) not in allowed_imports(name)]


def stage_ties(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """stage -> the other stages its modules import."""
    ties: dict[str, set[str]] = {stage: set() for stage in ALLOWED_STAGE_IMPORTS}
    for name, deps in graph.items():
        for dep in deps:
            if stage_of(dep) not in (stage_of(name), None):
                ties.setdefault(stage_of(name), set()).add(stage_of(dep))
    return ties


def test_stages_import_down_the_table_only():
    known = modules()
    graph = {name: imports(path, known) for name, path in known.items()}
    assert set(ALLOWED_STAGE_IMPORTS) == {stage_of(name) for name in known if stage_of(name)}
    assert wrong_way_imports(graph) == []
    unused = {stage: sorted(allowed - stage_ties(graph)[stage]) for stage, allowed in ALLOWED_STAGE_IMPORTS.items()}
    assert {stage: ties for stage, ties in unused.items() if ties} == {}, "allowed ties nothing uses"


def test_every_tie_between_stages_points_one_way():
    order = list(ALLOWED_STAGE_IMPORTS)  # each stage imports only stages listed before it
    back = [f"{stage} -> {dep}" for stage, deps in ALLOWED_STAGE_IMPORTS.items() for dep in deps
            if order.index(dep) >= order.index(stage)]
    assert back == []


def stages_sentence(table: dict[str, set[str]]) -> str:
    """The table in words, as docs/architecture.md states it."""
    def says(stage, deps):
        if not deps:
            return f"`{stage}` imports nothing of the others"
        named = [f"`{d}`" for d in table if d in deps]
        return f"`{stage}` imports " + (", ".join(named[:-1]) + " and " if len(named) > 1 else "") + named[-1]
    return "Stages import only down this order: " + "; ".join(says(s, d) for s, d in table.items()) + "."


def test_architecture_page_states_the_table():
    page = " ".join(ARCHITECTURE.read_text().split())
    assert stages_sentence(ALLOWED_STAGE_IMPORTS) in page, stages_sentence(ALLOWED_STAGE_IMPORTS)


def test_an_import_back_up_the_stages_is_caught():
    graph = {"workflow.scripts.launch.hosts": {"workflow.scripts.nodes.reach", "workflow.scripts.settings.views"}}
    assert wrong_way_imports(graph) == ["workflow.scripts.launch.hosts imports workflow.scripts.nodes.reach: "
                                        "stage launch may import only common, probes, settings"]


def test_no_module_imports_another_stage_entry_point():
    known = modules()
    for name, path in known.items():
        stage = name.split(".")[2] if name.count(".") >= 2 else None
        for dep in imports(path, known):
            dep_stage = dep.split(".")[2] if dep.count(".") >= 2 else None
            if dep_stage != stage and dep in known and is_entry(known[dep]):
                raise AssertionError(f"{name} imports {dep}, the entry point of stage {dep_stage}")


def test_every_stage_is_a_package_with_a_rule_file():
    packages = sorted(p.name for p in SCRIPTS.iterdir() if (p / "__init__.py").is_file())
    assert packages == ["common", "data", "infer", "launch", "nodes", "plan", "probes", "report", "settings", "train"]
    assert not list(SCRIPTS.glob("*.py")) or [p.name for p in SCRIPTS.glob("*.py")] == ["__init__.py"]
    rules = {p.stem for p in (REPO / "workflow" / "rules").glob("*.smk")}
    assert {"data", "train", "infer", "nodes", "report", "plan"} <= rules


def test_rules_run_modules_that_exist():
    known = modules()
    for rule_file in (REPO / "workflow" / "rules").glob("*.smk"):
        for module in re.findall(r"python -m (workflow\.scripts\.[\w.]+)", rule_file.read_text()):
            assert module in known, f"{rule_file.name} runs {module}, which does not exist"


def test_modules_and_functions_are_short():
    too_long = []
    for name, path in modules().items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert not too_long, too_long


def test_schema_enums_come_from_the_task_table():
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    props = schema["properties"]
    assert props["task"]["enum"] == list(tasks.TASKS)
    assert props["data"]["properties"]["format"]["enum"] == list(FORMATS)
    every_format = {f for name in tasks.TASKS for f in tasks.formats_for(tasks.get_task(name), qa_columns=True)}
    assert every_format == set(FORMATS)


def test_the_steps_never_import_the_rule_files_own_python():
    """workflow/helpers serves the Snakefile and rule files alone (docs/architecture.md): a step
    importing it would tie the steps to the workflow's parsing."""
    wrong = [f"{name} imports workflow.helpers" for name, path in modules().items()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workflow.helpers")
             or isinstance(node, ast.Import) and any(a.name.startswith("workflow.helpers") for a in node.names)]
    assert wrong == []
