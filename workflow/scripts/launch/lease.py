"""Host leases: which of the hostfile's nodes each running launch holds, so
that runs packed onto a cluster (profiles/xeon with -j N) never share a node.

Snakemake counts the nodes (the `nodes` resource, as many as the hostfile
lists) and starts a run only when enough are free; which nodes those are is
decided here, at launch, on the launch node where every launcher runs. The
leases live in `.snakemake/cpuddp-leases/<hostfile digest>/leases.json`,
read and written under an exclusive flock, so two launches never pick the
same node. A lease is released in a `finally`; one whose process is gone (a
launcher killed with SIGKILL, a crashed node script) is stale and taken
over, recognised by its PID and that process's start time (a reused PID is
another process). events.log keeps every acquire and release, one JSON line
each, for the logs and the tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import psutil

from workflow.scripts.common.errors import UserError
from workflow.scripts.common.hostfile import read_hostfile
from workflow.scripts.common.views import distributed_of

ROOT = Path(".snakemake") / "cpuddp-leases"
WAIT_SECONDS = 600  # Snakemake's resource count makes waits rare: a stale lease, a launch outside Snakemake


def leasing(dist) -> bool:
    """Runs lease their nodes when mpirun starts them from a hostfile (under
    Slurm, Slurm places each job; without a hostfile there is one machine)."""
    dist = distributed_of(dist)
    return dist.launcher != "srun" and bool(dist.hostfile)


def folder(hostfile: str, root: Path = ROOT) -> Path:
    digest = hashlib.sha256(str(Path(hostfile).resolve()).encode()).hexdigest()[:12]
    return root / digest


def _me(owner: str) -> dict:
    pid = os.getpid()
    return {"pid": pid, "started": psutil.Process(pid).create_time(), "owner": owner}


def _alive(entry: dict) -> bool:
    try:
        return psutil.Process(entry["pid"]).create_time() == entry["started"]
    except (psutil.Error, KeyError):
        return False


@contextlib.contextmanager
def _locked(directory: Path):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read(directory: Path) -> dict:
    path = directory / "leases.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _write(directory: Path, held: dict) -> None:
    tmp = directory / "leases.json.tmp"
    tmp.write_text(json.dumps(held, indent=1))
    os.replace(tmp, directory / "leases.json")


def _log(directory: Path, event: str, owner: str, hosts: list[str]) -> None:
    line = {"time": time.time(), "event": event, "owner": owner, "pid": os.getpid(), "hosts": hosts}
    with open(directory / "events.log", "a") as handle:
        handle.write(json.dumps(line) + "\n")


def try_acquire(directory: Path, hosts: list[str], count: int, owner: str) -> list[str] | None:
    """Lease `count` free hosts (hostfile order), or None when too few are free."""
    with _locked(directory):
        held = _read(directory)
        stale = [h for h, entry in held.items() if not _alive(entry)]
        for host in stale:
            _log(directory, "stale", held.pop(host)["owner"], [host])
        free = [h for h in hosts if h not in held]
        if len(free) < count:
            if stale:
                _write(directory, held)
            return None
        chosen = free[:count]
        me = _me(owner)
        held.update({h: me for h in chosen})
        _write(directory, held)
        _log(directory, "acquire", owner, chosen)
        return chosen


def release(directory: Path, owner: str) -> None:
    """Give back the hosts this process leased as `owner`."""
    with _locked(directory):
        held = _read(directory)
        mine = [h for h, e in held.items() if e["pid"] == os.getpid() and e["owner"] == owner]
        for host in mine:
            del held[host]
        _write(directory, held)
        _log(directory, "release", owner, mine)


@contextlib.contextmanager
def held(config, owner: str, root: Path = ROOT, wait: float = WAIT_SECONDS):
    """The hosts this launch may use, leased for as long as the block runs
    (None without leasing: the run's own hosts, or Slurm's)."""
    dist = distributed_of(config)
    if not leasing(dist):
        yield None
        return
    directory, hosts = folder(dist.hostfile, root), read_hostfile(dist.hostfile)
    if dist.nodes > len(hosts):
        raise UserError(f"distributed.nodes is {dist.nodes} but the hostfile lists {len(hosts)} nodes")
    deadline = time.time() + wait
    while (chosen := try_acquire(directory, hosts, dist.nodes, owner)) is None:
        if time.time() > deadline:
            raise UserError(f"no {dist.nodes} free nodes of {dist.hostfile} after {wait:.0f} s (leases in "
                            f"{directory / 'leases.json'}); are runs started outside this workflow?")
        time.sleep(0.5)
    print(f"lease: {owner} holds {', '.join(chosen)}", file=sys.stderr, flush=True)
    try:
        yield chosen
    finally:
        release(directory, owner)
