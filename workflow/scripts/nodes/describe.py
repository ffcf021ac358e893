"""One node's description and decisions: versions, CPU and ISA (with its
int8 / bf16 support and what that implies), and the backend, precision,
IPEX and threads a run uses there. Refuses (one line)
when the requested backend or precision cannot run on this node.
"""

from __future__ import annotations

import hashlib
import importlib
import platform
import sys
from pathlib import Path

from workflow.scripts.probes import hardware, intel, oneccl
from workflow.scripts.probes import precision as precision_rule
from workflow.scripts.settings import levers as speed_levers
from workflow.scripts.settings import layout
from workflow.scripts.common.errors import UserError
from workflow.scripts.probes.matmul import matmul_gflops
from workflow.scripts.probes.versions import installed
from workflow.scripts.settings.views import DistributedSettings, EnvironmentTrain
from workflow.scripts.launch import ccl, mpi

ROOT = Path(__file__).resolve().parents[3]
# What the revision covers (the code that runs).
REVISION_PATHS = ("Snakefile", "requirements.lock", "workflow")
PACKAGES = ("torch", "transformers", "datasets", "snakemake", "intel_extension_for_pytorch",
            "oneccl_bind_pt")


def versions() -> dict:
    return installed(*PACKAGES, python=True)


def ccl_pays(ranks_per_node: int, nodes: int) -> tuple[bool, str]:
    """Where oneCCL's all-reduce measured faster than gloo's (docs/intel-stack.md,
    Measured; `make bench-comm`): between ranks that share a node's memory."""
    if ranks_per_node * nodes == 1:
        return False, "one rank has nothing to all-reduce"
    if ranks_per_node > 1:
        return True, "ranks of a node share memory, where oneCCL's all-reduce measured faster than gloo's"
    return False, "one rank per node: between nodes over TCP oneCCL did not measure faster than gloo"


def choose_backend(requested: str, ranks_per_node: int = 2, nodes: int = 1) -> tuple[str, str]:
    """(backend, why): ccl where its bindings import and, for auto, where it pays."""
    if requested == "gloo":
        return "gloo", "requested"  # ccl is never imported, whatever its state
    try:
        importlib.import_module(oneccl.CCL_MODULE)
        ccl_error = None
    except Exception as err:  # an ABI mismatch raises more than ImportError
        ccl_error = f"{type(err).__name__}: {err}".splitlines()[0]
    if requested == "ccl":
        if ccl_error:
            raise UserError(
                f"backend ccl requested but {oneccl.CCL_MODULE} does not import ({ccl_error}); "
                f"{oneccl.ccl_install_hint(intel.installed_versions()['torch'])}, or set distributed.backend: gloo"
            )
        return "ccl", "requested"
    if ccl_error:
        return "gloo", f"auto: {oneccl.CCL_MODULE} not importable"
    pays, why = ccl_pays(ranks_per_node, nodes)
    return ("ccl" if pays else "gloo"), f"auto: {oneccl.CCL_MODULE} imports; {why}"


def measure_matmul() -> dict:
    """This node's fp32 and bf16 matmul speed, for the cluster's decision (probes/precision.py)."""
    import torch

    return {"fp32_gflops": round(matmul_gflops(torch.float32), 1),
            "bf16_gflops": round(matmul_gflops(torch.bfloat16), 1)}


def choose_precision(requested: str, flags) -> tuple[str, str, dict]:
    """(precision, why, measured GFLOP/s) on this node alone; for several
    nodes the environment check decides again from every node's measurement."""
    native = hardware.has_native_bf16(flags)
    speed = measure_matmul() if requested != "fp32" and native else {}
    # bf16 asked for by name: refused only where it is not native or slower (no margin: the user chose it).
    if requested in precision_rule.BF16_KINDS and not (native and speed["bf16_gflops"] >= speed["fp32_gflops"]):
        raise UserError(
            f"precision {requested} requested but this CPU has no native bf16 (no avx512_bf16/amx_bf16, or "
            "measured slower than fp32): it would run orders of magnitude slower; set train.precision: fp32 (or auto)"
        )
    precision, why = precision_rule.decide(requested, [("this node", {"native_bf16_flags": native, "matmul": speed})])
    return precision, why, speed


def lever_record(settings, context) -> dict:
    """environment.json's `levers` (as chosen) and `levers_reason`."""
    chosen, reasons = speed_levers.choose(settings, context)
    return {"levers": chosen.as_dict(), "levers_reason": reasons}


