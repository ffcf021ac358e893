"""A real Slurm cluster on this machine, on the test hosts of tests/netns.

The first host is the login node: munged, MariaDB, slurmdbd and slurmctld
run there, and so does Snakemake. Every other host is a compute node with
its own slurmd (its own NodeName, address and hostname; a UTS namespace
each). Everything lives in a temporary folder: slurm.conf, slurmdbd.conf,
the munge key and socket, spool and state folders, the daemons' logs and
the database. `stop` cancels every job, ends every process left in the
hosts' namespaces and the daemons it started; the namespaces go with
tests/netns/hosts.remove.

Why these plugins: all slurmds share this machine's cgroup hierarchy, and
task/cgroup or proctrack/cgroup of one node would tear down the same job's
cgroup of another (Slurm supports several slurmd per machine only when
built with --enable-multiple-slurmd). So ranks are bound by task/affinity
(sched_setaffinity, what task/cgroup also does for binding) and processes
tracked by proctrack/linuxproc.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DEBS = "slurmctld slurmd slurm-client munge slurmdbd mariadb-server"
DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd", "sacctmgr")
CLUSTER = "cpuddp"
PARTITION = "cputest"
ACCOUNT = "cpuddp-proj"
USER = "root"


@dataclass
class Cluster:
    folder: Path
    login: object  # tests/netns/hosts.Host
    nodes: list
    cpus: int
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.folder / "etc" / "slurm.conf"

    def node_names(self) -> list[str]:
        return [node.name for node in self.nodes]


def missing_programs() -> list[str]:
    return [name for name in DAEMONS + ("sbatch", "srun", "sacct", "scancel") if not shutil.which(name)]


def on_host(cluster: Cluster, host, argv: list[str]) -> list[str]:
    """argv on a test host: its network, its /etc/hosts, its own hostname,
    and this cluster's configuration as /etc/slurm (where Slurm's commands
    look for it, also inside jobs, whose environment loses SLURM_CONF).
    Not `ip netns exec`, which remounts /sys and so hides the cgroup
    hierarchy that slurmd checks at start."""
    script = ('hostname "$0" && mount --bind "/etc/netns/$1/hosts" /etc/hosts && mount --bind "$2" /etc/slurm '
              '&& shift 2 && exec "$@"')
    return ["nsenter", f"--net=/run/netns/{host.namespace}", "unshare", "--uts", "--mount", "sh", "-c", script,
            host.name, host.namespace, str(cluster.folder / "etc"), *argv]


def slurm_conf(cluster: Cluster) -> str:
    folder, login = cluster.folder, cluster.login
    nodes = "".join(f"NodeName={n.name} NodeAddr={n.address} NodeHostname={n.name} CPUs={cluster.cpus} "
                    f"Boards=1 SocketsPerBoard=1 CoresPerSocket={cluster.cpus} ThreadsPerCore=1 "
                    "RealMemory=4000 State=UNKNOWN\n" for n in cluster.nodes)
    return f"""\
ClusterName={CLUSTER}
SlurmctldHost={login.name}({login.address})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/run/slurmctld.pid
SlurmdPidFile={folder}/run/slurmd-%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=300
EnforcePartLimits=ALL
KillWait=10
SlurmdTimeout=30
MessageTimeout=10
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost={login.name}
AccountingStoragePass={folder}/munge/munge.socket
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
PlugStackConfig={folder}/etc/plugstack.conf
{nodes}PartitionName={PARTITION} Nodes=ALL Default=NO MaxTime=180 State=UP
"""


def slurmdbd_conf(cluster: Cluster) -> str:
    folder, login = cluster.folder, cluster.login
    return f"""\
