"""The Intel stack: IPEX and oneCCL bindings, both end-of-life, both optional.

Intel Extension for PyTorch (IPEX) works only with the torch release of the
same major.minor, and its import exits the process when they differ; each
oneccl_bind_pt wheel is built against one torch release. Mismatched versions
are what users of Intel's recipes hit most, so they are checked here from
package metadata, before anything imports either package, and refused with
one line naming what to install. The upstream path (gloo, no IPEX) never
needs any of this.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

from workflow.scripts.common import versions
from workflow.scripts.common.errors import UserError

IPEX_MODULE = "intel_extension_for_pytorch"
IPEX_PACKAGE = "intel-extension-for-pytorch"
IPEX_LAST = "2.8.0"  # archived: the last CPU release, on PyPI
CCL_MODULE = "oneccl_bindings_for_pytorch"
CCL_PACKAGE = "oneccl_bind_pt"
CCL_INDEX = "https://pytorch-extension.intel.com/release-whl/stable/cpu/us/"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# Released CPU wheels of oneccl_bind_pt (Intel's index, not PyPI) and the
# torch release each was built against: torch major.minor, or the full
# version where one minor had two builds.
CCL_PAIRS = {
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


# ---------------------------------------------------------------- versions

def installed_versions() -> dict:
    """torch, IPEX and oneccl_bind_pt versions from metadata (None = absent)."""
    return versions.installed("torch", IPEX_MODULE, CCL_PACKAGE)


def release(version: str) -> str:
    """'2.8.0+cpu' -> '2.8.0': local build labels do not change the pairing."""
    return version.split("+")[0]


def major_minor(version: str) -> str:
    return ".".join(release(version).split(".")[:2])


def _ccl_key(torch_version: str) -> str | None:
    """The CCL_PAIRS key of a torch version, if any release pairs with it."""
    full = release(torch_version)
    for key in (full, major_minor(full)):
        if key in CCL_PAIRS:
            return key
    return None


def check_ipex_pair(torch_version: str, ipex_version: str) -> None:
    """IPEX X.Y runs only on torch X.Y (its import exits otherwise)."""
    need = major_minor(ipex_version)
    if major_minor(torch_version) == need:
        return
    found = f"{IPEX_PACKAGE} {ipex_version} needs torch {need}.*, but torch {torch_version} is installed"
    fixes = f"pip install torch=={need}.0"
    if _version_tuple(torch_version) <= _version_tuple(IPEX_LAST):
        fixes += f" or pip install {IPEX_PACKAGE}=={major_minor(torch_version)}.*"
    raise UserError(f"{found}: {fixes} (README, Intel stack), or set train.ipex: false")


def check_ccl_pair(torch_version: str, ccl_version: str) -> None:
    """oneccl_bind_pt must be the wheel built for the installed torch."""
    key = _ccl_key(torch_version)
    if key is not None and CCL_PAIRS[key] == release(ccl_version):
        return
    built_for = [t for t, c in CCL_PAIRS.items() if c == release(ccl_version)]
    pairs = f"built for torch {built_for[0]}" if built_for else "not a known release"
    raise UserError(f"{CCL_PACKAGE} {ccl_version} ({pairs}) does not pair with torch {torch_version}: "
                    f"{ccl_install_hint(torch_version)} (README, Intel stack), or set distributed.backend: gloo")


def check_pairing(versions: dict, ipex: bool = True, ccl: bool = True) -> None:
    """Refuse mismatched Intel packages that this run is going to use.

    ipex / ccl False: that package stays unimported, so its version is moot.
    """
    torch_version = versions.get("torch")
    if not torch_version:
        raise UserError("torch is not installed; run `make venv` (or `make intel-venv` for the Intel stack)")
    if ipex and versions.get(IPEX_MODULE):
        check_ipex_pair(torch_version, versions[IPEX_MODULE])
    if ccl and versions.get(CCL_PACKAGE):
        check_ccl_pair(torch_version, versions[CCL_PACKAGE])


def ccl_install_hint(torch_version: str | None) -> str:
    """How to get ccl for this torch (or why there is none)."""
    key = _ccl_key(torch_version or "")
    if key is None:
        return (f"no {CCL_PACKAGE} exists for torch {major_minor(torch_version or '?')} (the last is 2.7.0, "
                f"for torch 2.7): install torch==2.7.* and {CCL_PACKAGE}==2.7.0 --extra-index-url {CCL_INDEX}")
    return f"pip install {CCL_PACKAGE}=={CCL_PAIRS[key]} --extra-index-url {CCL_INDEX}"


def _version_tuple(version: str) -> tuple:
    return tuple(int(p) for p in release(version).split(".")[:3] if p.isdigit())


# ---------------------------------------------------------------- ccl environment

def ccl_package_dir() -> Path | None:
    """Where oneccl_bindings_for_pytorch is installed (found without importing it)."""
    spec = importlib.util.find_spec(CCL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _prepend(paths: list[Path], current: str | None) -> str:
    parts = [str(p) for p in paths] + ([current] if current else [])
    return os.pathsep.join(parts)


def ccl_environment(root: Path | None = None, environ=None) -> dict:
    """What the package's env/setvars.sh (which sources vars.sh) exports.

    The ranks get these through mpirun, so nobody sources a script or edits
    a shell. The wheel bundles oneCCL, Intel MPI and libfabric under its
    package folder; only the folders this wheel has are added.
    """
    environ = os.environ if environ is None else environ
    root = root or ccl_package_dir()
    if root is None:
        return {}
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
    if providers:
        env["FI_PROVIDER_PATH"] = str(providers[0])
    return env


# ---------------------------------------------------------------- IPEX

def _import_ipex():
    """The IPEX module, or UserError; only after check_pairing (else it exits)."""
    try:
        import intel_extension_for_pytorch as ipex
    except (Exception, SystemExit) as err:  # a broken build can exit, not raise
        raise UserError(f"{IPEX_MODULE} does not import on {socket.gethostname()} "
                        f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                        f"install {IPEX_PACKAGE}=={IPEX_LAST} with torch==2.8.0 (README, Intel stack) "
                        "or set train.ipex: false") from err
    return ipex


def ipex_status(requested) -> tuple[bool, str]:
    """(enabled, why) for train.ipex = auto / true / false."""
    if requested is False:
        return False, "requested off (train.ipex: false)"
    version = installed_versions()[IPEX_MODULE]
    if version is None:
        if requested is True:
            raise UserError(f"train.ipex is true but {IPEX_PACKAGE} is not installed: "
                            f"pip install torch==2.8.0 {IPEX_PACKAGE}=={IPEX_LAST} (README, Intel stack), "
                            "or set train.ipex: auto")
        return False, f"auto: {IPEX_MODULE} not installed"
    try:
        _import_ipex()
    except UserError:
        if requested is True:
            raise
        return False, f"auto: {IPEX_MODULE} {version} installed but does not import"
    how = "requested" if requested is True else "auto"
    return True, f"{how}: {IPEX_MODULE} {version} imports"


def torch_dtype(precision: str):
    import torch

    return torch.bfloat16 if precision == "bf16" else torch.float32


def optimize_training(model, optimizer, dtype):
    """ipex.optimize for training: fused optimizer, prepacked weights.

    In place, so a scheduler or DDP built on these objects keeps working.
    IPEX has no fused AdamW on CPU: in fp32 it changes little; in bf16 it
    swaps in its Linear/LayerNorm kernels and keeps fp32 master weights.
    """
    ipex = _import_ipex()
    model.train()
    return ipex.optimize(model, optimizer=optimizer, dtype=dtype, inplace=True)


def optimize_inference(model, dtype):
    """ipex.optimize for inference (bf16 weights when dtype is bf16)."""
    ipex = _import_ipex()
    return ipex.optimize(model.eval(), dtype=dtype, inplace=True)


def plain_model(model):
    """An ordinary fp32 copy of an IPEX-trained model, for save_pretrained.

    After bf16 training IPEX leaves bf16 parameters (the fp32 master weights
    live in the optimizer), and save_pretrained would record the model as
    bfloat16; state_dict() rebuilds the full fp32 weights.
    """
    plain = type(model)(model.config)
    plain.load_state_dict(model.state_dict())
    return plain


def ipex_modules(model) -> int:
    """How many submodules IPEX replaced: the proof it was applied."""
    return sum(type(m).__module__.startswith(IPEX_MODULE) for m in model.modules())


def prepare_rank(info: dict) -> str:
    """On every rank (so on every node): versions paired, IPEX imported first.

    Intel requires IPEX to be imported before oneccl_bindings_for_pytorch.
    Returns the line the rank logs about its stack.
    """
    check_pairing(installed_versions(), ipex=bool(info.get("ipex")), ccl=info["backend"] == "ccl")
    if info.get("ipex"):
        _import_ipex()
    return (f"backend {info['backend']} ({info.get('backend_reason', '?')}); "
            f"precision {info['precision']} ({info.get('precision_reason', '?')}); "
            f"ipex {'on' if info.get('ipex') else 'off'} ({info.get('ipex_reason', '?')})")
