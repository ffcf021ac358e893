"""A launch that ends with its launcher, however the launcher ends.

mpirun starts in a session of its own (supervise.py). Beside it runs a
guard, this module as a process (`python -m workflow.scripts.launch.guard
GRACE`), in a session of its own too, so that a signal to the job's process
group or the launcher's session does not reach it. Its stdin is the read
end of a pipe whose write end only the launcher holds (close-on-exec: mpirun
and the ranks never have it). mpirun's child writes its session id into the
pipe before it execs, so the guard knows the session even if the launcher
dies a moment later. When the launcher is done it writes `done`. If the pipe
ends without it (the launcher SIGKILLed, OOM-killed, crashed), the guard
sends SIGTERM to every process of mpirun's session (ranks checkpoint and
stop), waits up to GRACE seconds (distributed.exit_grace_seconds), then
SIGKILLs what is left. It also holds the run's lock (attempt.py), so the
next try starts only once nothing of this one runs.

Why PR_SET_PDEATHSIG is not enough: it reaches only the direct child.
Intel MPI's `mpirun` is a /bin/sh script; its child mpiexec.hydra, the
hydra_pmi_proxy it forks and the ranks would live on.

Ranks set no PDEATHSIG of their own: every process mpirun starts on this
host (mpiexec.hydra, the proxy, the ranks, the ssh clients to other nodes)
is in its session, which the guard ends; and a rank's parent is the proxy,
whose death alone (with mpiexec alive) mpiexec already turns into the end
of the whole launch.

Other nodes: mpiexec.hydra reaches each node's hydra_pmi_proxy through an
ssh client in this session. SIGTERM to mpiexec.hydra makes it tell every
proxy to kill its ranks (hydra's cleanup). If that does not happen, the
ssh clients still die (SIGKILL after the grace): the proxy's control
connection to mpiexec closes, the proxy's read of it fails and it ends,
killing its ranks; a rank that outlives it loses its peers and its output
pipe. That is hydra's design, read in its source, not tested here on
several nodes. The first SIGTERM spares the ssh clients so that hydra's
cleanup can still reach the other nodes through them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DONE = b"done"
POLL_SECONDS = 0.1
KILL_WAIT_SECONDS = 5.0
SPARED = ("ssh",)  # SIGKILLed after the grace: hydra's cleanup reaches other nodes through them


class Guard:
    """The launcher's side: start the guard, `arm` mpirun's child, `release`."""

    def __init__(self, grace: float, hold: tuple[int, ...] = ()):
        read, self.write = os.pipe()  # close-on-exec: only the launcher holds the write end
        root = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "workflow.scripts.launch.guard", f"{grace:g}"],
                                         stdin=read, pass_fds=hold, start_new_session=True, env=env)
        finally:
            os.close(read)

    def arm(self) -> None:
        """In mpirun's child, after setsid and before exec: tell the guard
        which session to end (this write end closes with the exec)."""
        os.write(self.write, f"{os.getsid(0)}\n".encode())

    def release(self) -> None:
        """The launcher has ended its launch itself: the guard goes."""
        with contextlib.suppress(OSError):
            os.write(self.write, DONE + b"\n")
        with contextlib.suppress(OSError):
            os.close(self.write)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(KILL_WAIT_SECONDS)


def sessions(text: bytes) -> list[int] | None:
    """The sessions to end from what the pipe carried; None once the launcher said `done`."""
    words = text.split()
    if DONE in words:
        return None
    return [int(w) for w in words if w.isdigit()]


def members(sid: int) -> dict[int, str]:
    """pid: command name of every process in session `sid` (from /proc)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        name, fields = stat[stat.index(b"(") + 1:stat.rindex(b")")], stat[stat.rindex(b")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != b"Z":  # fields: state ppid pgrp session ...
            found[int(entry.name)] = name.decode(errors="replace")
    return found


def signal_all(pids, signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def say(line: str) -> None:
    """A line to the launcher's output, if anything still reads it. The guard's
    stderr is the launcher's: the pipe into its tee (attempt.copy_output),
    which dies with the launcher when the job's whole process group is
    killed; writing there then fails (EPIPE), and must not stop the guard
    before it has ended the launch."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for good: no second failure at exit)


def end(sid: int, grace: float) -> None:
    """SIGTERM to the session (ssh clients last), SIGKILL after `grace` s."""
    first = members(sid)
    if not first:
        return
    say(f"guard: the launcher is gone; stopping its launch (session {sid}, {len(first)} processes): "
        f"SIGTERM, SIGKILL after {grace:g} s")
    signal_all([pid for pid, name in first.items() if name not in SPARED], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and [pid for pid, n in members(sid).items() if n not in SPARED]:
        time.sleep(POLL_SECONDS)
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while (left := members(sid)) and time.monotonic() < deadline:
        signal_all(left, signal.SIGKILL)
        time.sleep(POLL_SECONDS)


def main(argv: list[str]) -> int:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # only the pipe's end matters (SIGKILL aside)
    grace, text = float(argv[0]), b""
    while chunk := os.read(0, 4096):
        text += chunk
    for sid in sessions(text) or []:
        end(sid, grace)
    return 0


if __name__ == "__main__":
    from workflow.scripts import program_loaded

    program_loaded()
    sys.exit(main(sys.argv[1:]))
