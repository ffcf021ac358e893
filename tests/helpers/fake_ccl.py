"""Packages named like Intel's oneCCL bindings, for the paths a real build
cannot show: the folders a wheel installs, and a "ccl" backend that is gloo
inside under a version that may not pair with the installed torch."""

from __future__ import annotations

from workflow.scripts.probes import oneccl


def fake_ccl_package(root):
    """The folders an oneccl_bind_pt CPU wheel of Intel's installs (oneCCL inside)."""
    for sub in ("lib/prov", "opt/mpi/lib", "opt/mpi/libfabric/lib/prov", "opt/mpi/bin", "bin", "include", "env"):
        (root / sub).mkdir(parents=True)
    (root / "lib/libccl.so.1").touch()
    return root


STAND_IN = '''"""Test stand-in for oneccl_bindings_for_pytorch: a "ccl" backend, gloo inside."""
import torch.distributed as dist

dist.Backend.register_backend("ccl", lambda store, rank, size, timeout: dist.ProcessGroupGloo(
    store, rank, size, timeout), devices=["cpu"])
'''


def stand_in_ccl(site, version=None):
    """The stand-in package in `site`, laid out like the wheel; with dist-info when `version`."""
    root = fake_ccl_package(site / oneccl.CCL_MODULE)
    (root / "__init__.py").write_text(STAND_IN)
    if version:
        info = site / f"oneccl_bind_pt-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: oneccl_bind_pt\nVersion: {version}\n")
    return root
