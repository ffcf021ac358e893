"""Launch a step on every rank with mpirun, built as an argument list.

Intel MPI and MPICH (hydra: -n, -ppn, -f, -genv) and Open MPI (--hostfile,
--map-by ppr:P:node, -x) differ in flags; the flavour comes from
`mpirun --version` or the config. Every rank gets its thread count, the
rendezvous address and any extra variables through the launcher itself, so
users' shells are never edited and no config text reaches a shell.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from workflow.scripts import intel
from workflow.scripts.errors import UserError, run_cli
from workflow.scripts.hostfile import check_nodes, read_hostfile  # noqa: F401  (re-exported)

FLAVOURS = ("intel", "mpich", "openmpi")


def _version_text(mpirun: str) -> str:
    try:
        done = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"cannot run '{mpirun} --version' ({err}); install an MPI (make venv installs Intel MPI)")
    return done.stdout + done.stderr


def parse_mpi_version(text: str) -> dict:
    """Flavour and version from `mpirun --version` output."""
    patterns = (
        ("intel", r"Intel\(R\) MPI Library.*?Version (\S+)"),
        ("openmpi", r"\(Open MPI\) (\S+)"),
        ("mpich", r"HYDRA build details:.*?Version:\s+(\S+)"),
    )
    for flavour, pattern in patterns:
        match = re.search(pattern, text, re.S)
        if match:
            return {"flavour": flavour, "version": match.group(1)}
    raise UserError("cannot tell which MPI `mpirun` is (not Intel MPI, MPICH or Open MPI); "
                    "put Intel MPI, MPICH or Open MPI's mpirun first on PATH")


def detect_mpi(requested: str = "auto") -> dict:
    """The installed mpirun: path, flavour and version."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise UserError("mpirun not found on PATH; run `make venv` (Intel MPI) or install MPICH / Open MPI")
    found = {"mpirun": mpirun, **parse_mpi_version(_version_text(mpirun))}
    if requested not in ("auto", found["flavour"]):
        raise UserError(
            f"distributed.mpi is {requested} but {mpirun} is {found['flavour']} {found['version']}; "
            "put the right mpirun first on PATH or set distributed.mpi: auto"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def master_addr(hosts: list[str] | None) -> str:
    """The first node's address, resolved (never assumed to be loopback)."""
    if not hosts:
        return "127.0.0.1"
    try:
        return socket.gethostbyname(hosts[0])
    except OSError:
        raise UserError(f"cannot resolve the first hostfile node '{hosts[0]}'; fix the hostfile or /etc/hosts")


def mpirun_argv(flavour: str, mpirun: str, nprocs: int, ppn: int, env: dict,
                program: list[str], hostfile: str | None = None) -> list[str]:
    """The launcher command for one flavour, as an argument list."""
    if flavour == "openmpi":
        argv = [mpirun, "-n", str(nprocs), "--map-by", f"ppr:{ppn}:node", "--bind-to", "none"]
        if hostfile:
            argv += ["--hostfile", str(hostfile)]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        for key, value in env.items():
            argv += ["-x", f"{key}={value}"]
        return argv + program
    argv = [mpirun, "-n", str(nprocs), "-ppn", str(ppn)]
    if hostfile:
        argv += ["-f", str(hostfile)]
    for key, value in env.items():
        argv += ["-genv", key, str(value)]
    return argv + program


def rank_env(info: dict, extra: dict, addr: str, port: int) -> dict:
    """Variables every rank needs, user extras last so they can override."""
    threads = str(info["threads_per_process"])
    env = {
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "MASTER_ADDR": addr,
        "MASTER_PORT": str(port),
        "TOKENIZERS_PARALLELISM": "false",
        # Open MPI forwards only what -x names; the steps import from the repo.
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "PATH": os.environ.get("PATH", ""),
    }
    if info["mpi"]["flavour"] == "intel":
        # One pinning domain of OMP_NUM_THREADS cores per rank.
        env["I_MPI_PIN_DOMAIN"] = "omp"
    if info["backend"] == "ccl":
        env["CCL_WORKER_COUNT"] = "1"
        env.update(intel.ccl_environment())  # what oneCCL's setvars.sh would export
    env.update({k: str(v) for k, v in extra.items()})
    return env


def build(config: dict, info: dict, program: list[str]) -> list[str]:
    dist = config["distributed"]
    hostfile = dist.get("hostfile")
    hosts = check_nodes(hostfile, dist["nodes"]) if hostfile else None
    env = rank_env(info, dist.get("env", {}), master_addr(hosts), free_port())
    world = dist["nodes"] * dist["processes_per_node"]
    mpi = info["mpi"]
    return mpirun_argv(mpi["flavour"], mpi["mpirun"], world, dist["processes_per_node"], env, program, hostfile)


def rank_host(log_dir, rank: int) -> str:
    """The host a rank ran on, from its log's line prefix."""
    path = Path(log_dir) / f"rank{rank}.log"
    match = re.search(r"\[rank \d+ (\S+)\]", path.read_text()) if path.is_file() else None
    return match.group(1) if match else "unknown host"


def rank_failures(log_dir, world: int) -> list[tuple[int, str]]:
    """(rank, what happened) for failed ranks, root causes first: a rank that
    died leaves no exit status, and its peers then fail on the broken link."""
    died, failed = [], []
    for rank in range(world):
        path = Path(log_dir) / f"rank{rank}.exit"
        if not path.is_file():
            died.append((rank, f"rank {rank} on {rank_host(log_dir, rank)} died without an exit status "
                               "(killed, out of memory or node lost)"))
            continue
        status = json.loads(path.read_text())
        if status["status"] != "ok":
            failed.append((rank, f"rank {rank} on {status['host']} failed: {status['error']}"))
    return died + failed


def log_tail(log_dir, rank: int, lines: int = 20) -> str:
    path = Path(log_dir) / f"rank{rank}.log"
    if not path.is_file():
        return f"(no log {path})"
    return "\n".join(path.read_text().splitlines()[-lines:])


def report_failure(code: int, log_dir, world: int) -> UserError:
    failures = rank_failures(log_dir, world) if log_dir else []
    if not failures:
        return UserError(f"mpirun failed (exit code {code}) before the ranks started; see the lines above")
    rank, message = failures[0]
    log = Path(log_dir) / f"rank{rank}.log"
    print(f"--- last lines of {log} ---\n{log_tail(log_dir, rank)}", file=sys.stderr)
    return UserError(f"{message}; log: {log}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="run configuration JSON")
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--log-dir", help="where the ranks write rank<N>.log / rank<N>.exit")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- command for every rank")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    config = json.loads(Path(args.config).read_text())
    info = json.loads(Path(args.environment).read_text())
    command = build(config, info, program)
    print("launch: " + " ".join(command), file=sys.stderr, flush=True)
    code = subprocess.run(command).returncode
    if code != 0:
        world = config["distributed"]["nodes"] * config["distributed"]["processes_per_node"]
        raise report_failure(code, args.log_dir, world)


if __name__ == "__main__":
    run_cli(main)
