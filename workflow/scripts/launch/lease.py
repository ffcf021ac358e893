"""Host leases: which of the hostfile's nodes each run holds, so that runs
packed onto a cluster (profiles/xeon with -j N) never share a node, from
one checkout or several, one user or several, one launch machine or more.

Where. The leases of a hostfile live in one absolute folder: the
`.cpuddp-leases/` folder next to the hostfile (symlinks resolved), or
`distributed.lease_dir` (absolute; the profile sets it where the hostfile's
folder is read-only or where several hostfiles list the same nodes). Every
checkout that launches on the same nodes must see the same folder; it is
never relative to the working directory. `leases.json` maps a host name to
its entry; `events.log` keeps every change, one JSON line each.

Who. An entry names the run (its absolute results folder), the role
(environment check or training), and the holder: host name, PID and that
process's start time (a reused PID is another process). An entry is taken
over as stale only when its holder is provably gone: it was written on this
very host and that process no longer exists. An entry from another host is
never taken over from here: a launch that cannot find free nodes waits
(WAIT_SECONDS) and then fails with one line naming each holder's host and
PID, and how to clear the entry once that launcher is really gone. A
holder stopped by SIGTERM or SIGINT (errors.Stopped) gives its entries
back, kept for nobody; only SIGKILL leaves them behind.

The lock. leases.json is read and written under an exclusive flock on
`lock`, polled (LOCK_NB) for at most LOCK_SECONDS. Its holder writes its
host and PID into the lock file, so a launch that gives up names it (a
launcher stopped with Ctrl-Z inside the lock blocks the others for that
long, then every launch fails saying which process to resume or end). The
lock is held for a read and a write only, never while ranks run.

One lease per run. The environment check and the training of a run use the
same nodes. When the check ends, its lease is kept for the run (a
reservation: `kept` entries, whose holder has exited); the run's training
takes exactly those hosts back. A reservation never makes anyone wait:
Snakemake's `nodes` resource counts only running jobs, so between a run's
check and its training it may start another run's check or training on
those nodes, and that launch then takes free hosts first and reservations
of other runs only when too few are free. Nothing waits for a run that is
not running, so the count and the leases cannot deadlock. A training whose
reservation was (partly) taken leases free nodes instead and checks them
first, under its own lease (launch/new_nodes.py: nodes/check.py --confirm): it trains only on
nodes that were checked and agree with environment.json (among free nodes
and other reservations it prefers those environment.json describes). A
training that fails keeps its lease for the run's next try (retries start
on the same nodes; distributed.min_nodes may still drop the ones that no
longer answer); a training that ends releases it. Across launch machines or
checkouts (separate Snakemakes, no shared count) a launch may wait, bounded,
for another's training; reservations still yield, so a sweep stopped after
its checks never blocks anyone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

import psutil

from workflow.scripts.common.errors import Stopped, UserError, waiting
from workflow.scripts.settings.hostfile import read_hostfile
from workflow.scripts.settings.views import DistributedSettings

FOLDER = ".cpuddp-leases"
WAIT_SECONDS = 600  # for free nodes: Snakemake's count makes waits rare (another checkout, a launch outside it)
LOCK_SECONDS = 60  # for the lock, held for a read and a write
HOST = socket.gethostname()


def leasing(dist: DistributedSettings) -> bool:
    """Runs lease their nodes when mpirun starts them from a hostfile (under
    Slurm, Slurm places each job; without a hostfile there is one machine)."""
    return dist.launcher != "srun" and bool(dist.hostfile)


def folder(dist: DistributedSettings) -> Path:
    """The absolute lease folder of a run's hostfile: distributed.lease_dir,
    else `.cpuddp-leases/` next to the hostfile."""
    if dist.lease_dir:
        path = Path(dist.lease_dir).expanduser()
        if not path.is_absolute():
            raise UserError(f"distributed.lease_dir is {dist.lease_dir!r}: give an absolute path, one that every "
                            "checkout launching on these nodes sees")
        return path
    return Path(dist.hostfile).resolve().parent / FOLDER


def _writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{HOST}-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise UserError(f"cannot keep host leases in {directory} ({err.strerror}): make that folder writable for "
                        "every user who launches on these nodes, or set distributed.lease_dir to one that is") \
            from None


def _me(run: str, role: str) -> dict:
    pid = os.getpid()
    return {"run": run, "role": role, "host": HOST, "pid": pid, "started": psutil.Process(pid).create_time(),
            "since": time.time()}


def _gone(entry: dict) -> bool:
    """Provably gone: the holder ran on this host and no longer exists."""
    if entry.get("host") != HOST:
        return False
    try:
        return psutil.Process(entry["pid"]).create_time() != entry["started"]
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, KeyError):
        return False


def _holder(entry: dict) -> str:
    """`pid P on host H` and, where this host can tell, what that process is doing."""
    text = f"pid {entry.get('pid')} on host {entry.get('host')}"
    if entry.get("host") == HOST:
        try:
            if psutil.Process(entry["pid"]).status() == psutil.STATUS_STOPPED:
                text += f" (stopped: resume it with `kill -CONT {entry['pid']}` or end it)"
        except (psutil.Error, KeyError):
            pass
    return text


@contextlib.contextmanager
def _locked(directory: Path, timeout: float = LOCK_SECONDS):
    """The exclusive lock on leases.json, polled; its holder is written into it."""
    _writable(directory)
    path = directory / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with waiting(f"the lease lock {path}"):
            _wait_for_lock(fd, path, timeout)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"host": HOST, "pid": os.getpid()}).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _wait_for_lock(fd: int, path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                try:
                    holder = _holder(json.loads(os.pread(fd, 4096, 0) or b"{}"))
                except ValueError:
                    holder = "a process that wrote no holder"
                raise UserError(f"the lease lock {path} is held for more than {timeout:.0f} s by {holder}; "
                                "no launch can pick nodes until it lets go") from None
            time.sleep(0.05)


def _read(directory: Path) -> dict:
    path = directory / "leases.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _write(directory: Path, held: dict) -> None:
    tmp = directory / f"leases.json.{HOST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(held, indent=1))
    os.replace(tmp, directory / "leases.json")


def _log(directory: Path, event: str, run: str, role: str, hosts: list[str]) -> None:
    line = {"time": time.time(), "event": event, "run": run, "role": role, "host": HOST, "pid": os.getpid(),
            "hosts": hosts}
    with open(directory / "events.log", "a") as handle:
        handle.write(json.dumps(line) + "\n")


def try_acquire(directory: Path, hosts: list[str], count: int, run: str, role: str = "launch",
                lock_wait: float = LOCK_SECONDS, prefer: list[str] = ()) -> list[str] | None:
    """Lease `count` of `hosts` for `run`, or None when too few are free:
    the run's own reservation first, then free hosts, then other runs'
    reservations; within each, those in `prefer` (the hosts its
    environment.json describes) first, then hostfile order."""
    with _locked(directory, lock_wait):
        held = _read(directory)
        stale = [h for h, e in held.items() if not e.get("kept") and _gone(e)]
        for host in stale:
            entry = held.pop(host)
            _log(directory, "stale", entry.get("run", "?"), entry.get("role", "?"), [host])
        own = [h for h in hosts if h in held and held[h].get("kept") and held[h].get("run") == run]
        free = [h for h in hosts if h not in held]
        others = [h for h in hosts if h in held and held[h].get("kept") and held[h].get("run") != run]
        chosen = (own + sorted(free, key=lambda h: h not in prefer) + sorted(others, key=lambda h: h not in prefer))
        chosen = chosen[:count]
        if len(chosen) < count:
            if stale:
                _write(directory, held)
            return None
        for host in others:
            if host in chosen:
                _log(directory, "yield", held[host]["run"], held[host].get("role", "?"), [host])
        for host in own:
            if host not in chosen:
                del held[host]
        me = _me(run, role)
        held.update({h: me for h in chosen})
        _write(directory, held)
        _log(directory, "acquire", run, role, chosen)
        return chosen


def release(directory: Path, run: str, role: str = "launch", keep: bool = False,
            lock_wait: float = LOCK_SECONDS) -> None:
    """Give back the hosts this process leased for `run`, or with `keep`
    turn them into the run's reservation."""
    with _locked(directory, lock_wait):
        held = _read(directory)
        mine = [h for h, e in held.items()
                if e.get("host") == HOST and e.get("pid") == os.getpid() and e.get("run") == run]
        for host in mine:
            if keep:
                held[host] = {**held[host], "kept": True}
            else:
                del held[host]
        _write(directory, held)
        _log(directory, "keep" if keep else "release", run, role, mine)


