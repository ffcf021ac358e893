"""What oneCCL needs on every rank of a `ccl` run, set by the launcher.

From measurement (issue 19; `make bench-comm` measures it again): with its
defaults, oneCCL's all-reduce within a node was slower than gloo's (25 MB,
2 ranks: 35-41 ms against 20-22 ms); with its progress on the calling thread
(CCL_WORKER_OFFLOAD=0) and shared memory between the ranks of a node
(CCL_ATL_SHM=1) it took 4.7-5.0 ms. With nothing set, oneCCL also picks the
machine's external interface for its own rendezvous (ports from 4096 up,
apart from MASTER_PORT), so the interface is pinned to the one the run uses:
`lo` on one node, the interface that reaches the first node otherwise.

The transport follows the launcher: oneCCL's OFI transport (libfabric, TCP
between nodes) works under any launcher, Intel MPI's mpirun, MPICH's and Open
MPI's, and Slurm's srun alike; its MPI transport (oneCCL 2022.1's default)
needs Intel MPI's library started by Intel MPI's own mpirun (without it, it
aborts and both ranks hang), so OFI is set for every launcher (`make
bench-comm` measures the MPI transport under Intel MPI's mpirun too). Every launcher gives a rank its place on
its node differently, so oneCCL is told it directly (CCL_PROCESS_LAUNCHER=none
with CCL_LOCAL_RANK / CCL_LOCAL_SIZE, set by each rank: local_variables), as
the bindings themselves do outside mpirun. distributed.env overrides any of
these.
"""

from __future__ import annotations

import os

from workflow.scripts.probes import oneccl

ONE_NODE_IFACE = "lo"
# Measured: the worker thread competes with the ranks' compute threads for
# the cores; one worker is enough for the few DDP buckets of a step.
WORKER = {"CCL_WORKER_OFFLOAD": "0", "CCL_WORKER_COUNT": "1"}


def run_interface(info: dict) -> str | None:
    """The interface the run's ranks talk over: loopback on one node; across
    nodes the one every node reaches the first through (the environment check)."""
    if int(info.get("nodes", 1)) == 1:
        return ONE_NODE_IFACE
    return info.get("gloo_ifname")


def settings(info: dict) -> dict[str, str]:
    """oneCCL's tuning variables for this run's layout and launcher."""
    env = {"CCL_ATL_TRANSPORT": "ofi", "CCL_PROCESS_LAUNCHER": "none", **WORKER}
    if int(info.get("processes_per_node", 1)) > 1:
        env["CCL_ATL_SHM"] = "1"  # ranks of a node exchange through shared memory
    iface = run_interface(info)
    if iface:
        env.update(FI_PROVIDER="tcp", FI_TCP_IFACE=iface, CCL_KVS_IFACE=iface)
        if (info.get("mpi") or {}).get("flavour") == "intel":
            env["I_MPI_HYDRA_IFACE"] = iface  # hydra's own connections between nodes
    return env


def rank_variables(info: dict) -> dict[str, str]:
    """Everything a ccl rank gets from cpuddp: what oneCCL's setvars.sh
    exports, then the tuning; empty for other backends."""
    if info.get("backend") != "ccl":
        return {}
    return {**oneccl.ccl_environment(), **settings(info)}


def launcher_variables(info: dict, user_env: dict) -> dict[str, str]:
    """What the launcher process itself needs (Intel MPI's hydra reads
    I_MPI_HYDRA_IFACE from its own environment); distributed.env still wins."""
    if info.get("backend") != "ccl":
        return {}
    wanted = {k: v for k, v in settings(info).items() if k == "I_MPI_HYDRA_IFACE"}
    return {**wanted, **{k: str(v) for k, v in user_env.items() if k in wanted}}


def record(info: dict, user_env: dict) -> dict:
    """For environment.json: what cpuddp sets on ccl ranks, and which of it
    distributed.env replaced."""
    if info.get("backend") != "ccl":
        return {}
    tuned = settings(info)
    return {"ccl_env": {**oneccl.ccl_environment(), **tuned},
            "ccl_env_overridden": sorted(k for k in user_env if k in tuned or k.startswith(("CCL_", "FI_")))}


def local_variables(local_rank: int, local_size: int, environ=None) -> dict[str, str]:
    """Set by each ccl rank before oneCCL starts: its place on its node, from
    whichever launcher started it (unless distributed.env chose another
    CCL_PROCESS_LAUNCHER)."""
    environ = os.environ if environ is None else environ
    if environ.get("CCL_PROCESS_LAUNCHER", "none") != "none":
        return {}
    return {"CCL_PROCESS_LAUNCHER": "none", "CCL_LOCAL_RANK": str(local_rank), "CCL_LOCAL_SIZE": str(local_size)}
