"""Reach every node at once through the launcher that trains, one rank per
node, and read one report from each (lines.py); when some do not answer,
try each of those alone to name the node at fault."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile

from workflow.scripts.settings.views import DistributedSettings
from workflow.scripts.launch import command
from workflow.scripts.common import lines

TELLING = re.compile(r"ssh:|error|refused|denied|timed out|no route|not found|no module", re.I)


def run_bounded(argv: list[str], timeout: float, env=None) -> tuple[int | None, str, str]:
    """(exit code or None on timeout, stdout, stderr); the whole process group
    goes on timeout, so nothing is left waiting for a dead node."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
                out, err = proc.communicate(timeout=wait)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                out, err = "", ""
        return None, out or "", err or ""
    except BaseException:  # stopped while it waits (errors.Stopped): its session goes too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def parse_reports(text: str, kind: str = "NODE") -> dict[int, dict]:
    """Reports by rank: sent in parts (lines.py), or as one line each (node
    set-up's short ones); the launcher may put two ranks' lines on one."""
    found, decoder, marker = {}, json.JSONDecoder(), f"CPUDDP-{kind} "
    for part in text.split(marker)[1:]:
        try:
            item, _ = decoder.raw_decode(part)
        except json.JSONDecodeError:
            continue  # cut by another rank's output: that rank counts as silent
        found[int(item["rank"])] = item
    return {**found, **lines.read_reports(text, kind)}


def launch_per_node(dist: DistributedSettings, mpi, hosts, program, timeout, env=None, kind="NODE",
                    secret=None) -> tuple[dict, int | None, str]:
    """Reports by rank, the launcher's exit code (None: timed out) and its
    stderr. `secret` variables reach the ranks through the launcher's
    environment, named but not valued on its command line (`ps` shows that)."""
    secret = secret or {}
    with tempfile.TemporaryDirectory(prefix="cpuddp-nodes-") as workdir:
        argv = command.per_node(dist, mpi, hosts, program, env or {}, workdir, tuple(secret))
        srun = dist.launcher == "srun"
        launcher_env = {**os.environ, **command.base_env(1, env)} if srun else None
        if secret:
            launcher_env = {**(launcher_env or os.environ), **secret}
        code, out, err = run_bounded(argv, timeout, launcher_env)
    return parse_reports(out, kind), code, err


def tail(text: str, lines: int = 4) -> str:
    """The launcher's last telling lines (errors first, its advice dropped)."""
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    telling = [line for line in kept if TELLING.search(line)]
    return " | ".join((telling or kept)[-lines:]) or "(nothing)"


def reach_each(dist: DistributedSettings, mpi, hosts, program, timeout, env=None, kind="NODE",
               secret=None) -> tuple[list[dict], list[str]]:
    """All nodes at once; when some do not answer, each of those alone (in
    parallel) to tell which node is at fault. Returns (reports, problems)."""
    names = hosts or [f"node {i}" for i in range(dist.nodes)]
    found, code, err = launch_per_node(dist, mpi, hosts, program, timeout, env, kind, secret)
    failures = {i: (code, err) for i in range(len(names)) if i not in found}
    if failures and hosts and len(hosts) > 1:
        def alone(i):
            return i, launch_per_node(dist, mpi, [hosts[i]], program, timeout, env, kind, secret)

        with concurrent.futures.ThreadPoolExecutor(len(failures)) as pool:
            for i, (one, one_code, one_err) in list(pool.map(alone, list(failures))):
                if 0 in one:
                    found[i] = {**one[0], "rank": i}
                    del failures[i]
                else:
                    failures[i] = (one_code, one_err)
    problems = [unreachable(names[i], timeout, *failures[i]) for i in sorted(failures)]
    return [found[i] for i in sorted(found)], problems


def unreachable(name: str, timeout: float, code: int | None, err: str) -> str:
    if code is None:
        return (f"node {name} did not answer within {timeout:g} s (down, unreachable, ssh asking for a "
                "password, or a firewall between the nodes); "
                "see docs/troubleshooting.md, Start-up, the nodes and the network")
    return f"node {name} did not answer (launcher exit code {code}): {tail(err)}"