def holders(directory: Path, hosts: list[str]) -> str:
    """Who holds `hosts`, one clause per holder (for the message of a launch that gave up)."""
    held = _read(directory)
    by = {}
    for host in hosts:
        if host in held and not held[host].get("kept"):
            by.setdefault(_holder(held[host]) + f", run {held[host].get('run')}", []).append(host)
    return "; ".join(f"{', '.join(h)} by {who}" for who, h in by.items()) or "nobody now"


@contextlib.contextmanager
def held(dist: DistributedSettings, run: str, role: str, keep_when: str = "never", wait: float = WAIT_SECONDS,
         lock_wait: float = LOCK_SECONDS, prefer: list[str] = ()):
    """The hosts `run` may use, leased for as long as the block runs (None
    without leasing: the run's own hosts, or Slurm's). keep_when: "done"
    (the environment check: kept for the run's training when the block
    ends well), "failed" (training: kept for the next try when it raises),
    or "never"."""
    if not leasing(dist):
        yield None
        return
    directory, hosts = folder(dist), read_hostfile(dist.hostfile)
    if dist.nodes > len(hosts):
        raise UserError(f"distributed.nodes is {dist.nodes} but the hostfile lists {len(hosts)} nodes")
    try:
        with waiting(f"{dist.nodes} free node(s) of {dist.hostfile}"):
            chosen = _wait_for_hosts(dist, directory, hosts, run, role, wait, lock_wait, prefer)
    except Stopped:  # the signal may have come between its entries' write and their return
        release(directory, run, role, lock_wait=lock_wait)
        raise
    print(f"lease: {role} of {run} holds {', '.join(chosen)} ({directory})", file=sys.stderr, flush=True)
    keep = False
    try:
        yield chosen
        keep = keep_when == "done"
    except Stopped:  # by hand, or the job's end: no reservation is kept for a next try
        raise
    except BaseException:
        keep = keep_when == "failed"
        raise
    finally:
        release(directory, run, role, keep=keep, lock_wait=lock_wait)


def _wait_for_hosts(dist: DistributedSettings, directory: Path, hosts: list[str], run: str, role: str,
                    wait: float, lock_wait: float, prefer: list[str]) -> list[str]:
    """The hosts leased, once enough are free; says once that it waits, for whom."""
    deadline, said = time.time() + wait, False
    while (chosen := try_acquire(directory, hosts, dist.nodes, run, role, lock_wait, prefer)) is None:
        if time.time() > deadline:
            raise UserError(
                f"no {dist.nodes} free nodes of {dist.hostfile} after {wait:.0f} s: held {holders(directory, hosts)} "
                f"(leases in {directory / 'leases.json'}; only a holder on this host that is gone is taken over: "
                f"once a holder elsewhere is gone for sure, delete its hosts' entries there)")
        if not said:
            print(f"lease: {role} of {run} waits up to {wait:.0f} s for {dist.nodes} free node(s) of {dist.hostfile}: "
                  f"held {holders(directory, hosts)}", file=sys.stderr, flush=True)
            said = True
        time.sleep(0.5)
    return chosen
