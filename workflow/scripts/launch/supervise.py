"""Watch the ranks of a launch, bound their exit, and say what happened.

Each rank keeps a status file (logs.RankStatus). Once any rank has exited,
the others get a grace period; a rank still running after it has its Python
stacks dumped into its log (SIGUSR1, for ranks on this host) and is stopped
with the launcher. A run whose ranks had all written their results before
teardown still succeeds, with a warning: nothing finished is thrown away.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time

import psutil

from workflow.scripts.common import logs
from workflow.scripts.common.errors import UserError

POLL_SECONDS = 0.5
DUMP_WAIT_SECONDS = 2.0
STOP_WAIT_SECONDS = 10.0
DONE = ("trained", "ok")  # results complete


def run(command: list[str], env: dict, log_dir, world: int, grace: float,
        quiet: bool = False) -> tuple[int, list[int]]:
    """Run the launcher; returns its exit code and the ranks it had to stop.
    `quiet` keeps the ranks' output off the console (their logs have it)."""
    for rank in range(world if log_dir else 0):
        logs.status_path(log_dir, rank).unlink(missing_ok=True)  # an earlier try's
    output = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(command, env=env, stdout=output, stderr=output)
    try:
        exited_at = None
        while proc.poll() is None:
            time.sleep(POLL_SECONDS)
            if not log_dir:
                continue
            statuses = [logs.read_status(log_dir, rank) for rank in range(world)]
            if exited_at is None and any(map(has_exited, statuses)):
                exited_at = time.monotonic()
            if exited_at is not None and time.monotonic() - exited_at > grace and proc.poll() is None:
                stuck = [s["rank"] for s in statuses if s and not has_exited(s)]
                dump_stacks([statuses[rank] for rank in stuck])
                stop(proc, [statuses[rank] for rank in stuck])
                return proc.returncode, stuck
        return proc.returncode, []
    except BaseException:
        stop(proc, [])
        raise


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
    """The launcher first (it stops its ranks on every node), then any rank
    of this host that outlived it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    signal_ranks(ranks, signal.SIGKILL)


def stuck_at(log_dir, rank: int) -> str:
    """The innermost frame of the main thread in the rank's last stack dump."""
    text = logs.log_path(log_dir, rank).read_text(errors="replace") if log_dir else ""
    block = text.rsplit("Current thread", 1)
    frame = re.search(r'File "([^"]+)", line (\d+) in (\S+)', block[1]) if len(block) == 2 else None
    if not frame:
        return "no stack dump (the rank is on another host)"
    path, line, func = frame.groups()
    return f"stuck in {func} ({os.path.relpath(path)}:{line})"


def judge(code: int, stuck: list[int], log_dir, world: int, grace: float) -> None:
    """Succeed, warn or raise the one line that says what happened."""
    lines = [f"rank {rank} on {rank_host(log_dir, rank)} did not exit {grace:g} s after another rank had "
             f"exited, so the launcher stopped it; {stuck_at(log_dir, rank)}; "
             f"stack in {logs.log_path(log_dir, rank)}" for rank in stuck]
    if code == 0 and not stuck:
        return
    if log_dir and all(logs.read_status(log_dir, rank).get("status") in DONE for rank in range(world)):
        for line in lines or [f"the launcher ended with exit code {code} after every rank had finished"]:
            print(f"warning: {line}; every rank had written its results, so the run counts", file=sys.stderr)
        return
    others = [f for f in (rank_failures(log_dir, world) if log_dir else []) if f[0] not in stuck]
    if lines and not others:
        raise UserError(lines[0])
    raise report_failure(code, log_dir, others)


def rank_host(log_dir, rank: int) -> str:
    """The host a rank ran on, from its status file or its log's line prefix."""
    host = logs.read_status(log_dir, rank).get("host")
    path = logs.log_path(log_dir, rank)
    match = re.search(r"\[rank \d+ (\S+)\]", path.read_text()) if not host and path.is_file() else None
    return host or (match.group(1) if match else "unknown host")


def rank_failures(log_dir, world: int) -> list[tuple[int, str]]:
    """(rank, what happened) for failed ranks, root causes first: a rank that
    died leaves no exit status, and its peers then fail on the broken link."""
    died, failed = [], []
    for rank in range(world):
        status = logs.read_status(log_dir, rank)
        if status.get("status") in (None, "running"):
            died.append((rank, f"rank {rank} on {rank_host(log_dir, rank)} died without an exit status "
                               "(killed, out of memory or node lost)"))
        elif status["status"] == "error":
            failed.append((rank, f"rank {rank} on {status['host']} failed: {status['error']}"))
    return died + failed


def log_tail(log_dir, rank: int, lines: int = 20) -> str:
    path = logs.log_path(log_dir, rank)
    if not path.is_file():
        return f"(no log {path})"
    return "\n".join(path.read_text().splitlines()[-lines:])


def report_failure(code: int, log_dir, failures: list[tuple[int, str]]) -> UserError:
    """The root cause in one line, after the tail of that rank's log."""
    if not failures:
        return UserError(f"mpirun failed (exit code {code}) before the ranks started; see the lines above")
    rank, message = failures[0]
    print(f"--- last lines of {logs.log_path(log_dir, rank)} ---\n{log_tail(log_dir, rank)}", file=sys.stderr)
    return UserError(f"{message}; log: {logs.log_path(log_dir, rank)}")




def report_stopped(log_dir, world: int) -> UserError:
    """The launcher itself got SIGTERM (scancel, the job's time limit,
    preemption): the tail of a rank's log, then one line; a rank that had
    failed before the signal is named as the cause."""
    stopped = ("training was stopped by SIGTERM (scancel, the job's time limit or preemption); "
               "a rerun resumes from the newest checkpoint")
    failures = rank_failures(log_dir, world) if log_dir else []
    causes = [f for f in failures if logs.STOPPED not in f[1]]
    if causes:
        return UserError(f"{stopped}; before it, {report_failure(1, log_dir, causes)}")
    if failures:
        return report_failure(1, log_dir, [(failures[0][0], stopped)])
    return UserError(stopped)
