"""Environment check: record versions, CPU and ISA, decide backend/precision.

Writes environment.json; refuses (exit 1, one line) when the requested
backend or precision cannot run on this machine.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import json
import platform
import sys
import time

from workflow.scripts.common import hardware, intel
from workflow.scripts.launch import command as launch
from workflow.scripts.common.atomic import write_json
from workflow.scripts.common.errors import UserError, run_cli

PACKAGES = ("torch", "transformers", "datasets", "snakemake", "intel_extension_for_pytorch",
            "oneccl_bind_pt")
CCL_MODULE = "oneccl_bindings_for_pytorch"


def versions() -> dict:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


def choose_backend(requested: str) -> tuple[str, str]:
    """(backend, why): ccl only where its bindings import."""
    if requested == "gloo":
        return "gloo", "requested"  # ccl is never imported, whatever its state
    try:
        importlib.import_module(CCL_MODULE)
        ccl_error = None
    except Exception as err:  # an ABI mismatch raises more than ImportError
        ccl_error = f"{type(err).__name__}: {err}".splitlines()[0]
    if requested == "ccl":
        if ccl_error:
            raise UserError(
                f"backend ccl requested but {CCL_MODULE} does not import ({ccl_error}); "
                f"{intel.ccl_install_hint(intel.installed_versions()['torch'])} (README, Intel stack), "
                "or set distributed.backend: gloo"
            )
        return "ccl", "requested"
    if ccl_error:
        return "gloo", f"auto: {CCL_MODULE} not importable"
    return "ccl", f"auto: {CCL_MODULE} imports"


def matmul_gflops(dtype, size: int = 512, seconds: float = 0.3) -> float:
    """Measured matmul speed; CPU flags alone can lie under a hypervisor."""
    import torch

    a = torch.randn(size, size).to(dtype)
    a @ a
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        a @ a
        count += 1
    return 2 * size**3 * count / (time.perf_counter() - start) / 1e9


def choose_precision(requested: str, flags) -> tuple[str, str, dict]:
    """(precision, why, measured GFLOP/s): bf16 only where it is native."""
    import torch

    native = hardware.has_native_bf16(flags)
    speed = {}
    if requested != "fp32" and native:
        speed = {"fp32_gflops": round(matmul_gflops(torch.float32), 1),
                 "bf16_gflops": round(matmul_gflops(torch.bfloat16), 1)}
        native = speed["bf16_gflops"] >= speed["fp32_gflops"]
    if requested == "fp32":
        return "fp32", "requested", speed
    if requested == "bf16" and not native:
        raise UserError(
            "precision bf16 requested but this CPU has no native bf16 (no avx512_bf16/amx_bf16, or measured slower "
            "than fp32): it would run orders of magnitude slower; set train.precision: fp32 (or auto)"
        )
    if requested == "bf16":
        return "bf16", "requested", speed
    if native:
        return "bf16", "auto: native bf16 measured faster than fp32", speed
    return "fp32", "auto: no native bf16 on this CPU, falling back to fp32", speed


def threads_per_process(requested, processes_per_node: int, cpu: dict) -> int:
    """auto = physical cores of the node divided by the ranks on it."""
    if requested != "auto":
        return int(requested)
    return max(1, hardware.usable_cores(cpu) // processes_per_node)


def describe(config: dict, launcher: bool = True) -> dict:
    """This node's versions, CPU and decisions; `launcher`: also find mpirun / srun
    (the launch node does; the nodes it checks do not need one)."""
    dist, train = config["distributed"], config["train"]
    cpu = hardware.cpu_summary()
    found = versions()
    ipex_requested = train.get("ipex", "auto")
    # Pairing first: a mismatched IPEX ends the process when imported.
    intel.check_pairing(found, ipex=ipex_requested is not False, ccl=dist["backend"] != "gloo")
    backend, backend_why = choose_backend(dist["backend"])
    ipex, ipex_why = intel.ipex_status(ipex_requested)
    precision, precision_why, speed = choose_precision(train["precision"], cpu["isa_flags"])
    mpi = launch.detect_launcher(dist) if launcher else None
    return {
        "versions": found,
        "mpi": mpi,
        "host": platform.node(),
        **cpu,
        "native_bf16_flags": hardware.has_native_bf16(cpu["isa_flags"]),
        "matmul": speed,
        "backend": backend,
        "backend_reason": backend_why,
        "precision": precision,
        "precision_reason": precision_why,
        "ipex": ipex,
        "ipex_reason": ipex_why,
        "nodes": dist["nodes"],
        "processes_per_node": dist["processes_per_node"],
        "world_size": dist["nodes"] * dist["processes_per_node"],
        "threads_per_process": threads_per_process(dist["threads_per_process"], dist["processes_per_node"], cpu),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="run configuration JSON")
    parser.add_argument("--out", required=True, help="environment.json to write")
    args = parser.parse_args(argv)
    config = json.loads(open(args.config).read())
    info = describe(config)
    print(f"backend {info['backend']} ({info['backend_reason']}); precision {info['precision']} "
          f"({info['precision_reason']}); ipex {'on' if info['ipex'] else 'off'} ({info['ipex_reason']}); "
          f"{info['threads_per_process']} threads per process", file=sys.stderr)
    write_json(args.out, info)


if __name__ == "__main__":
    run_cli(main)
