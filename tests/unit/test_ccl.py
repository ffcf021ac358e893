"""The oneCCL path without oneCCL: what cpuddp sets for ccl ranks, and the
bindings' source build refusing a missing or altered source.

The real build, and real ccl runs on it, are in test_intel_stack.py (the
Intel env, `make test-intel`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.fake_ccl import fake_ccl_package
from workflow.scripts.probes import oneccl
from workflow.scripts.launch import ccl
from workflow.scripts.launch import command as launch
from workflow.scripts.settings.views import DistributedSettings

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "envs" / "torch-ccl" / "build.py"


def info(nodes=1, ppn=2, flavour="intel", ifname=None, backend="ccl") -> dict:
    return {"backend": backend, "nodes": nodes, "processes_per_node": ppn, "threads_per_process": 1,
            "mpi": {"flavour": flavour}, "gloo_ifname": ifname}


# ---------------------------------------------------------------- settings

def test_one_node_is_pinned_to_loopback_with_shared_memory():
    env = ccl.settings(info())
    assert env == {"CCL_ATL_TRANSPORT": "ofi", "CCL_PROCESS_LAUNCHER": "none", "CCL_WORKER_OFFLOAD": "0",
                   "CCL_WORKER_COUNT": "1", "CCL_ATL_SHM": "1", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo",
                   "CCL_KVS_IFACE": "lo", "I_MPI_HYDRA_IFACE": "lo"}


def test_across_nodes_the_interface_that_reaches_the_first_node():
    env = ccl.settings(info(nodes=2, ppn=1, ifname="eth1"))
    assert (env["FI_TCP_IFACE"], env["CCL_KVS_IFACE"], env["I_MPI_HYDRA_IFACE"]) == ("eth1", "eth1", "eth1")
    assert "CCL_ATL_SHM" not in env  # one rank per node: nothing to share
    unknown = ccl.settings(info(nodes=2, ppn=2))
    assert unknown["CCL_ATL_SHM"] == "1" and not {"FI_TCP_IFACE", "CCL_KVS_IFACE", "FI_PROVIDER"} & set(unknown)


@pytest.mark.parametrize("flavour", ["intel", "mpich", "openmpi", "slurm"])
def test_transport_works_under_every_launcher(flavour):
    env = ccl.settings(info(flavour=flavour))
    assert env["CCL_ATL_TRANSPORT"] == "ofi" and env["CCL_PROCESS_LAUNCHER"] == "none"
    assert ("I_MPI_HYDRA_IFACE" in env) == (flavour == "intel")  # only Intel MPI's hydra reads it


def test_each_rank_tells_oneccl_its_place_on_the_node():
    assert ccl.local_variables(1, 2, environ={}) == {
        "CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": "1", "CCL_LOCAL_SIZE": "2"}
    assert ccl.local_variables(1, 2, environ={"CCL_PROCESS_LAUNCHER": "pmix"}) == {}  # the user's choice


def test_rank_env_sets_ccl_and_the_users_env_wins(tmp_path, monkeypatch):
    root = fake_ccl_package(tmp_path / oneccl.CCL_MODULE)
    monkeypatch.setattr(oneccl, "ccl_package_dir", lambda: root)
    env = launch.rank_env(info(), {"CCL_WORKER_OFFLOAD": 1, "FI_TCP_IFACE": "eth9"}, "127.0.0.1", 29500)
    assert env["CCL_ATL_SHM"] == "1" and env["CCL_KVS_IFACE"] == "lo" and env["CCL_ROOT"] == str(root)
    assert (env["CCL_WORKER_OFFLOAD"], env["FI_TCP_IFACE"]) == ("1", "eth9")
    gloo = launch.rank_env(info(backend="gloo"), {}, "127.0.0.1", 29500)
    assert not [k for k in gloo if k.startswith(("CCL_", "FI_"))]


def test_hydra_gets_the_interface_in_its_own_environment():
    config = DistributedSettings.of({"env": {}})
    assert launch.launch_env(config, info())["I_MPI_HYDRA_IFACE"] == "lo"
    mine = DistributedSettings.of({"env": {"I_MPI_HYDRA_IFACE": "ib0"}})
    assert launch.launch_env(mine, info())["I_MPI_HYDRA_IFACE"] == "ib0"
    assert ccl.launcher_variables(info(backend="gloo"), {}) == {}


def test_environment_json_records_what_was_set_and_overridden(tmp_path, monkeypatch):
    root = fake_ccl_package(tmp_path / oneccl.CCL_MODULE)
    monkeypatch.setattr(oneccl, "ccl_package_dir", lambda: root)
    record = ccl.record(info(), {"CCL_WORKER_OFFLOAD": "1", "OMP_PROC_BIND": "close"})
    assert record["ccl_env"]["CCL_ATL_SHM"] == "1" and record["ccl_env"]["CCL_ROOT"] == str(root)
    assert record["ccl_env_overridden"] == ["CCL_WORKER_OFFLOAD"]
    assert ccl.record(info(backend="gloo"), {}) == {}


# ---------------------------------------------------------------- the source build









