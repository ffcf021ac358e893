"""The one builder of "start these ranks on these hosts": mpirun or srun,
as an argument list.

Intel MPI and MPICH (hydra: -n, -ppn, -f, -genv) and Open MPI (--hostfile,
--map-by ppr:P:node, -x) differ in flags. Every rank gets its thread count,
its cores, the rendezvous address and any extra variables through the
launcher itself, so users' shells are never edited and no config text
reaches a shell. Training, the per-node environment check, node set-up and
tuning all start their ranks through `build`.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.hostfile import check_nodes
from workflow.scripts.settings.views import DistributedSettings
from workflow.scripts.launch import ccl

# Below Linux's ephemeral range (32768-60999): the kernel never hands these
# to outgoing connections (gloo opens many), so a port found free here is not
# taken by one before rank 0 binds it.
RENDEZVOUS_PORTS = range(20000, 32000)


def free_port(address: str = "") -> int:
    """A port nobody listens on, for rank 0's rendezvous."""
    rng = random.Random()
    for _ in range(200):
        port = rng.choice(RENDEZVOUS_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind((address, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # a crowded range: any free port
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
        raise UserError(f"cannot resolve the first hostfile node '{hosts[0]}'; "
                        "fix the hostfile or /etc/hosts") from None
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
                program: list[str], hostfile: str | None = None, extra: list[str] = (),
                passed: tuple[str, ...] = ()) -> list[str]:
    """The launcher command for one flavour, as an argument list.
    Binding is left to the ranks (pin_command), the same for every MPI.
    `passed` names variables forwarded from the launcher's own environment,
    by name only: their values (a secret) never appear in the command line."""
    if flavour == "openmpi":
        argv = [mpirun, "-n", str(nprocs), "--map-by", f"ppr:{ppn}:node", "--bind-to", "none"]
        if hostfile:
            argv += ["--hostfile", str(hostfile)]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        for key, value in env.items():
            argv += ["-x", f"{key}={value}"]
        for key in passed:
            argv += ["-x", key]
        return argv + list(extra) + program
    argv = [mpirun, "-n", str(nprocs), "-ppn", str(ppn)]
    if hostfile:
        argv += ["-f", str(hostfile)]
    for key, value in env.items():
        argv += ["-genv", key, str(value)]
    if passed:
        argv += ["-genvlist", ",".join(passed)]
    return argv + list(extra) + program


def srun_argv(nodes: int, ppn: int, threads: int, program: list[str], extra: list[str] = ()) -> list[str]:
    """srun inside a Slurm allocation; the environment travels with srun itself."""
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes * ppn}", f"--ntasks-per-node={ppn}",
            f"--cpus-per-task={threads}", "--cpu-bind=cores", "--kill-on-bad-exit=1", *extra, *program]


def pin_command(threads: int, program: list[str]) -> list[str]:
    """Each rank binds itself to its share of its node's cores, then runs `program`."""
    return [sys.executable, "-m", "workflow.scripts.launch.pin", "--threads", str(threads), "--", *program]


def base_env(threads: int, extra: dict | None = None) -> dict:
    """What every launched process needs; Open MPI forwards only what -x
    names, and the steps import from the repo."""
    return {"OMP_NUM_THREADS": str(threads), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "PATH": os.environ.get("PATH", ""), **(extra or {})}


def rank_env(info: dict, extra: dict, addr: str, port: int) -> dict:
    """Variables every training rank needs, user extras last so they can override."""
    threads = int(info["threads_per_process"])
    env = base_env(threads, {"MKL_NUM_THREADS": str(threads), "MASTER_ADDR": addr, "MASTER_PORT": str(port),
                             "TOKENIZERS_PARALLELISM": "false",
                             # Ranks load the launch node's local copy (data_fetch_model): never the Hub.
                             "HF_HUB_OFFLINE": "1"})
    if info["mpi"]["flavour"] == "intel":
        # One pinning domain of OMP_NUM_THREADS cores per rank (for MPI codes).
        env["I_MPI_PIN_DOMAIN"] = "omp"
    ifname = info.get("gloo_ifname")
    if ifname and info["backend"] == "gloo" and info.get("nodes", 1) > 1:
        env["GLOO_SOCKET_IFNAME"] = ifname  # the interface that reaches MASTER_ADDR on every node
    env.update(ccl.rank_variables(info))  # ccl: setvars.sh's variables and oneCCL's tuning
    env.update({k: str(v) for k, v in extra.items()})
    return env


