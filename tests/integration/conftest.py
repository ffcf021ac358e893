"""Fixtures of the integration lane, built on tests/helpers/. Their scopes
are those they had in the files that used them: a module-scoped fixture
starts once per test file (pytest-xdist runs a whole file on one worker)."""

from __future__ import annotations

import pytest

from helpers import sweep
from helpers.learned import train_learned


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Slurm test cluster of this file's own (test_slurm.py, test_slurm_time_limit.py)."""
    from helpers import slurm_run  # root-only tools: imported by the files that use them

    yield from slurm_run.start_cluster(tmp_path_factory)


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory, tiny_model_dir):
    """(work folder, experiment file) of the sweep, run once per test process."""
    return sweep.sweep_workdir(tmp_path_factory, tiny_model_dir)


@pytest.fixture(scope="module")
def learned(tmp_path_factory, tiny_model_dir):
    """A tiny BERT trained in-process on a learnable task, and its data (a folder per file)."""
    return train_learned(tmp_path_factory.mktemp("learned"), tiny_model_dir)
