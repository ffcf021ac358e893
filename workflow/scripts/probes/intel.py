"""The Intel stack: IPEX and oneCCL bindings, both end-of-life, both optional.

Intel Extension for PyTorch (IPEX) works only with the torch release of the
same major.minor, and its import exits the process when they differ; each
oneccl_bind_pt build pairs with one torch release (oneccl.py). Mismatched versions
are what users of Intel's recipes hit most, so they are checked here from
package metadata, before anything imports either package, and refused with
one line naming what to install. The upstream path (gloo, no IPEX) never
needs any of this.
"""

from __future__ import annotations

import socket

from workflow.scripts.probes import versions
from workflow.scripts.common.errors import UserError
from workflow.scripts.probes.oneccl import CCL_PACKAGE, check_ccl_pair, major_minor, release

IPEX_MODULE = "intel_extension_for_pytorch"
IPEX_PACKAGE = "intel-extension-for-pytorch"
IPEX_LAST = "2.8.0"  # archived: the last CPU release, on PyPI
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


# ---------------------------------------------------------------- versions

def installed_versions() -> dict:
    """torch, IPEX and oneccl_bind_pt versions from metadata (None = absent)."""
    return versions.installed("torch", IPEX_MODULE, CCL_PACKAGE)


def check_ipex_pair(torch_version: str, ipex_version: str) -> None:
    """IPEX X.Y runs only on torch X.Y (its import exits otherwise)."""
    need = major_minor(ipex_version)
    if major_minor(torch_version) == need:
        return
    found = f"{IPEX_PACKAGE} {ipex_version} needs torch {need}.*, but torch {torch_version} is installed"
    fixes = f"pip install torch=={need}.0"
    if _version_tuple(torch_version) <= _version_tuple(IPEX_LAST):
        fixes += f" or pip install {IPEX_PACKAGE}=={major_minor(torch_version)}.*"
    raise UserError(f"{found}: {fixes} (see docs/intel-stack.md, Version pairing), or set train.ipex: false")


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


def _version_tuple(version: str) -> tuple:
    return tuple(int(p) for p in release(version).split(".")[:3] if p.isdigit())


# ---------------------------------------------------------------- IPEX

def _import_ipex():
    """The IPEX module, or UserError; only after check_pairing (else it exits)."""
    try:
        import intel_extension_for_pytorch as ipex
    except (Exception, SystemExit) as err:  # a broken build can exit, not raise
        raise UserError(f"{IPEX_MODULE} does not import on {socket.gethostname()} "
                        f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
                        f"install {IPEX_PACKAGE}=={IPEX_LAST} with torch==2.8.0 "
                        "(see docs/intel-stack.md, Version pairing) "
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
                            f"pip install torch==2.8.0 {IPEX_PACKAGE}=={IPEX_LAST} "
                            "(see docs/intel-stack.md, Version pairing), "
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

    return torch.bfloat16 if precision in ("bf16", "bf16_master") else torch.float32


def optimize_training(model, optimizer, dtype):
    """ipex.optimize for training: fused optimizer, prepacked weights.

    In place, so a scheduler or DDP built on these objects keeps working.
    IPEX has no fused AdamW on CPU: in fp32 it changes little; in bf16 it
    swaps in its Linear/LayerNorm kernels and keeps fp32 master weights.
    """
    ipex = _import_ipex()
    model.train()
    return ipex.optimize(model, optimizer=optimizer, dtype=dtype, inplace=True,
                         weights_prepack=prepacks(dtype))


def optimize_inference(model, dtype):
    """ipex.optimize for inference (bf16 weights when dtype is bf16)."""
    ipex = _import_ipex()
    return ipex.optimize(model.eval(), dtype=dtype, inplace=True, weights_prepack=prepacks(dtype))


def prepacks(dtype) -> bool:
    """Whether IPEX can prepack weights in this dtype on this CPU.

    IPEX asserts (and so fails the run) when asked for bf16 prepacking on a
    CPU without avx512bw/vl/dq or avx_ne_convert, e.g. an AVX2-only EPYC
    where a user forced precision bf16; unpacked, the run goes on.
    """
    import torch

    if dtype != torch.bfloat16:
        return True
    import intel_extension_for_pytorch._C as core

    return bool(core.onednn_has_bf16_support())


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
