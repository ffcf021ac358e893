"""Launching ranks: the addresses and environment each rank gets, and real
launches through every MPI found here.
"""

import json
import sys
from pathlib import Path

import pytest

from workflow.scripts.settings import config as cfg
from workflow.scripts.nodes import describe as environment
from workflow.scripts.launch import __main__ as launch_cli
from workflow.scripts.launch import command as launch
from workflow.scripts.launch import hosts
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import DistributedSettings, EnvironmentView

def test_master_addr():
    assert launch.master_addr(None) == "127.0.0.1"
    assert launch.master_addr(["localhost", "other"]) == "127.0.0.1"


def test_master_addr_unresolvable():
    with pytest.raises(UserError, match="no-such-node.invalid"):
        launch.master_addr(["no-such-node.invalid"])


def test_free_port_is_usable():
    port = launch.free_port()
    assert 0 < port < 65536


INFO = {"threads_per_process": 6, "mpi": {"flavour": "intel"}, "backend": "gloo"}


def test_rank_env():
    env = launch.rank_env(INFO, {}, "10.0.0.1", 29500)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "6"
    assert env["MASTER_ADDR"] == "10.0.0.1"
    assert env["MASTER_PORT"] == "29500"
    assert env["I_MPI_PIN_DOMAIN"] == "omp"
    assert "CCL_WORKER_COUNT" not in env
    assert all(isinstance(v, str) for v in env.values())


def test_rank_env_user_extras_override():
    env = launch.rank_env(INFO, {"OMP_NUM_THREADS": 1, "KMP_AFFINITY": "granularity=fine"}, "h", 1)
    assert env["OMP_NUM_THREADS"] == "1"
    assert env["KMP_AFFINITY"] == "granularity=fine"


def test_rank_env_openmpi_ccl():
    env = launch.rank_env({**INFO, "mpi": {"flavour": "openmpi"}, "backend": "ccl"}, {}, "h", 1)
    assert "I_MPI_PIN_DOMAIN" not in env
    assert env["CCL_WORKER_COUNT"] == "1"


def test_build_with_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost:2\nlocalhost\nunused\n")
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m",
                           "distributed": {"hostfile": str(hostfile), "nodes": 2, "processes_per_node": 3,
                                           "launcher_args": ["-iface", "eth1"]}})
    info = {**INFO, "mpi": {"flavour": "mpich", "mpirun": "/x/mpirun"}}
    argv = launch.build(DistributedSettings.of(config["distributed"]), info, ["prog"], tmp_path)
    # the launcher gets its own hostfile: the first `nodes` hosts, ppn slots each
    assert argv[:7] == ["/x/mpirun", "-n", "6", "-ppn", "3", "-f", str(tmp_path / "hostfile")]
    assert (tmp_path / "hostfile").read_text() == "localhost:3\nlocalhost:3\n"
    genv = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-genv"}
    assert genv["MASTER_ADDR"] == "127.0.0.1"
    assert genv["OMP_NUM_THREADS"] == "6"
    assert launch.is_local_address("127.0.0.1") and 0 < int(genv["MASTER_PORT"]) < 65536
    # launcher options, then each rank binds itself to its cores and runs the program
    assert argv[-9:] == ["-iface", "eth1", sys.executable, "-m", "workflow.scripts.launch.pin",
                         "--threads", "6", "--", "prog"]


def test_openmpi_hostfile_syntax(tmp_path):
    path = launch.write_hostfile("openmpi", ["a", "b"], 2, tmp_path)
    assert path.read_text() == "a slots=2\nb slots=2\n"


def test_master_port_of_a_remote_first_node():
    assert not launch.is_local_address("192.0.2.1")  # TEST-NET-1: never on this machine
    assert 29500 <= launch.master_port("192.0.2.1") < 30500


def test_gloo_interface_only_across_nodes():
    info = {**INFO, "gloo_ifname": "eth1", "nodes": 2}
    assert launch.rank_env(info, {}, "h", 1)["GLOO_SOCKET_IFNAME"] == "eth1"
    assert "GLOO_SOCKET_IFNAME" not in launch.rank_env({**info, "nodes": 1}, {}, "h", 1)
    assert launch.rank_env(info, {"GLOO_SOCKET_IFNAME": "ib0"}, "h", 1)["GLOO_SOCKET_IFNAME"] == "ib0"


