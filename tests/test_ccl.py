"""The oneCCL path without oneCCL: what cpuddp sets for ccl ranks, and the
bindings' source build refusing a missing or altered source.

The real build, and real ccl runs on it, are in test_intel_stack.py (the
Intel env, `make test-intel`).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_intel import fake_ccl_package
from workflow.scripts.common import oneccl
from workflow.scripts.launch import ccl
from workflow.scripts.launch import command as launch

REPO = Path(__file__).resolve().parents[1]
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
    config = {"distributed": {"env": {}}}
    assert launch.launch_env(config, info())["I_MPI_HYDRA_IFACE"] == "lo"
    mine = {"distributed": {"env": {"I_MPI_HYDRA_IFACE": "ib0"}}}
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

def build(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BUILD), "--venv", "/nonexistent", "--check-only", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=60)


def test_build_refuses_a_missing_source(tmp_path):
    done = build("--source", str(tmp_path / "none.tar.gz"), "--sha256", "0" * 64)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: torch-ccl source not found (looked for ") and "CCL_SRC=" in line


def test_build_refuses_an_altered_source(tmp_path):
    source = tmp_path / "torch-ccl-1fc0c38.tar.gz"
    source.write_bytes(b"not the original")
    done = build("--source", str(source), "--sha256", "0" * 64)
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    actual = hashlib.sha256(b"not the original").hexdigest()
    assert f"has sha256 {actual}, expected {'0' * 64}: the file is altered" in line


def test_build_takes_the_fallback_when_the_first_place_is_empty(tmp_path):
    source = tmp_path / "copy.tar.gz"
    source.write_bytes(b"x")
    done = build("--source", str(tmp_path / "none.tar.gz"), "--fallback", str(source),
                 "--sha256", hashlib.sha256(b"x").hexdigest())
    assert done.returncode == 0 and "sha256 ok" in done.stdout


@pytest.mark.skipif(shutil.which("python3.11") is None or shutil.which("make") is None,
                    reason="make intel-venv needs python3.11 and make")
def test_make_checks_the_source_before_building(tmp_path):
    """With an altered CCL_SRC, `make intel-venv` stops at once (nothing installed) with one line."""
    source = tmp_path / "bad.tar.gz"
    source.write_bytes(b"altered")
    venv = tmp_path / "intel-venv"
    done = subprocess.run(["make", "--no-print-directory", "intel-venv", f"INTEL_VENV={venv}", f"CCL_SRC={source}"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode != 0 and not venv.exists()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the file is altered" in errors[0], done.stderr
