"""bench/comm_bench.py across two test hosts: network namespaces on this
machine (tests/netns/hosts.py), one rank on each, joined by a veth bridge.

`across` (root) makes the hosts and runs the bench's measurement on the first
one, which reaches the second through Intel MPI's ssh bootstrap with
tests/netns/enter as `ssh`, as the multi-node tests do; the hosts are removed
whatever happens. The hosts share this machine's cores: what differs from
one node is the path between the ranks (TCP over veth, no shared memory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "netns"))
import hosts as netns  # noqa: E402

ENTER = REPO / "tests" / "netns" / "enter"
TIMEOUT = 3600


def across(args, data: Path, work: Path) -> dict:
    """Make two test hosts, measure on the first, remove them."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        print("--hosts skipped: test hosts need root, iproute2 (ip netns) and unshare", flush=True)
        return {"setting": "2 hosts x 1 rank", "skipped": "not root", "allreduce": {}, "training": {}}
    netns.sweep()
    work.mkdir(parents=True)
    prefix, hosts, mapping = netns.create(2, work)
    try:
        spec = work / "spec.json"
        spec.write_text(json.dumps({"hosts": [h.name for h in hosts], "data": str(data), "work": str(work),
                                    "out": str(work / "result.json")}))
        argv = [sys.executable, "-m", "bench.comm_bench", "--inside-hosts", str(spec), "--repeats",
                str(args.repeats), "--steps", str(args.steps), "--runs", str(args.runs)]
        on_first = ["ip", "netns", "exec", hosts[0].namespace, "unshare", "--uts", "sh", "-c",
                    'hostname "$0" && exec "$@"', hosts[0].name, *argv]
        env = {**os.environ, "CPUDDP_NETNS_MAP": str(mapping), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        subprocess.run(on_first, env=env, cwd=REPO, timeout=TIMEOUT, check=False)
        out = work / "result.json"
        return json.loads(out.read_text()) if out.exists() else {"setting": "2 hosts x 1 rank", "error": "no result"}
    finally:
        netns.remove(prefix)


def inside(args, measure) -> None:
    """On the first test host: the bench's measurement over both hosts."""
    spec = json.loads(Path(args.inside_hosts).read_text())
    work = Path(spec["work"])
    (work / "runs").mkdir(parents=True, exist_ok=True)
    hostfile = work / "hostfile"
    hostfile.write_text("".join(f"{h}\n" for h in spec["hosts"]))
    dist = {"hostfile": str(hostfile), "nodes": 2, "processes_per_node": 1, "threads_per_process": 1,
            "mpi": "intel", "launcher_args": ["-bootstrap", "ssh", "-bootstrap-exec", str(ENTER),
                                              "-iface", netns.IFACE]}
    # What the per-node environment check finds on these hosts: the interface between them.
    result = measure("2 hosts x 1 rank", args, Path(spec["data"]), work / "runs", dist,
                     {"gloo_ifname": netns.IFACE, "nodes": 2, "processes_per_node": 1})
    Path(spec["out"]).write_text(json.dumps(result))