def test_srun_argv():
    argv = launch.srun_argv(2, 4, 8, ["prog"], ["--mpi=pmi2"])
    assert argv == ["srun", "--nodes=2", "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=8",
                    "--cpu-bind=cores", "--kill-on-bad-exit=1", "--mpi=pmi2", "prog"]


def test_build_srun_passes_the_environment_through_srun(monkeypatch):
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m",
                           "distributed": {"launcher": "srun", "nodes": 2, "processes_per_node": 2,
                                           "threads_per_process": 4, "env": {"A": "b c"}}})
    info = {**INFO, "threads_per_process": 4, "mpi": {"flavour": "slurm"}}
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    dist = DistributedSettings.of(config["distributed"])
    argv = launch.build(dist, info, ["prog"])
    assert argv[0] == "srun" and "--ntasks=4" in argv and argv[-1] == "prog"
    env = launch.launch_env(dist, info)
    assert env["OMP_NUM_THREADS"] == "4" and env["A"] == "b c" and env["MASTER_ADDR"]
    # one rank inside Snakemake's own job step: no second srun
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    single = cfg.validate({**config, "distributed": {**config["distributed"], "nodes": 1, "processes_per_node": 1}})
    assert launch.build(DistributedSettings.of(single["distributed"]), info, ["prog"]) == ["prog"]


def test_min_nodes_under_slurm_keeps_the_allocation_and_warns(capsys):
    """The Slurm plugin cannot ask for a range of nodes: a retry under srun
    keeps `nodes` (Slurm picks them) and says that min_nodes does not apply."""
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m",
                           "distributed": {"launcher": "srun", "nodes": 2, "min_nodes": 1,
                                           "threads_per_process": 1}})
    assert hosts.for_retry(DistributedSettings.of(config["distributed"])) == (None, [])
    assert "distributed.min_nodes does not apply under Slurm" in capsys.readouterr().err


# ---------------------------------------------------------------- real runs

RANK_PROGRAM = (
    "import os, sys; from pathlib import Path; "
    "Path(sys.argv[1], 'rank' + os.environ['PMI_RANK']).write_text("
    "os.environ['OMP_NUM_THREADS'] + '|' + os.environ['EVIL'] + '|' + os.environ['PMI_SIZE'])"
)


@pytest.fixture
def run_files(tmp_path, mpi_path, monkeypatch):
    """A run's config JSON and environment.json, 2 ranks of 3 threads."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    evil = f"a b;touch {tmp_path}/pwned"
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m",
                           "train": {"precision": "fp32"},
                           "distributed": {"backend": "gloo", "processes_per_node": 2, "threads_per_process": 3,
                                           "env": {"EVIL": evil}}})
    view = EnvironmentView.pick(config)
    info = environment.describe(view.distributed, view.train)
    config_path, env_path = tmp_path / "config.json", tmp_path / "environment.json"
    config_path.write_text(json.dumps(config))
    env_path.write_text(json.dumps(info))
    return ["--config", str(config_path), "--environment", str(env_path)], evil


def test_real_two_rank_launch(run_files, tmp_path):
    args, evil = run_files
    out = tmp_path / "ranks"
    out.mkdir()
    launch_cli.main([*args, "--", sys.executable, "-c", RANK_PROGRAM, str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["rank0", "rank1"]
    for rank in ("rank0", "rank1"):
        assert (out / rank).read_text() == f"3|{evil}|2"
    assert not (tmp_path / "pwned").exists()


def test_failing_rank_raises(run_files):
    args, _ = run_files
    with pytest.raises(UserError, match="exit code"):
        launch_cli.main([*args, "--", sys.executable, "-c", "import sys; sys.exit(3)"])


def test_loopback_first_node_of_a_real_cluster_is_flagged(capsys):
    assert launch.master_addr(["localhost", "node2"]) == "127.0.0.1"
    assert "other nodes cannot reach" in capsys.readouterr().err
    launch.master_addr(["localhost", "localhost"])  # one machine listed twice: fine
    assert capsys.readouterr().err == ""
