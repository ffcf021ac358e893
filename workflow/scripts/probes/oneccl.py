"""oneCCL Bindings for PyTorch (oneccl_bind_pt, the `ccl` backend): which
build pairs with which torch, where it is installed, what its ranks need
from the environment, and where the installed build came from.

Intel's last CPU wheel is 2.7.0 (for torch 2.7, on Intel's own index). For
torch 2.8, cpuddp builds the bindings from intel/torch-ccl's last source
against oneCCL from PyPI (envs/torch-ccl/build.py, `make intel-venv`); that
build is oneccl_bind_pt 2.8.0+cpu and records itself in the installed package.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from workflow.scripts.common.errors import UserError

CCL_MODULE = "oneccl_bindings_for_pytorch"
CCL_PACKAGE = "oneccl_bind_pt"
CCL_INDEX = "https://pytorch-extension.intel.com/release-whl/stable/cpu/us/"
SOURCE_BUILD = "2.8.0"  # built by cpuddp from intel/torch-ccl 1fc0c38 (no wheel exists)
BUILD_RECORD = "cpuddp-build.json"  # written into the package by envs/torch-ccl/build.py

# oneccl_bind_pt for each torch: torch major.minor (or the full version where
# one minor had two builds) -> its version. Up to 2.7: Intel's CPU wheels;
# 2.8: the source build.
CCL_PAIRS = {
    "2.8": SOURCE_BUILD,
    "2.7": "2.7.0",
    "2.6": "2.6.0",
    "2.5": "2.5.0",
    "2.4": "2.4.0",
    "2.3": "2.3.0",
    "2.2": "2.2.0",
    "2.1": "2.1.0",
    "2.0": "2.0.0",
    "1.13": "1.13.0",
    "1.12.1": "1.12.100",
    "1.12.0": "1.12.0",
    "1.11": "1.11.0",
    "1.10": "1.10.0",
}
BUILD_HINT = ("build it from source for torch 2.8: make intel-venv, or envs/torch-ccl/build.py "
              "(see docs/intel-stack.md, Install)")


def release(version: str) -> str:
    """'2.8.0+cpu' -> '2.8.0': local build labels do not change the pairing."""
    return version.split("+")[0]


def major_minor(version: str) -> str:
    return ".".join(release(version).split(".")[:2])


def _ccl_key(torch_version: str) -> str | None:
    """The CCL_PAIRS key of a torch version, if any build pairs with it."""
    full = release(torch_version)
    for key in (full, major_minor(full)):
        if key in CCL_PAIRS:
            return key
    return None


def check_ccl_pair(torch_version: str, ccl_version: str) -> None:
    """oneccl_bind_pt must be the build made for the installed torch."""
    key = _ccl_key(torch_version)
    if key is not None and CCL_PAIRS[key] == release(ccl_version):
        return
    built_for = [t for t, c in CCL_PAIRS.items() if c == release(ccl_version)]
    pairs = f"built for torch {built_for[0]}" if built_for else "not a known release"
    raise UserError(f"{CCL_PACKAGE} {ccl_version} ({pairs}) does not pair with torch {torch_version}: "
                    f"{ccl_install_hint(torch_version)}, or set distributed.backend: gloo")


def ccl_install_hint(torch_version: str | None) -> str:
    """How to get ccl for this torch (or why there is none)."""
    key = _ccl_key(torch_version or "")
    if key is None:
        return (f"no {CCL_PACKAGE} exists for torch {major_minor(torch_version or '?')} (the last source, "
                f"intel/torch-ccl 1fc0c38, targets torch 2.8): use torch==2.8.0 and {BUILD_HINT}")
    if CCL_PAIRS[key] == SOURCE_BUILD:
        return f"no {CCL_PACKAGE} wheel exists for torch {key}: {BUILD_HINT}"
    return (f"pip install {CCL_PACKAGE}=={CCL_PAIRS[key]} --extra-index-url {CCL_INDEX} "
            "(see docs/intel-stack.md, Install)")


# ---------------------------------------------------------------- where it is

def ccl_package_dir() -> Path | None:
    """Where oneccl_bindings_for_pytorch is installed (found without importing it)."""
    spec = importlib.util.find_spec(CCL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def oneccl_root(package: Path) -> Path:
    """Where oneCCL and Intel MPI live: inside the package for Intel's wheels;
    for a build against oneCCL from PyPI, the venv prefix, which the
    library's RPATH ($ORIGIN/../../../../ from the package's lib/) points to."""
    if list((package / "lib").glob("libccl.so*")) or (package / "opt/mpi").is_dir():
        return package
    return package.parents[3]


def build_record(package: Path | None = None) -> dict | None:
    """The source build's record (versions, commit, library hashes), or None
    for a wheel or a missing package."""
    package = package or ccl_package_dir()
    path = package / BUILD_RECORD if package else None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def _prepend(paths: list[Path], current: str | None) -> str:
    parts = [str(p) for p in paths] + ([current] if current else [])
    return os.pathsep.join(parts)


def ccl_environment(package: Path | None = None, environ=None) -> dict:
    """What oneCCL's and Intel MPI's setvars.sh / vars.sh would export.

    The ranks get these through the launcher, so nobody sources a script or
    edits a shell. Only the folders this installation has are added.
    """
    environ = os.environ if environ is None else environ
    package = package or ccl_package_dir()
    if package is None:
        return {}
    root = oneccl_root(package)
    libs = [d for d in (root / "lib", root / "opt/mpi/lib", root / "opt/mpi/libfabric/lib") if d.is_dir()]
    bins = [d for d in (root / "bin", root / "opt/mpi/bin") if d.is_dir()]
    env = {
        "CCL_ROOT": str(root),
        "LD_LIBRARY_PATH": _prepend(libs, environ.get("LD_LIBRARY_PATH")),
        "LIBRARY_PATH": _prepend(libs, environ.get("LIBRARY_PATH")),
    }
    if (root / "include").is_dir():
        env["CPATH"] = _prepend([root / "include"], environ.get("CPATH"))
    if bins:
        env["PATH"] = _prepend(bins, environ.get("PATH"))
    # setvars.sh keeps an I_MPI_ROOT that is already set.
    env["I_MPI_ROOT"] = environ.get("I_MPI_ROOT") or str(root)
    providers = [d for d in (root / "opt/mpi/libfabric/lib/prov", root / "lib/prov") if d.is_dir()]
    if not providers and list((root / "lib").glob("lib*-fi.so")):
        providers = [root / "lib"]  # impi-rt from PyPI keeps libfabric's providers in lib/
    if providers:
        env["FI_PROVIDER_PATH"] = str(providers[0])
    return env


def loaded_libraries() -> dict[str, str]:
    """The oneCCL libraries this process has mapped (from /proc/self/maps):
    which build a rank really runs."""
    wanted = ("liboneccl_bindings_for_pytorch", "libccl.so", "libmpi.so", "libfabric.so")
    found = {}
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        path = line.split(maxsplit=5)[-1] if len(line.split()) >= 6 else ""
        name = os.path.basename(path)
        key = next((w for w in wanted if name.startswith(w)), None)
        if key and key not in found:
            found[key] = path
    return found
