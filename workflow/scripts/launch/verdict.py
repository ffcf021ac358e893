"""What happened to the ranks of a launch, in one line: the root cause
first (a rank that froze, a rank that died, a rank that failed), a
preemption told apart from a failure, and a run whose ranks all wrote their
results counted as done."""

from __future__ import annotations

import os
import re
import sys

from workflow.scripts.common import logs
from workflow.scripts.common.errors import Preempted, RetryCannotFix, UserError
from workflow.scripts.launch.supervise import DONE, Outcome


def stuck_at(log_dir, rank: int) -> str:
    """The innermost frame of the main thread in the rank's last stack dump."""
    text = logs.log_path(log_dir, rank).read_text(errors="replace") if log_dir else ""
    block = text.rsplit("Current thread", 1)
    frame = re.search(r'File "([^"]+)", line (\d+) in (\S+)', block[1]) if len(block) == 2 else None
    if not frame:
        return "no stack dump (the rank is on another host)"
    path, line, func = frame.groups()
    return f"stuck in {func} ({os.path.relpath(path)}:{line})"


def judge(outcome: Outcome, log_dir, world: int, grace: float, timeout_minutes: float | None = None) -> None:
    """Succeed, warn, or raise the one line that says what happened."""
    if outcome.code == 0 and not outcome.stuck:
        return
    statuses = [logs.read_status(log_dir, rank) for rank in range(world)] if log_dir else []
    lines = stuck_lines(outcome, log_dir, grace, timeout_minutes)
    if statuses and all(s.get("status") in DONE for s in statuses):
        for line in lines or [f"the launcher ended with exit code {outcome.code} after every rank had finished"]:
            print(f"warning: {line}; every rank had written its results, so the run counts", file=sys.stderr)
        return
    others = [f for f in (rank_failures(log_dir, world) if log_dir else []) if f[0] not in outcome.stuck]
    if outcome.frozen:
        raise UserError(lines[0])
    preempted = [s for s in statuses if s.get("status") == "preempted"]
    if preempted and not others:
        raise Preempted(preempted[0]["error"])
    if lines and not others:
        raise UserError(lines[0])
    error = report_failure(outcome.code, log_dir, others)
    raise RetryCannotFix(str(error)) if retry_cannot_fix(statuses) else error


def retry_cannot_fix(statuses: list[dict]) -> bool:
    """Some rank raised a UserError (a config, data or model problem, which a
    retry meets again) and every rank exited: nothing died that a retry could outlive."""
    errors = [s.get("error", "") for s in statuses if s.get("status") == "error"]
    return any(e.startswith("UserError:") for e in errors) and all(s.get("status") in logs.FINAL for s in statuses)


def unstarted(ranks: list[int], hosts: list[str], start_timeout: float, silent: list[str] | None = None) -> UserError:
    """The one line for ranks that never reported in, naming the node at
    fault: `silent` (those that did not answer when asked), else the nodes of
    those ranks (`hosts`: the node of each rank)."""
    nodes = silent or list(dict.fromkeys(hosts[r] if r < len(hosts) else "unknown host" for r in ranks))
    several = len(nodes) > 1
    return UserError(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} did not start within "
                     f"distributed.start_timeout ({start_timeout:g} s), so the launch was stopped; "
                     f"node{'s' if several else ''} at fault: {', '.join(nodes)}: check that "
                     f"{'they answer' if several else 'it answers'} (ssh login, home folder, the same Python and "
                     "repository)")


def stuck_lines(outcome: Outcome, log_dir, grace: float, timeout_minutes: float | None) -> list[str]:
    """One line per rank the launcher stopped, frozen ones first."""
    lines = []
    for rank in sorted(outcome.stuck, key=lambda r: r not in outcome.frozen):
        where = f"rank {rank} on {rank_host(log_dir, rank)}"
        if rank in outcome.frozen:
            lines.append(f"{where} stopped answering: its process is stopped (SIGSTOP or a debugger), so the "
                         f"others gave up waiting (distributed.timeout_minutes, {timeout_minutes:g}, in the training "
                         "steps; longer while the model is built or saved) and the launcher "
                         f"killed it; log: {logs.log_path(log_dir, rank)}")
        else:
            lines.append(f"{where} did not exit {grace:g} s after another rank had exited, so the launcher "
                         f"stopped it; {stuck_at(log_dir, rank)}; stack in {logs.log_path(log_dir, rank)}")
    return lines


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