DbdHost={login.name}
DbdAddr={login.address}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge/munge.socket
PidFile={folder}/run/slurmdbd.pid
LogFile={folder}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=root
StorageLoc=slurm_acct_db
"""


def write_files(cluster: Cluster) -> None:
    folder = cluster.folder
    for sub in ("etc", "munge", "state", "run", "log", "db", *(f"spool/{n.name}" for n in cluster.nodes)):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    (folder / "munge").chmod(0o755)
    key = folder / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    cluster.conf.write_text(slurm_conf(cluster))
    (folder / "etc" / "plugstack.conf").write_text("")
    dbd = folder / "etc" / "slurmdbd.conf"
    dbd.write_text(slurmdbd_conf(cluster))
    dbd.chmod(0o600)


def daemon(cluster: Cluster, host, argv: list[str], log: str) -> subprocess.Popen:
    """A daemon in the foreground on a test host, its output in log/<log>."""
    with open(cluster.folder / "log" / log, "ab") as out:
        proc = subprocess.Popen(on_host(cluster, host, argv), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    cluster.procs.append(proc)
    return proc


def wait_until(what: str, ready, cluster: Cluster, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = [p.args for p in cluster.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{what}: a daemon exited: {dead[0][-6:]}; logs in {cluster.folder / 'log'}")
        if ready():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} not ready within {timeout:g} s; logs in {cluster.folder / 'log'}")


def run(cluster: Cluster, argv: list[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    """A Slurm command on the login node."""
    done = subprocess.run(on_host(cluster, cluster.login, argv), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def succeeds(cluster: Cluster, argv: list[str]) -> bool:
    try:
        return run(cluster, argv, timeout=15, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def start_database(cluster: Cluster) -> None:
    folder = cluster.folder
    subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={folder}/db", "--user=root",
                    "--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=4M"],
                   check=True, capture_output=True, timeout=120)
    daemon(cluster, cluster.login, ["mariadbd", "--no-defaults", f"--datadir={folder}/db", "--user=root",
                                    "--skip-grant-tables", "--bind-address=127.0.0.1", "--port=3306",
                                    f"--socket={folder}/run/mysqld.sock", f"--pid-file={folder}/run/mysqld.pid",
                                    "--skip-log-bin", "--innodb-buffer-pool-size=32M",
                                    "--innodb-log-file-size=4M"], "mariadbd.log")
    wait_until("MariaDB", lambda: (folder / "run" / "mysqld.sock").exists(), cluster)


@contextlib.contextmanager
def running(hosts: list, folder: Path, cpus: int = 2):
    """munged, MariaDB, slurmdbd and slurmctld on hosts[0], a slurmd on each
    other host; yields once every node is idle, and stops it all whatever happens.

    Slurm's step sockets live in the spool folder and their paths may not
    exceed 108 bytes: the daemons see `folder` through a short link in /tmp
    (the files, logs included, stay in `folder`), however deep it is."""
    folder.mkdir(parents=True, exist_ok=True)
    short = Path(f"/tmp/cpslurm-{os.getpid()}")
    short.unlink(missing_ok=True)
    short.symlink_to(folder, target_is_directory=True)
    cluster = Cluster(short, hosts[0], list(hosts[1:]), cpus)
    try:
        start(cluster)
        yield cluster
    finally:
        stop(cluster)
        short.unlink(missing_ok=True)


def start(cluster: Cluster) -> None:
    folder = cluster.folder
    write_files(cluster)
    sock = folder / "munge" / "munge.socket"
    daemon(cluster, cluster.login, ["munged", "-F", "-f", f"--socket={sock}", f"--key-file={sock.parent}/munge.key",
                                    f"--pid-file={folder}/run/munged.pid", f"--log-file={folder}/log/munged.log",
                                    f"--seed-file={folder}/munge/seed"], "munged.out")
    wait_until("munged", sock.exists, cluster)
    start_database(cluster)
    daemon(cluster, cluster.login, ["slurmdbd", "-D"], "slurmdbd.out")
    wait_until("slurmdbd", lambda: succeeds(cluster, ["sacctmgr", "-n", "list", "cluster"]), cluster)
    run(cluster, ["sacctmgr", "-i", "add", "cluster", CLUSTER])
    run(cluster, ["sacctmgr", "-i", "add", "account", ACCOUNT, f"Cluster={CLUSTER}"])
    run(cluster, ["sacctmgr", "-i", "add", "user", USER, f"Account={ACCOUNT}", f"Cluster={CLUSTER}"])
    daemon(cluster, cluster.login, ["slurmctld", "-D", "-c"], "slurmctld.out")
    wait_until("slurmctld", lambda: succeeds(cluster, ["scontrol", "ping"]), cluster)
    for node in cluster.nodes:
        daemon(cluster, node, ["slurmd", "-D", "-N", node.name], f"slurmd-{node.name}.out")
    wait_until("the slurmds", lambda: idle_nodes(cluster) == set(cluster.node_names()), cluster)


def idle_nodes(cluster: Cluster) -> set[str]:
    done = run(cluster, ["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
    return {line.split()[0] for line in done.stdout.splitlines() if line.split()[1:] == ["idle"]}


def namespace_pids(namespace: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30).stdout
    return [int(pid) for pid in out.split()]


def stop(cluster: Cluster) -> None:
    """Cancel every job, stop the daemons (newest first), then end whatever
    still runs in the hosts' namespaces (job steps, ranks)."""
    with contextlib.suppress(Exception):
        run(cluster, ["scancel", "--full", f"--partition={PARTITION}"], timeout=15, check=False)
    for proc in reversed(cluster.procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in reversed(cluster.procs):
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
    for host in [cluster.login, *cluster.nodes]:
        for pid in namespace_pids(host.namespace):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    shutil.rmtree(cluster.folder / "db", ignore_errors=True)  # the logs stay for a failed test
