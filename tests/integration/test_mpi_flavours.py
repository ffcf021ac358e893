"""Every MPI the workflow supports starts real ranks: Intel MPI (impi-rt in
the venv), MPICH and Open MPI (Debian's mpich / openmpi-bin, `make ci-deps`).

Each flavour is chosen the way a user would: Intel MPI by `mpi: auto` with
the venv first on PATH, MPICH by `mpi: mpich` (Debian's mpirun.mpich), Open
MPI by `mpi: auto` with a folder holding `mpirun -> mpirun.openmpi` first on
the user's PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers.workflow import BIN, REPO, write_config
from helpers.workflow import tiny_experiment
from workflow.scripts.settings import config as cfg
from workflow.scripts.launch import __main__ as launch_cli
from workflow.scripts.launch import mpi, pin
from workflow.scripts.nodes import check
from workflow.scripts.settings.views import EnvironmentView

DEBIAN = {"mpich": "/usr/bin/mpirun.mpich", "openmpi": "/usr/bin/mpirun.openmpi"}
FLAVOURS = ["intel", *(pytest.param(f, marks=pytest.mark.cluster) for f in DEBIAN)]  # Debian's: make ci-deps


def require(flavour: str) -> None:
    if flavour in DEBIAN and not os.access(DEBIAN[flavour], os.X_OK):
        message = f"{DEBIAN[flavour]} missing: run `make ci-deps` (Debian packages mpich, openmpi-bin)"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs them: a skip there would hide the gap
        pytest.skip(message)


def user_path(flavour: str, tmp_path: Path) -> str:
    """The PATH a user would run Snakemake with to pick `flavour`."""
    if flavour == "openmpi":
        folder = tmp_path / "openmpi-bin"
        folder.mkdir(exist_ok=True)
        if not (folder / "mpirun").exists():
            (folder / "mpirun").symlink_to(DEBIAN["openmpi"])
        return f"{folder}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"
    return f"{BIN}{os.pathsep}{os.environ['PATH']}"


def requested(flavour: str) -> str:
    return "mpich" if flavour == "mpich" else "auto"


PROGRAM = ("import os, sys, json; from pathlib import Path; from workflow.scripts.launch import ranks as dist_env; "
           "e = dist_env.read(); Path(sys.argv[1], f'rank{e.rank}').write_text(json.dumps("
           "[e.world_size, e.local_rank, os.environ['OMP_NUM_THREADS'], os.environ['EVIL'], "
           "sorted(os.sched_getaffinity(0))]))")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_two_ranks_pinned_with_their_environment(flavour, tmp_path, monkeypatch):
    require(flavour)
    monkeypatch.setenv("PATH", user_path(flavour, tmp_path))
    monkeypatch.setenv(mpi.USER_PATH, user_path(flavour, tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    evil = f"a b;touch {tmp_path}/pwned $(id)"
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m", "train": {"precision": "fp32"},
                           "distributed": {"backend": "gloo", "mpi": requested(flavour), "processes_per_node": 2,
                                           "threads_per_process": 1, "env": {"EVIL": evil}}})
    info = check.check(EnvironmentView.pick(config), 60)
    assert info["mpi"]["flavour"] == flavour
    config_path, env_path, out = tmp_path / "config.json", tmp_path / "environment.json", tmp_path / "ranks"
    config_path.write_text(json.dumps(config))
    env_path.write_text(json.dumps(info))
    out.mkdir()
    launch_cli.main(["--config", str(config_path), "--environment", str(env_path), "--",
                 sys.executable, "-c", PROGRAM, str(out)])
    ranks = [json.loads((out / f"rank{r}").read_text()) for r in (0, 1)]
    assert [r[:4] for r in ranks] == [[2, 0, "1", evil], [2, 1, "1", evil]]
    sockets = pin.physical_cores()
    for local_rank, rank in enumerate(ranks):
        expected = pin.rank_cpus(local_rank, 2, 1, sockets)
        assert rank[4] == sorted(expected or os.sched_getaffinity(0))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("flavour", ["mpich", "openmpi"])  # Intel MPI: tests/integration/test_workflow.py
def test_two_rank_training_through_the_workflow(flavour, tmp_path, tiny_model_dir, monkeypatch):
    require(flavour)
    configfile = tiny_experiment(tmp_path, tiny_model_dir, epochs=1)
    config = yaml.safe_load(configfile.read_text())
    config["distributed"]["mpi"] = requested(flavour)
    write_config(configfile, config)
    target = "results/tiny/default/train_metrics.json"
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
            "--profile", str(REPO / "profiles" / "local"), "--cores", "2", target, "--configfile", str(configfile)]
    env = {**os.environ, "PATH": user_path(flavour, tmp_path), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    env = json.loads((tmp_path / "results/tiny/default/environment.json").read_text())
    assert env["mpi"]["flavour"] == flavour and env["mpi"]["mpirun"] == os.path.realpath(DEBIAN[flavour])
    metrics = json.loads((tmp_path / target).read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 6
    assert len({r["weights_sha256"] for r in metrics["ranks"]}) == 1
    launched = (tmp_path / "logs/train_ddp/tiny/default.log").read_text()
    assert f"launch: {os.path.realpath(DEBIAN[flavour])} -n 2" in launched


@pytest.mark.cluster
def test_flavours_do_not_mix(tmp_path, monkeypatch):
    """A symlinked MPICH mpirun is launched by its real path (its own
    hydra_pmi_proxy), never through the venv's Intel MPI proxy."""
    require("mpich")
    link = tmp_path / "bin"
    link.mkdir()
    (link / "mpirun").symlink_to(DEBIAN["mpich"])
    monkeypatch.setenv(mpi.USER_PATH, str(link))
    found = mpi.detect_mpi()
    assert found["flavour"] == "mpich" and found["mpirun"] == os.path.realpath(DEBIAN["mpich"])
    folder = Path(found["mpirun"]).parent
    assert folder != BIN and shutil.which("hydra_pmi_proxy", path=str(folder))