def ranks_argv(dist: DistributedSettings, mpi: dict, hosts: list[str] | None, ppn: int, threads: int, env: dict,
               program: list[str], workdir=None, passed: tuple[str, ...] = ()) -> list[str]:
    """`ppn` ranks of `threads` threads on each node: the hostfile's first
    `nodes` hosts (this machine without one), or Slurm's allocation."""
    extra = dist.launcher_args
    if dist.launcher == "srun":
        return srun_argv(dist.nodes, ppn, threads, program, extra)
    hostfile = None
    if hosts:
        # A folder of its own (mkdtemp: 0700 in /tmp, mpirun's alone), not an output.
        hostfile = write_hostfile(mpi["flavour"], hosts, ppn, workdir or tempfile.mkdtemp(prefix="cpuddp-"))
    nprocs = (len(hosts) if hosts else 1) * ppn
    return mpirun_argv(mpi["flavour"], mpi["mpirun"], nprocs, ppn, env, program, hostfile, extra, passed)


def run_hosts(dist: DistributedSettings) -> list[str] | None:
    """The hosts a run uses (None: this machine, or Slurm's allocation)."""
    if dist.launcher == "srun" or not dist.hostfile:
        return None
    return check_nodes(dist.hostfile, dist.nodes)


def build(dist: DistributedSettings, info: dict, program: list[str], workdir=None,
          hosts: list[str] | None = None) -> list[str]:
    """The whole launch command of a training run, every rank pinned to its
    cores (workdir receives the launcher's hostfile; `hosts` replaces the
    run's own, e.g. without a node that was lost)."""
    threads, ppn = int(info["threads_per_process"]), ranks_per_node(dist, info)
    if dist.launcher == "srun" and dist.nodes * ppn == 1 and "SLURM_STEP_ID" in os.environ:
        return program  # already the one rank's srun step: a nested srun would wait for its CPUs
    hosts = hosts or run_hosts(dist)
    env = {}
    if dist.launcher != "srun":  # srun ranks get theirs from launch_env
        addr = master_addr(hosts)
        env = rank_env(info, dist.env, addr, master_port(addr))
        program = pin_command(threads, program)
    return ranks_argv(dist, info["mpi"], hosts, ppn, threads, env, program, workdir, tracker_variables())


# What rank 0's trackers read (report.trackers), forwarded by name when set:
# the launch node's values reach the first node, and a token never shows in argv.
TRACKER_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                     "MLFLOW_TRACKING_PASSWORD", "WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ENTITY")


def tracker_variables() -> tuple[str, ...]:
    return tuple(name for name in TRACKER_VARIABLES if name in os.environ)


def ranks_per_node(dist: DistributedSettings, info: dict) -> int:
    """As the environment check decided (a tuned layout may change it)."""
    return int(info.get("processes_per_node") or dist.processes_per_node)


def per_node(dist: DistributedSettings, mpi: dict, hosts: list[str] | None, program: list[str], env: dict,
             workdir=None, passed: tuple[str, ...] = ()) -> list[str]:
    """One single-threaded rank on each node (the environment check, node
    set-up), with the launcher and options that train; `passed` as in mpirun_argv."""
    return ranks_argv(dist, mpi, hosts, 1, 1, base_env(1, env), program, workdir, passed)


def launch_env(dist: DistributedSettings, info: dict) -> dict:
    """The launcher's own environment; srun hands it to every rank. The batch
    script runs on the allocation's first node, where srun puts rank 0."""
    if dist.launcher != "srun":
        return {**os.environ, **ccl.launcher_variables(info, dist.env)}
    addr = master_addr([slurm_first_node()])
    return {**os.environ, **rank_env(info, dist.env, addr, master_port(addr))}


def slurm_first_node() -> str:
    """The allocation's first node (where srun puts rank 0). Inside a job of
    the Slurm executor only SLURM_JOB_ID is left (its job step drops the
    other SLURM_* variables), so the node list comes from squeue then."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or job_nodelist()
    if nodelist and shutil.which("scontrol"):
        names = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                               timeout=30).stdout.split()
        if names:
            return names[0]
    return socket.gethostname()


def job_nodelist() -> str | None:
    """The node list of this Slurm job, asked of slurmctld."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job or not shutil.which("squeue"):
        return None
    done = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or None
