"""A step started with `python -m workflow.scripts...` loads its modules with
the garbage collector off and collects again once run_cli starts its main
(workflow/scripts/__init__.py); imported any other way, nothing changes."""

from __future__ import annotations

import gc
import importlib
import sys

import pytest

import workflow.scripts
from workflow.scripts.common.errors import run_cli


@pytest.fixture
def collector():
    yield
    gc.unfreeze()
    gc.enable()


def reload_as(argv0: str, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", [argv0])
    importlib.reload(workflow.scripts)


def test_started_with_m_loads_without_collecting_and_main_collects(monkeypatch, collector):
    reload_as("-m", monkeypatch)
    assert not gc.isenabled()  # while the step's modules load
    seen = []
    run_cli(lambda argv: seen.append((gc.isenabled(), gc.get_freeze_count())))
    (enabled, frozen), = seen
    assert enabled and frozen > 0  # the loaded modules' objects are out of later collections


def test_imported_by_a_test_or_the_bench_changes_nothing(monkeypatch, collector):
    reload_as("pytest", monkeypatch)
    assert gc.isenabled()
    run_cli(lambda argv: None)
    assert gc.get_freeze_count() == 0


def test_every_entry_point_turns_the_collector_back_on():
    """A module run with -m that never reached program_loaded() would run with the collector off."""
    from pathlib import Path

    scripts = Path(workflow.scripts.__file__).parent
    mains = {path: path.read_text().partition('if __name__ == "__main__":')[2] for path in scripts.rglob("*.py")}
    mains = {path: block for path, block in mains.items() if block}
    assert len(mains) > 20
    turned_on = ("run_cli(", "step.entry(", "program_loaded()", "gc.enable()")
    assert [str(p.relative_to(scripts)) for p, block in mains.items() if not any(t in block for t in turned_on)] == []
