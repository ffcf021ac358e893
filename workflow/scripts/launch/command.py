"""Launch a step on every rank with mpirun (or srun), built as an argument list.

Intel MPI and MPICH (hydra: -n, -ppn, -f, -genv) and Open MPI (--hostfile,
--map-by ppr:P:node, -x) differ in flags; the flavour comes from
`mpirun --version` or the config. Every rank gets its thread count, its
cores, the rendezvous address and any extra variables through the launcher
itself, so users' shells are never edited and no config text reaches a shell.
Under Slurm (`distributed.launcher: srun`) srun starts the ranks instead.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from workflow.scripts.common import intel
from workflow.scripts.launch import supervise
from workflow.scripts.common.errors import UserError, run_cli
from workflow.scripts.common.hostfile import check_nodes, read_hostfile  # noqa: F401  (re-exported)

FLAVOURS = ("intel", "mpich", "openmpi")
# Debian installs each MPI's launcher under its own name besides `mpirun`.
FLAVOUR_NAMES = {"intel": ("mpirun",), "mpich": ("mpirun", "mpirun.mpich"),
                 "openmpi": ("mpirun", "mpirun.openmpi")}
USER_PATH = "CPUDDP_USER_PATH"  # PATH as the user started Snakemake (smk_env.py)


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
        ("openmpi", r"\((?:Open MPI|OpenRTE)\) (\S+)"),
        ("mpich", r"HYDRA build details:.*?Version:\s+(\S+)"),
    )
    for flavour, pattern in patterns:
        match = re.search(pattern, text, re.S)
        if match:
            return {"flavour": flavour, "version": match.group(1)}
    raise UserError("cannot tell which MPI `mpirun` is (not Intel MPI, MPICH or Open MPI); "
                    "put Intel MPI, MPICH or Open MPI's mpirun first on PATH, or set distributed.mpirun")


def search_path() -> list[str]:
    """Where mpirun is looked for: the user's PATH first, then this venv's bin."""
    user = os.environ.get(USER_PATH) or os.environ.get("PATH", "")
    dirs = [d for d in user.split(os.pathsep) if d]
    venv = os.path.dirname(sys.executable)
    return dirs + ([venv] if venv not in dirs else [])


def mpirun_candidates(requested: str) -> list[str]:
    names = ("mpirun",) if requested == "auto" else FLAVOUR_NAMES[requested]
    found = []
    for folder in search_path():
        for name in names:
            path = os.path.join(folder, name)
            if os.access(path, os.X_OK) and os.path.isfile(path):
                real = os.path.realpath(path)  # MPICH finds its proxy next to the real file
                if real not in found:
                    found.append(real)
    return found


def describe_mpirun(path: str) -> dict:
    return {"mpirun": os.path.realpath(path), **parse_mpi_version(_version_text(path))}


def detect_mpi(requested: str = "auto", mpirun: str | None = None) -> dict:
    """The mpirun to use: path (symlinks resolved), flavour and version.

    `mpirun` (distributed.mpirun) names one explicitly; otherwise `auto` takes
    the first `mpirun` on the user's PATH (then the venv's Intel MPI), and a
    named flavour the first mpirun of that flavour (mpirun, mpirun.<flavour>).
    """
    if mpirun:
        path = shutil.which(mpirun)
        if path is None:
            raise UserError(f"distributed.mpirun: {mpirun} not found or not executable")
        found = describe_mpirun(path)
        if requested not in ("auto", found["flavour"]):
            raise UserError(f"distributed.mpi is {requested} but distributed.mpirun {mpirun} is "
                            f"{found['flavour']} {found['version']}; fix one of them (or set distributed.mpi: auto)")
        return found
    candidates = mpirun_candidates(requested)
    if not candidates:
        if requested == "auto":
            raise UserError("mpirun not found on PATH; run `make venv` (Intel MPI) or install MPICH / Open MPI")
        raise UserError(f"distributed.mpi is {requested} but no {requested} mpirun was found on PATH "
                        f"({', '.join(FLAVOUR_NAMES[requested])}); install it, put it on PATH, "
                        "set distributed.mpirun, or set distributed.mpi: auto")
    seen = []
    for path in candidates:
        found = describe_mpirun(path)
        if requested in ("auto", found["flavour"]):
            return found
        seen.append(f"{path} is {found['flavour']} {found['version']}")
    raise UserError(f"distributed.mpi is {requested} but {'; '.join(seen)}; put the right mpirun first on PATH, "
                    "set distributed.mpirun or set distributed.mpi: auto")


def detect_launcher(dist: dict) -> dict:
    """What starts the ranks: the mpirun of detect_mpi, or Slurm's srun."""
    if dist.get("launcher") != "srun":
        return detect_mpi(dist["mpi"], dist.get("mpirun"))
    srun = shutil.which("srun")
    if srun is None:
        raise UserError("distributed.launcher is srun but srun is not on PATH; run inside Slurm "
                        "(snakemake --profile profiles/slurm) or set distributed.launcher: mpirun")
    text = subprocess.run([srun, "--version"], capture_output=True, text=True, timeout=30).stdout.split()
    return {"mpirun": srun, "flavour": "slurm", "version": text[-1] if text else "unknown"}


