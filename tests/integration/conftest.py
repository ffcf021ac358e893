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


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory, tiny_model_dir):
    """A tiny MRPC, tokenized for the tiny model; (config, folder)."""
    import json

    from helpers.native_files import write_native
    from helpers.workflow import task_experiment
    from workflow.scripts.settings import config as cfg
    from workflow.scripts.data import load as data, tokenize as tokenize_data

    work = tmp_path_factory.mktemp("tokenized")
    config = cfg.validate(task_experiment("mrpc", tiny_model_dir, write_native("mrpc", work / "files", 48, 16)))
    conf = work / "config.json"
    conf.write_text(json.dumps(config))
    data.main(["--config", str(conf), "--out", str(work / "raw")])
    tokenize_data.main(["--config", str(conf), "--data", str(work / "raw"), "--out", str(work / "tok")])
    return config, work / "tok"


@pytest.fixture
def one_rank(monkeypatch):
    """Rank 0 of a one-rank gloo group in this process."""
    from helpers.ranks import single_rank

    single_rank(monkeypatch)


@pytest.fixture
def mpi_path(monkeypatch):
    """The Intel MPI installed in the venv, first on PATH."""
    import os

    from helpers.workflow import BIN

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")


@pytest.fixture(scope="session")
def long_reference(tmp_path_factory, tiny_model_dir) -> str:
    """The weights digest of helpers.faults.long_experiment run uninterrupted
    (200 steps): what every fault test's resumed run must end with. Trained
    once per test run: the pytest-xdist workers share it through their
    common base folder, under a lock (the tiny model is seeded: one digest)."""
    import json
    import os

    from filelock import FileLock

    from helpers.faults import RUN, digest, long_experiment
    from helpers.workflow import snakemake

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the parent is this run's alone
    known = shared / "long-reference.sha256"
    with FileLock(shared / "long-reference.lock"):
        if not known.exists():
            work = tmp_path_factory.mktemp("long-reference")
            snakemake(work, long_experiment(work, tiny_model_dir), str(RUN / "train_metrics.json"))
            metrics = json.loads((work / RUN / "train_metrics.json").read_text())
            assert metrics["resumed_from_step"] is None and metrics["steps"] == 200
            assert not (work / RUN / "checkpoints").exists()  # removed once the model is saved
            known.write_text(digest(work))
        return known.read_text()
