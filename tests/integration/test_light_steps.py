"""Steps that only read, copy or launch start without importing torch or
transformers (about 5-9 s a process on a 2-core VM, paid by every job of
every run): the launcher, the node check, the deploy step, the quantize
step up to its decision (auto on a CPU without VNNI or AMX stops there)
and the report. A rank and the evaluate step import neither datasets nor
pandas (2 s a process: they read saved splits with pyarrow,
data/arrow_split.py). Scoring (every evaluating process, ranks included) imports
neither scikit-learn nor scipy (2-4 s a process)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.workflow import REPO

HEAVY = ("torch", "transformers", "datasets", "openvino")
LIGHT_STEPS = ("workflow.scripts.launch", "workflow.scripts.nodes.check", "workflow.scripts.infer.deploy",
               "workflow.scripts.infer.quantize", "workflow.scripts.report.summary", "workflow.scripts.report.render")


def imported(code: str, packages) -> str:
    """Which of `packages` a fresh interpreter holds after running `code`."""
    probe = f"import sys; {code}; print(' '.join(m for m in {tuple(packages)!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


@pytest.mark.parametrize("module", LIGHT_STEPS)
def test_a_light_step_imports_no_heavy_package(module):
    found = imported(f"import {module}", HEAVY)
    assert found == "", f"{module} imports {found} at start-up"


def test_scoring_imports_neither_scikit_learn_nor_scipy():
    found = imported("from workflow.scripts.data.metrics import glue_metrics; "
                     "[glue_metrics(t, p, p) for t, p in (('mrpc', [0, 1]), ('cola', [0, 1]), ('stsb', [0.5, 1.0]))]",
                     ("sklearn", "scipy"))
    assert found == "", f"scoring imports {found}"


@pytest.mark.parametrize("module", ("workflow.scripts.train.rank", "workflow.scripts.infer.evaluate"))
def test_a_reader_of_saved_splits_imports_neither_datasets_nor_pandas(module):
    found = imported(f"import {module}", ("datasets", "pandas"))
    assert found == "", f"{module} imports {found} at start-up"