def threads_per_process(requested, processes_per_node: int, cpu: dict) -> int:
    """auto = physical cores of the node divided by the ranks on it."""
    if requested != "auto":
        return int(requested)
    return max(1, hardware.usable_cores(cpu) // processes_per_node)


def describe(dist: DistributedSettings, train: EnvironmentTrain, launcher: bool = True) -> dict:
    """This node's versions, CPU and decisions; `launcher`: also find mpirun / srun
    (the launch node does; the nodes it checks do not need one)."""
    cpu = hardware.cpu_summary()
    found = versions()
    ipex_requested = train.ipex
    # Pairing first: a mismatched IPEX ends the process when imported.
    intel.check_pairing(found, ipex=ipex_requested is not False, ccl=dist.backend != "gloo")
    # The environment check puts a measured layout in first (nodes/check.py); a direct caller's auto is a guess.
    ranks = layout.ranks_guess(dist, hardware.usable_cores(cpu))
    backend, backend_why = choose_backend(dist.backend, ranks, dist.nodes)
    ipex, ipex_why = intel.ipex_status(ipex_requested)
    precision, precision_why, speed = choose_precision(train.precision, cpu["isa_flags"])
    launched_by = mpi.detect_launcher(dist) if launcher else None
    return {
        "versions": found,
        "mpi": launched_by,
        "host": platform.node(),
        **cpu,
        "native_bf16_flags": hardware.has_native_bf16(cpu["isa_flags"]),
        # int8 dot-product and bf16 instructions, and what they imply for inference
        "low_precision": hardware.low_precision_support(cpu["isa_flags"]),
        "matmul": speed,
        "backend": backend,
        "backend_reason": backend_why,
        "ccl_build": oneccl.build_record() if backend == "ccl" else None,
        "precision": precision,
        "precision_reason": precision_why,
        "ipex": ipex,
        "ipex_reason": ipex_why,
        **lever_record(train.speed, speed_levers.Context(dist.nodes, dist.gradient_compression)),
        "nodes": dist.nodes,
        "processes_per_node": ranks,
        "world_size": dist.nodes * ranks,
        "threads_per_process": threads_per_process(dist.threads_per_process, ranks, cpu),
    }


def workflow_files(root: Path, paths=REVISION_PATHS) -> list[Path]:
    found = []
    for name in paths:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                      and not p.name.endswith((".pyc", ".cpuddp-tmp"))]
    return sorted(found)


def revision(root: Path = ROOT) -> str:
    """Digest of the workflow's code: equal on two nodes iff they run the same code."""
    digest = hashlib.sha256()
    for path in workflow_files(root):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def node_summary(name: str, report: dict) -> dict:
    keys = ("host", "versions", "revision", "cpu_model", "sockets", "physical_cores", "logical_cpus",
            "isa_flags", "low_precision", "native_bf16_flags", "matmul", "threads_per_process", "gloo_ifname",
            "python_executable")
    return {"node": name, **{k: report.get(k) for k in keys}}


def combine(dist: DistributedSettings, train: EnvironmentTrain, named: list[tuple[str, dict]], mpi: dict) -> dict:
    """environment.json: the first node's report, the launcher, every node,
    and the precision decided once from every node's measurement."""
    first = dict(named[0][1])
    ifnames = {r.get("gloo_ifname") for _, r in named}
    precision, precision_why = precision_rule.decide(train.precision, named)
    precision, precision_why, ipex, ipex_why = precision_rule.beside_ipex(
        precision, precision_why, first.get("ipex", False), train.precision, train.ipex)
    first.update({
        "precision": precision,
        "precision_reason": precision_why,
        "ipex": ipex,
        "ipex_reason": ipex_why or first.get("ipex_reason"),
        "mpi": mpi,
        "revision": first["revision"],
        "threads_per_process": min(int(r["threads_per_process"]) for _, r in named),
        "gloo_ifname": ifnames.pop() if len(ifnames) == 1 else None,
        "node_reports": [node_summary(name, r) for name, r in named],
    })
    first.update(ccl.record(first, dist.env))
    return first


def environment_record(dist: DistributedSettings, train: EnvironmentTrain) -> dict:
    """environment.json of a run on this machine alone (no per-node launch)."""
    report = {**describe(dist, train), "revision": revision(), "python_executable": sys.executable, "gloo_ifname": None}
    return combine(dist, train, [("localhost", report)], report["mpi"])