def free_port(address: str = "") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]


def is_local_address(address: str) -> bool:
    try:
        with socket.socket() as sock:
            sock.bind((address, 0))
        return True
    except OSError:
        return False


def master_addr(hosts: list[str] | None) -> str:
    """The first node's address, resolved (never assumed to be loopback)."""
    if not hosts:
        return "127.0.0.1"
    try:
        addr = socket.gethostbyname(hosts[0])
    except OSError:
        raise UserError(f"cannot resolve the first hostfile node '{hosts[0]}'; fix the hostfile or /etc/hosts")
    if addr.startswith("127.") and len(set(hosts)) > 1:
        print(f"warning: the first hostfile node '{hosts[0]}' resolves to {addr} here, which the other nodes "
              "cannot reach: list its network address in the hostfile or fix /etc/hosts", file=sys.stderr)
    return addr


def master_port(address: str) -> int:
    """A free port on the first node when it is this machine; else a random
    high one (set distributed.env.MASTER_PORT to choose it)."""
    if is_local_address(address):
        return free_port(address)
    return random.Random().randrange(29500, 30500)


def write_hostfile(flavour: str, hosts: list[str], ppn: int, folder) -> Path:
    """The first `nodes` hosts in the launcher's own syntax, `ppn` slots each."""
    lines = [f"{h} slots={ppn}" if flavour == "openmpi" else f"{h}:{ppn}" for h in hosts]
    path = Path(folder) / "hostfile"
    path.write_text("\n".join(lines) + "\n")
    return path


def mpirun_argv(flavour: str, mpirun: str, nprocs: int, ppn: int, env: dict,
                program: list[str], hostfile: str | None = None, extra: list[str] = ()) -> list[str]:
    """The launcher command for one flavour, as an argument list.
    Binding is left to the ranks (pin_command), the same for every MPI."""
    if flavour == "openmpi":
        argv = [mpirun, "-n", str(nprocs), "--map-by", f"ppr:{ppn}:node", "--bind-to", "none"]
        if hostfile:
            argv += ["--hostfile", str(hostfile)]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        for key, value in env.items():
            argv += ["-x", f"{key}={value}"]
        return argv + list(extra) + program
    argv = [mpirun, "-n", str(nprocs), "-ppn", str(ppn)]
    if hostfile:
        argv += ["-f", str(hostfile)]
    for key, value in env.items():
        argv += ["-genv", key, str(value)]
    return argv + list(extra) + program


def srun_argv(nodes: int, ppn: int, threads: int, program: list[str], extra: list[str] = ()) -> list[str]:
    """srun inside a Slurm allocation; the environment travels with srun itself."""
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes * ppn}", f"--ntasks-per-node={ppn}",
            f"--cpus-per-task={threads}", "--cpu-bind=cores", "--kill-on-bad-exit=1", *extra, *program]


def pin_command(threads: int, program: list[str]) -> list[str]:
    """Each rank binds itself to its share of its node's cores, then runs `program`."""
    return [sys.executable, "-m", "workflow.scripts.nodes.check", "pin", "--threads", str(threads), "--", *program]


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
        # One pinning domain of OMP_NUM_THREADS cores per rank (for MPI codes).
        env["I_MPI_PIN_DOMAIN"] = "omp"
    ifname = info.get("gloo_ifname")
    if ifname and info["backend"] == "gloo" and info.get("nodes", 1) > 1:
        env["GLOO_SOCKET_IFNAME"] = ifname  # the interface that reaches MASTER_ADDR on every node
    if info["backend"] == "ccl":
        env["CCL_WORKER_COUNT"] = "1"
        env.update(intel.ccl_environment())  # what oneCCL's setvars.sh would export
    env.update({k: str(v) for k, v in extra.items()})
    return env


