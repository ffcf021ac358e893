"""A launcher stopped while it waits (launch/__main__.py, errors.Stopped):
for the run's lock (another try holds it), for a lease (another run holds
the only node) or for its ranks to start (a node whose login hangs). A
SIGTERM to the launcher, or a SIGINT to its process group (Ctrl-C in a
terminal), ends it with 128 + the signal and one line naming the wait; the
try lock, the lease lock and its leases are given back, and nothing of its
launch runs on. Real launcher processes; the start wait runs Intel MPI's
mpirun."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers.background import Background
from helpers.try_launch import ENV, SLOW_SSH, locked, write_launch
from helpers.workflow import REPO

SIGNALS = [signal.SIGTERM, signal.SIGINT]

HOLD_THE_TRY_LOCK = ("import sys, time; from workflow.scripts.launch import attempt\n"
                     "with attempt.locked(sys.argv[1], 0):\n    print('in', flush=True); time.sleep(300)")
HOLD_THE_NODE = ("import sys, time; from workflow.scripts.launch import lease\n"
                 "from workflow.scripts.settings.views import DistributedSettings\n"
                 "dist = DistributedSettings.of({'hostfile': sys.argv[1], 'nodes': 1})\n"
                 "with lease.held(dist, '/another/run', 'training'):\n    print('in', flush=True); time.sleep(300)")


def holder(program: str, argument) -> subprocess.Popen:
    """A process that holds a lock or lease until it is killed (it says `in` once it does)."""
    proc = subprocess.Popen([sys.executable, "-c", program, str(argument)], stdout=subprocess.PIPE, text=True,
                            cwd=REPO, env=ENV)
    assert proc.stdout.readline() == "in\n"
    return proc


def stop(launch: Background, signum: int, waits_when) -> tuple[int, str]:
    """Once `waits_when` (its output says that text, or the function says so):
    SIGTERM to the launcher, or SIGINT to its whole process group (as Ctrl-C:
    the tee of its output too). (exit code, output)."""
    ready = waits_when if callable(waits_when) else lambda: waits_when in launch.output()
    launch.wait_until(f"the launcher waits ({waits_when!r})", ready, 200)
    if signum == signal.SIGINT:
        os.killpg(launch.pid, signum)
    else:
        launch.send_signal(signum)
    out, _ = launch.communicate(timeout=60)
    return launch.returncode, out


def the_line(out: str) -> str:
    """The launcher's last line, and nothing else of the stop (no traceback)."""
    assert "Traceback" not in out, out
    return out.strip().splitlines()[-1]


def free(path: Path) -> bool:
    """Nobody holds the flock on `path`."""
    with open(path) as handle:
        return locked(handle)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_launcher_stopped_while_it_waits_for_the_runs_lock(tmp_path, signum):
    argv = write_launch(tmp_path, {"exit_grace_seconds": 120})  # a wait of 135 s: the signal comes long before
    lock = tmp_path / "results/run/try.lock"
    other = holder(HOLD_THE_TRY_LOCK, lock.parent)
    try:
        with Background(argv, env=ENV, cwd=REPO) as launch:
            code, out = stop(launch, signum, "another try of this run is still running")
    finally:
        other.kill()
        other.wait()
    assert code == 128 + signum, out
    assert the_line(out) == (f"stopped by {signum.name} while waiting for the run's lock {lock}; "
                             "what this process held is given back")
    assert not (tmp_path / "logs").exists() and not (tmp_path / "results/run/tries.json").exists()
    assert free(lock)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_launcher_stopped_while_it_waits_for_a_lease(tmp_path, signum):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("busy-node\n")
    argv = write_launch(tmp_path, {"hostfile": str(hostfile), "nodes": 1})
    leases = tmp_path / ".cpuddp-leases"
    other = holder(HOLD_THE_NODE, hostfile)
    try:
        with Background(argv, env=ENV, cwd=REPO) as launch:
            code, out = stop(launch, signum, "waits up to 600 s for 1 free node(s)")
            launcher = launch.pid
        held = json.loads((leases / "leases.json").read_text())
    finally:
        other.kill()
        other.wait()
    assert code == 128 + signum, out
    line = (f"stopped by {signum.name} while waiting for 1 free node(s) of {hostfile}; "
            "what this process held is given back")
    assert the_line(out) == line
    assert held == {"busy-node": {**held["busy-node"], "pid": other.pid}}  # only the other run's lease
    assert not [e for e in map(json.loads, (leases / "events.log").read_text().splitlines())
                if e["pid"] == launcher and e["event"] == "acquire"]
    assert free(leases / "lock") and free(tmp_path / "results/run/try.lock")
    assert (tmp_path / "logs/try-1/launcher.log").read_text().strip().splitlines()[-1] == line  # its tee lived on


def of_the_try(work: Path) -> list[psutil.Process]:
    """Live processes that name `work` (mpiexec.hydra, the proxy, the hung login)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            if str(work) in " ".join(proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_launcher_stopped_while_its_ranks_start(tmp_path, mpi_path, signum):
    ssh = tmp_path / "slow-ssh"
    ssh.write_text(SLOW_SSH)
    ssh.chmod(0o755)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{socket.gethostname()}\nstuck-node\n")
    argv = write_launch(tmp_path, {"hostfile": str(hostfile), "nodes": 2, "mpi": "intel", "start_timeout": 240,
                                   "check_timeout_seconds": 10,
                                   "launcher_args": ["-bootstrap", "ssh", "-bootstrap-exec", str(ssh)]})
    with Background(argv, env=ENV, cwd=REPO) as launch:
        code, out = stop(launch, signum, lambda: "mpiexec.hydra" in {p.info["name"] for p in of_the_try(tmp_path)})
    assert code == 128 + signum, out
    assert the_line(out) == (f"stopped by {signum.name} while waiting for rank(s) 0, 1 to start; "
                             "what this process held is given back")
    deadline = time.monotonic() + 30  # the guard, in a session of its own, may still be ending the login
    while left := of_the_try(tmp_path):
        assert time.monotonic() < deadline, f"outlived the launcher: {[p.info['cmdline'] for p in left]}"
        time.sleep(0.2)
    assert json.loads((tmp_path / ".cpuddp-leases/leases.json").read_text()) == {}  # released, none kept
    assert free(tmp_path / ".cpuddp-leases/lock") and free(tmp_path / "results/run/try.lock")
    tries = json.loads((tmp_path / "results/run/tries.json").read_text())
    assert tries[0]["outcome"] == "failed" and tries[0]["error"].startswith(f"{signum.name} while waiting")
