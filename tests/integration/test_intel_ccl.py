"""The Intel stack's ccl side: the environment an oneccl_bind_pt install needs
(what setvars exports), and the error paths a real build cannot show, on a
stand-in package of the same name (tests/helpers/fake_ccl.py).

Runs in the main env and in the Intel env (`make test-intel`).
"""

from __future__ import annotations

import os

import pytest
import yaml

from helpers.fake_ccl import fake_ccl_package, stand_in_ccl
from helpers.workflow import snakemake, tiny_experiment, write_config

from workflow.scripts.nodes import describe as environment
from workflow.scripts.probes import intel, oneccl
from workflow.scripts.launch import command as launch
from helpers.messages import one_line
from workflow.scripts.common.errors import UserError



# ---------------------------------------------------------------- ccl environment

def fake_source_build(prefix):
    """A venv with oneccl / impi-rt from PyPI and the bindings built against them."""
    package = prefix / "lib/python3.11/site-packages" / oneccl.CCL_MODULE
    (package / "lib").mkdir(parents=True)
    (package / "lib/liboneccl_bindings_for_pytorch.so").touch()
    for name in ("libccl.so.1", "libmpi.so.12", "libfabric.so.1", "libtcp-fi.so", "librxm-fi.so"):
        (prefix / "lib" / name).touch()
    (prefix / "bin").mkdir()
    (prefix / "include").mkdir()
    return package


def test_ccl_environment_is_what_setvars_exports(tmp_path):
    root = fake_ccl_package(tmp_path / "oneccl_bindings_for_pytorch")
    env = oneccl.ccl_environment(root, environ={"LD_LIBRARY_PATH": "/site/lib", "PATH": "/usr/bin"})
    assert env["CCL_ROOT"] == str(root)
    assert env["I_MPI_ROOT"] == str(root)
    assert env["LD_LIBRARY_PATH"] == ":".join(
        [str(root / "lib"), str(root / "opt/mpi/lib"), str(root / "opt/mpi/libfabric/lib"), "/site/lib"])
    assert env["LIBRARY_PATH"].startswith(str(root / "lib"))
    assert env["PATH"] == f"{root / 'bin'}:{root / 'opt/mpi/bin'}:/usr/bin"
    assert env["CPATH"] == str(root / "include")
    assert env["FI_PROVIDER_PATH"] == str(root / "opt/mpi/libfabric/lib/prov")


def test_ccl_environment_keeps_a_site_intel_mpi(tmp_path):
    root = tmp_path / "pkg"
    (root / "lib/prov").mkdir(parents=True)
    (root / "lib/libccl.so.1").touch()
    env = oneccl.ccl_environment(root, environ={"I_MPI_ROOT": "/opt/intel/mpi"})
    assert env["I_MPI_ROOT"] == "/opt/intel/mpi"
    assert env["FI_PROVIDER_PATH"] == str(root / "lib/prov")
    assert env["LD_LIBRARY_PATH"] == str(root / "lib") and "PATH" not in env


def test_ccl_environment_of_the_source_build_is_the_venv(tmp_path):
    """Built against oneCCL from PyPI: oneCCL, Intel MPI and libfabric's providers live in the venv."""
    prefix = tmp_path / "venv"
    package = fake_source_build(prefix)
    assert oneccl.oneccl_root(package) == prefix
    env = oneccl.ccl_environment(package, environ={"PATH": "/usr/bin"})
    assert env["CCL_ROOT"] == env["I_MPI_ROOT"] == str(prefix)
    assert env["LD_LIBRARY_PATH"] == str(prefix / "lib") and env["FI_PROVIDER_PATH"] == str(prefix / "lib")
    assert env["PATH"] == f"{prefix / 'bin'}:/usr/bin" and env["CPATH"] == str(prefix / "include")


def test_ccl_environment_empty_without_the_package(monkeypatch):
    monkeypatch.setattr(oneccl, "ccl_package_dir", lambda: None)
    assert oneccl.ccl_environment() == {}


