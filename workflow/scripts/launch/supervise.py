"""Watch the ranks of a launch, bound their exit, and say what happened.

Each rank keeps a status file (logs.RankStatus). Once any rank has exited,
the others get a grace period; a rank still running after it has its Python
stacks dumped into its log (SIGUSR1, for ranks on this host) and is stopped
with the launcher. A run whose ranks had all written their results before
teardown still succeeds, with a warning: nothing finished is thrown away.

mpirun runs in a session of its own, watched by a guard (guard.py) that
ends the session if this process dies without ending it itself. Signals
still go the way they did: a SIGTERM here is forwarded to mpirun, its
children and the ranks of this host (which checkpoint), and stop() stops
mpirun first, then what it left. A Ctrl-C in a terminal reaches only this
process now (mpirun is not in the terminal's process group): stop() ends
the launch. So does a SIGTERM while a rank has yet to start (the start
wait, distributed.start_timeout): no rank has anything to checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from workflow.scripts.common import errors, logs
from workflow.scripts.launch import lifeline
from workflow.scripts.launch import guard

POLL_SECONDS = 0.5
DUMP_WAIT_SECONDS = 2.0
STOP_WAIT_SECONDS = 10.0
DONE = ("trained", "ok")  # results complete


@dataclass
class Outcome:
    code: int
    stuck: list = field(default_factory=list)
    """Ranks the launcher had to stop after the grace period."""
    frozen: list = field(default_factory=list)
    """Of those, the ones whose process was stopped (SIGSTOP, a debugger)."""
    unstarted: list = field(default_factory=list)
    """Ranks with no status file after distributed.start_timeout (the launch was stopped)."""


def run(command: list[str], env: dict, log_dir, world: int, grace: float, quiet: bool = False,
        start_timeout: float | None = None, hold: tuple[int, ...] = ()) -> Outcome:
    """Run the launcher and watch its ranks. A SIGTERM to this process goes
    on to the launcher and the ranks here, which checkpoint and stop; one
    while ranks are still starting (nothing to checkpoint yet), or a SIGINT,
    stops the launch at once (errors.Stopped).
    `quiet` keeps the ranks' output off the console (their logs have it).
    The launcher runs in a session of its own, which a guard ends if this
    process dies by any means (guard.py; the guard also holds the fds
    `hold`, the run's lock); a rank without a status file after
    `start_timeout` seconds fails the launch."""
    for rank in range(world if log_dir else 0):
        logs.status_path(log_dir, rank).unlink(missing_ok=True)  # an earlier try's (without a try folder)
    output = subprocess.DEVNULL if quiet else None
    watchdog = guard.Guard(grace, hold)
    try:
        proc = subprocess.Popen(command, env=env, stdout=output, stderr=output, start_new_session=True,
                                preexec_fn=armed(watchdog, os.getpid()))
    except BaseException:
        watchdog.release()
        raise
    statuses: list[dict] = []
    signalled: list[float] = []

    def on_signal(signum, frame):
        missing = unstarted(statuses, log_dir, world)
        if missing or signum != signal.SIGTERM:  # nothing to checkpoint yet, or a Ctrl-C: stop() ends the launch
            errors.stop_now(signum, f"rank(s) {', '.join(map(str, missing))} to start" if missing else None)
            return  # stopping already: stop() ends the launch
        signalled.append(time.monotonic())
        signal_launcher(proc, signum)
        signal_ranks(statuses, signum)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        return watch(proc, log_dir, world, grace, statuses, start_timeout, signalled)
    except BaseException:
        stop(proc, [])
        raise
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)
        watchdog.release()


def unstarted(statuses: list[dict], log_dir, world: int) -> list[int]:
    """The ranks that have written no status file yet (none are known without a log folder)."""
    return [rank for rank in range(world) if rank >= len(statuses) or not statuses[rank]] if log_dir else []


def armed(watchdog: guard.Guard, parent: int):
    """What mpirun's child runs before exec: the guard learns its session,
    and it gets SIGTERM if the launcher (`parent`) exits first."""
    def before_exec() -> None:
        watchdog.arm()
        lifeline.die_with_parent(signal.SIGTERM, parent)
    return before_exec


def signal_launcher(proc: subprocess.Popen, signum: int) -> None:
    """mpirun and its own children: Intel MPI's `mpirun` is a script that
    runs mpiexec.hydra, which must get the signal too."""
    for process in [proc.pid, *(p.pid for p in children(proc.pid))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process, signum)


def watch(proc: subprocess.Popen, log_dir, world: int, grace: float, statuses: list,
          start_timeout: float | None = None, signalled: list = ()) -> Outcome:
    """Wait for the launcher; once a rank has exited (or a SIGTERM was
    forwarded: `signalled`), stop what is left `grace` seconds later.
    `statuses` is kept current for the signal handler. What the launcher
    started here must not outlive it (a bootstrap process of a lost node
    keeps its output open, and the job would never end)."""
    exited_at, family, started = None, [], time.monotonic()
    while proc.poll() is None:
        time.sleep(POLL_SECONDS)
        family = descendants(proc.pid) or family
        if not log_dir:
            continue
        statuses[:] = [logs.read_status(log_dir, rank) for rank in range(world)]
        if exited_at is None and any(map(has_exited, statuses)):
            exited_at = time.monotonic()
        missing = [rank for rank, s in enumerate(statuses) if not s]
        if missing and exited_at is None and start_timeout and time.monotonic() - started > start_timeout:
            stop(proc, [s for s in statuses if s])
            return Outcome(proc.returncode, unstarted=missing)
        since = exited_at if exited_at is not None else (signalled[0] if signalled else None)
        if since is not None and time.monotonic() - since > grace and proc.poll() is None:
            stuck = [s for s in statuses if s and not has_exited(s)]
            frozen = [s["rank"] for s in stuck if is_frozen(s)]
            dump_stacks(stuck)
            stop(proc, stuck)
            return Outcome(proc.returncode, [s["rank"] for s in stuck], frozen)
    if signalled:  # Intel MPI's mpirun script ends at once: give the ranks their checkpoint
        wait_for_ranks(statuses, log_dir, world, signalled[0] + grace)
    end(family)
    return Outcome(proc.returncode)


def wait_for_ranks(statuses: list, log_dir, world: int, deadline: float) -> None:
    """Until every rank of this host has exited, or `deadline` (monotonic)."""
    while time.monotonic() < deadline:
        statuses[:] = [logs.read_status(log_dir, rank) for rank in range(world)] if log_dir else statuses
        if not any(is_here(s) and not has_exited(s) for s in statuses):
            return
        time.sleep(POLL_SECONDS)


def end(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


def has_exited(status: dict) -> bool:
    """Final status written, or a rank of this host whose process is gone."""
    if status.get("status") in logs.FINAL:
        return True
    return bool(status) and is_here(status) and not pid_alive(status["pid"])


def is_here(status: dict) -> bool:
    return status.get("host") == socket.gethostname()


def pid_alive(pid: int) -> bool:
    """A zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def unlink_own_files(folder: Path, name: re.Pattern, doomed: Callable[[int], bool]) -> list[Path]:
    """Unlink this user's files in `folder` whose whole name matches `name`
    (the pid that made the file its first group) and whose pid is `doomed`;
    the ones removed. Another user's files, or a gone one's, are left be."""
    removed = []
    for path in folder.iterdir() if folder.is_dir() else []:
        found = name.fullmatch(path.name)
        try:
            if found and path.lstat().st_uid == os.geteuid() and doomed(int(found[1])):
                path.unlink()
                removed.append(path)
        except OSError:  # gone already, or not ours to remove
            continue
    return removed


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children()
    except psutil.Error:
        return []


def is_frozen(status: dict) -> bool:
    """A rank of this host whose process is stopped (it cannot even dump its stacks)."""
    try:
        return is_here(status) and psutil.Process(status["pid"]).status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def signal_ranks(statuses: list[dict], signum: int) -> None:
    for status in statuses:
        if is_here(status):
            with contextlib.suppress(ProcessLookupError):
                os.kill(status["pid"], signum)


def dump_stacks(statuses: list[dict]) -> None:
    """faulthandler in each rank writes its stacks into its own log."""
    signal_ranks(statuses, logs.STACK_SIGNAL)
    time.sleep(DUMP_WAIT_SECONDS)


def stop(proc: subprocess.Popen, ranks: list[dict]) -> None:
    """The launcher first (it stops its ranks on every node), then what it
    started here that outlived it (bootstrap processes that hold its output
    open, ranks of this host)."""
    family = descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    end(family)
    signal_ranks(ranks, signal.SIGKILL)
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while any(is_here(r) and pid_alive(r["pid"]) for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)  # gone before the verdict, not just signalled
