"""mk/cpu_by_test.py names each recorded process by what it was and by its test."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location("cpu_by_test", Path(__file__).resolve().parents[2] / "mk/cpu_by_test.py")
cpu_by_test = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cpu_by_test)


def test_a_process_is_named_by_its_step_or_program():
    assert cpu_by_test.kind(["/repo/workflow/scripts/train/rank.py", "--config", "c"]) == "train.rank"
    assert cpu_by_test.kind(["/repo/workflow/scripts/launch/__main__.py", "--config"]) == "launch"
    assert cpu_by_test.kind(["/venv/bin/snakemake", "--snakefile", "S"]) == "snakemake"
    assert cpu_by_test.kind(["-c"]).startswith("python -c")
    assert cpu_by_test.kind(["/venv/lib/python3.11/site-packages/pytest/__main__.py"]) == "pytest"


def test_a_process_is_counted_under_the_test_that_started_it():
    current = "tests/unit/test_cpu_tables.py::test_y[a b] (call)"
    assert cpu_by_test.test_name(current) == "test_cpu_tables.py::test_y[a b]"
    assert cpu_by_test.test_name("").startswith("(outside a test")


def test_the_tables_add_up_cpu_and_processes_costliest_first():
    lines = [{"argv": ["a"], "cpu": 1.0, "torch._dynamo": False}, {"argv": ["b"], "cpu": 3.0, "torch._dynamo": True},
             {"argv": ["a"], "cpu": 1.5, "torch._dynamo": True}]
    assert cpu_by_test.table(lines, lambda line: line["argv"][0]) == [("b", 1, 3.0, 1), ("a", 2, 2.5, 1)]


def test_a_program_is_named_by_itself_not_by_the_test_folders_in_its_arguments():
    assert cpu_by_test.kind(["-c", "/tmp/pytest-of-root/pytest-3/x0/.snakemake"]).startswith("python -c")
    assert cpu_by_test.kind(["/usr/bin/ovc", "/tmp/pytest-of-root/p/workflow/scripts/x"]) == "ovc"
    assert cpu_by_test.test_name("tests/integration/test_x.py::test_y[a/b] (setup)") == "test_x.py::test_y[a/b]"


def test_the_timeline_gives_each_minute_its_busy_cores_and_the_tests_alive_then():
    lines = [{"test": "tests/integration/test_a.py::t (call)", "start": 0.0, "end": 90.0},
             {"test": "tests/integration/test_b.py::u (call)", "start": 70.0, "end": 130.0}]
    busy = [(0.0, 2.0), (30.0, 1.0), (60.0, 0.5), (125.0, 0.0)]
    rows = cpu_by_test.timeline(lines, busy)
    assert [(minute, cores) for minute, cores, _ in rows] == [(0, 1.5), (1, 0.5), (2, 0.0)]
    assert rows[1][2] == ["test_b.py::u", "test_a.py::t"]  # 50 s alive before 30 s
    assert rows[2][2] == ["test_b.py::u"]
    assert cpu_by_test.timeline(lines, []) == []