def test_ccl_ranks_get_the_setvars_environment(tmp_path, monkeypatch):
    root = fake_ccl_package(tmp_path / "oneccl_bindings_for_pytorch")
    monkeypatch.setattr(oneccl, "ccl_package_dir", lambda: root)
    info = {"threads_per_process": 2, "mpi": {"flavour": "intel"}, "backend": "ccl"}
    env = launch.rank_env(info, {"CCL_ROOT": "/mine"}, "10.0.0.1", 29500)
    assert env["CCL_WORKER_COUNT"] == "1"
    assert env["LD_LIBRARY_PATH"].startswith(str(root / "lib"))
    assert env["CCL_ROOT"] == "/mine"  # distributed.env still wins
    gloo = launch.rank_env({**info, "backend": "gloo"}, {}, "10.0.0.1", 29500)
    assert "CCL_ROOT" not in gloo and "CCL_WORKER_COUNT" not in gloo


@pytest.mark.skipif(oneccl.ccl_package_dir() is not None,
                    reason="oneccl_bindings_for_pytorch is installed here: runs in `make test-integration`")
def test_ccl_requested_where_missing_says_how_to_install():
    with pytest.raises(UserError) as err:
        environment.choose_backend("ccl")
    message = one_line(err)
    assert message.startswith("backend ccl requested but oneccl_bindings_for_pytorch does not import")
    assert "make intel-venv" in message or "--extra-index-url" in message  # torch 2.8 / older torch
    assert "distributed.backend: gloo" in message


def test_auto_backend_records_why(monkeypatch):
    backend, why = environment.choose_backend("auto")
    assert (backend, why) in {
        ("gloo", "auto: oneccl_bindings_for_pytorch not importable"),
        ("ccl", "auto: oneccl_bindings_for_pytorch imports; ranks of a node share memory, where oneCCL's "
                "all-reduce measured faster than gloo's")}


@pytest.mark.parametrize("ranks_per_node, nodes, pays", [(2, 1, True), (2, 2, True), (1, 2, False), (1, 1, False)])
def test_auto_picks_ccl_where_it_pays(monkeypatch, ranks_per_node, nodes, pays):
    monkeypatch.setattr(environment.importlib, "import_module", lambda name: None)  # as if the bindings import
    backend, why = environment.choose_backend("auto", ranks_per_node, nodes)
    assert backend == ("ccl" if pays else "gloo") and why.startswith("auto: oneccl_bindings_for_pytorch imports; ")
    assert environment.choose_backend("ccl", ranks_per_node, nodes) == ("ccl", "requested")


def test_ccl_install_hint_per_torch():
    assert "oneccl_bind_pt==2.7.0" in oneccl.ccl_install_hint("2.7.1+cpu")
    assert "make intel-venv" in oneccl.ccl_install_hint("2.8.0")
    assert oneccl.ccl_install_hint("2.13.0").startswith("no oneccl_bind_pt exists for torch 2.13 ")


# ---------------------------------------------------------------- ccl error paths
# The real bindings are built and run in the Intel env (test_intel_stack.py,
# test_multinode.py). What a real build cannot show, a package of the same
# name shows: a "ccl" backend that is gloo inside, under a version that does
# not pair with the installed torch.

def ccl_experiment(tmp_path, tiny_model_dir):
    config = yaml.safe_load(tiny_experiment(tmp_path, tiny_model_dir).read_text())
    config["train"].update(epochs=1)
    config["distributed"].update(backend="auto")
    return write_config(tmp_path / "ccl.yaml", config)


def with_site(monkeypatch, site):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))


def test_mismatched_ccl_stops_the_environment_rule(tmp_path, tiny_model_dir, monkeypatch):
    stand_in_ccl(tmp_path / "site", version="2.7.0+cpu")
    with_site(monkeypatch, tmp_path / "site")
    done = snakemake(tmp_path, ccl_experiment(tmp_path, tiny_model_dir), "results/tiny/default/environment.json",
                     check=False)
    assert done.returncode != 0, done.stdout
    assert (tmp_path / "logs").exists(), done.stderr[-3000:]
    log = (tmp_path / "logs/environment_check/tiny/default.log").read_text().strip().splitlines()
    torch_version = intel.installed_versions()["torch"]
    assert log[-1].startswith(f"error: oneccl_bind_pt 2.7.0+cpu (built for torch 2.7) does not pair with "
                              f"torch {torch_version}: "), log[-1]