def build(config: dict, info: dict, program: list[str], workdir=None) -> list[str]:
    """The whole launch command of a run (workdir receives the launcher's hostfile)."""
    dist = config["distributed"]
    threads = int(info["threads_per_process"])
    extra = dist.get("launcher_args", [])
    if dist.get("launcher") == "srun":
        if dist["nodes"] * dist["processes_per_node"] == 1 and "SLURM_STEP_ID" in os.environ:
            return program  # Snakemake's job step is already the one rank
        return srun_argv(dist["nodes"], dist["processes_per_node"], threads, program, extra)
    program = pin_command(threads, program)
    hosts = check_nodes(dist["hostfile"], dist["nodes"]) if dist.get("hostfile") else None
    addr = master_addr(hosts)
    env = rank_env(info, dist.get("env", {}), addr, master_port(addr))
    world = dist["nodes"] * dist["processes_per_node"]
    mpi = info["mpi"]
    hostfile = None
    if hosts:
        hostfile = write_hostfile(mpi["flavour"], hosts, dist["processes_per_node"],
                                  workdir or tempfile.mkdtemp(prefix="cpuddp-"))
    return mpirun_argv(mpi["flavour"], mpi["mpirun"], world, dist["processes_per_node"], env, program,
                       hostfile, extra)


def launch_env(config: dict, info: dict) -> dict:
    """The launcher's own environment; srun hands it to every rank. The batch
    script runs on the allocation's first node, where srun puts rank 0."""
    if config["distributed"].get("launcher") != "srun":
        return dict(os.environ)
    addr = master_addr([slurm_first_node()])
    return {**os.environ, **rank_env(info, config["distributed"].get("env", {}), addr, master_port(addr))}


def slurm_first_node() -> str:
    """The allocation's first node (where srun puts rank 0)."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if nodelist and shutil.which("scontrol"):
        names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=30).stdout.split()
        if names:
            return names[0]
    return socket.gethostname()


def per_node_job(dist: dict) -> bool:
    """Whether the environment check launches one rank per node (else it
    runs right here: this machine is the only node)."""
    return dist["nodes"] > 1 or bool(dist.get("hostfile"))


def mpi_job(dist: dict) -> bool:
    """Whether training holds the `mpi` resource: always with mpirun; under
    Slurm only with several ranks (one rank runs in Snakemake's job step)."""
    return dist.get("launcher") != "srun" or dist["nodes"] * dist["processes_per_node"] > 1


def slurm_tasks(dist: dict, ranks_per_node: int | None = None) -> dict:
    """Slurm executor resources: `tasks_per_node` or `tasks`, never both, and
    only for jobs of more than one task (None leaves a resource unset)."""
    per_node = dist["processes_per_node"] if ranks_per_node is None else ranks_per_node
    if per_node > 1:
        return {"tasks_per_node": per_node, "tasks": None}
    return {"tasks_per_node": None, "tasks": dist["nodes"] if dist["nodes"] > 1 else None}


def slurm_cpus(dist: dict) -> int | None:
    """Cores per rank; `auto` / `tuned` leave it to Slurm (give Slurm runs a number)."""
    threads = dist["threads_per_process"]
    return threads if isinstance(threads, int) else None


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
    run(config, info, program, args.log_dir)


def run(config: dict, info: dict, program: list[str], log_dir=None, quiet: bool = False) -> None:
    """Start `program` on every rank and wait, with the ranks' exit bounded
    (supervise.py); raises the one line that says what went wrong."""
    dist = config["distributed"]
    world = dist["nodes"] * dist["processes_per_node"]
    with tempfile.TemporaryDirectory(prefix="cpuddp-launch-") as workdir:
        command = build(config, info, program, workdir)
        if not quiet:
            print("launch: " + " ".join(command), file=sys.stderr, flush=True)
        code, stuck = supervise.run(command, launch_env(config, info), log_dir, world,
                                    dist["exit_grace_seconds"], quiet)
    supervise.judge(code, stuck, log_dir, world, dist["exit_grace_seconds"])


if __name__ == "__main__":
    run_cli(main)
