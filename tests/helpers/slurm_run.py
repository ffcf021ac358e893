"""The Slurm test cluster (root, network namespaces, `make ci-deps`) and
Snakemake runs through it, as a user on its login host starts them: shared
by test_slurm.py and test_slurm_time_limit.py, each with a cluster of its own
(the module-scoped fixture `cluster`, tests/integration/conftest.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.workflow import BIN, REPO, write_config
from helpers.background import Background
from workflow.scripts.data import demo

sys.path.insert(0, str(REPO / "tests" / "netns"))
sys.path.insert(0, str(REPO / "tests" / "slurm"))
import cluster as slurm
import hosts as netns

SNAKEMAKE_TIMEOUT = 420  # one workflow run through the test cluster


def unavailable() -> str | None:
    """Why the test cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: the test hosts are network namespaces and the Slurm daemons run as root"
    missing = slurm.missing_programs() + [p for p in ("ip", "nsenter", "unshare") if not shutil.which(p)]
    if missing:
        return f"missing {', '.join(missing)}; `make ci-deps` installs {slurm.DEBS}"
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm is not installed (make venv installs it)"
    return None


def start_cluster(tmp_path_factory):
    """A 4-host Slurm cluster on network namespaces, up until the generator ends."""
    reason = unavailable()
    if reason:
        pytest.fail(f"Slurm test cluster: {reason}") if os.environ.get("CI") else pytest.skip(reason)
    netns.sweep()
    work = tmp_path_factory.mktemp("slurm")
    prefix, hosts, _ = netns.create(4, work)
    try:
        started = time.time()
        with slurm.running(hosts, work / "cluster") as running:
            print(f"\nslurm: cluster up in {time.time() - started:.0f} s: login {hosts[0].name}, "
                  f"nodes {', '.join(running.node_names())}")
            yield running
    finally:
        netns.remove(prefix)
        assert not [ns for ns in netns.namespaces() if ns.startswith(prefix)]


def site_profile(folder: Path, train_minutes: int | None = None) -> Path:
    """profiles/slurm with its partition and account lines filled in (and a
    time limit for training, as a site with short jobs would set)."""
    text = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    site = text.replace("# slurm_partition: cpu ", f"slurm_partition: {slurm.PARTITION} ")
    site = site.replace("# slurm_account: myproject ", f"slurm_account: {slurm.ACCOUNT} ")
    assert site.count(slurm.PARTITION) == 1 and site.count(slurm.ACCOUNT) == 1, "profile lines changed"
    if train_minutes:
        site = site.replace("  train_ddp:\n", f"  train_ddp:\n    runtime: {train_minutes}\n")
        assert f"runtime: {train_minutes}" in site, "profile lines changed"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(site)
    return folder


def experiment(work: Path, model: Path, name: str, n_train: int, **settings) -> Path:
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=n_train, n_dev=16, seed=1)
    train = {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 32, "log_every": 2,
             "precision": "fp32", **settings.pop("train", {})}
    return write_config(work / f"{name}.yaml", {
        "experiment": name, "task": "mrpc", "model": str(model),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": train, **settings})


def snakemake(cluster, work: Path, configfile: Path, *extra: str, train_minutes: int | None = None,
              hub: dict | None = None) -> list[str]:
    """Snakemake on the login host, the way a user starts it there (the Hub
    offline, or `hub`'s variables: HF_ENDPOINT of login_hub, HF_TOKEN)."""
    profile = site_profile(work / "profile", train_minutes)
    hub_env = [f"{k}={v}" for k, v in hub.items()] if hub else ["HF_HUB_OFFLINE=1"]
    argv = ["env", f"PATH={BIN}{os.pathsep}{os.environ['PATH']}", *hub_env,
            sys.executable, str(Path(__file__).with_name("slurm_poll.py")),  # snakemake, polling every 1-2 s
            "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(profile), "--slurm-init-seconds-before-status-checks", "1",
            *extra, "--configfile", str(configfile)]
    return slurm.on_host(cluster, cluster.login, argv)


def rank_log_text(rank_logs: Path, rank: int) -> str:
    """A rank's log as far as it is written: "" while a new try's link
    (rank<N>.log -> try-N/rank<N>.log) points at a log its rank has not started yet."""
    from workflow.scripts.common import logs

    try:
        return logs.log_path(rank_logs, rank).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def explain(out: str) -> str:
    """The error lines of a Snakemake run (rule logs included), then its end."""
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    return "\n".join(errors[-30:]) + "\n...\n" + out[-3000:]


def start(argv: list[str]) -> subprocess.Popen:
    return Background(argv)


def finish(proc: subprocess.Popen, timeout: float = SNAKEMAKE_TIMEOUT) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def accounting(cluster) -> dict[str, dict]:
    """sacct's records by job and step id (the plugin's --comment names the rule)."""
    fields = "JobID,Comment,State,NodeList,NTasks,AllocTRES,Partition,Account,Timelimit"
    out = slurm.run(cluster, ["sacct", "-a", "-P", "--noheader", f"--format={fields}"]).stdout
    names = fields.split(",")
    return {row.split("|")[0]: dict(zip(names, row.split("|"))) for row in out.splitlines() if row}


def settled_accounting(cluster, settled, timeout: float = 60) -> dict[str, dict]:
    """accounting() once `settled(records)` holds, or as it is at the timeout:
    slurmctld sends a job's start and end to slurmdbd a moment after they
    happen, so a query right after the workflow ends can miss some."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = accounting(cluster)
        if settled(jobs) or time.monotonic() > deadline:
            return jobs
        time.sleep(2)


def tres(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def wait_until(what: str, ready, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            out = finish(proc) if proc.poll() is not None else ""
            raise AssertionError(f"never saw {what}:\n{explain(out)}")
        time.sleep(0.2)


def running_training(cluster) -> str:
    out = slurm.run(cluster, ["squeue", "-h", "-t", "RUNNING", "-o", "%i %k"]).stdout
    jobs = [line.split()[0] for line in out.splitlines() if "rule_train_ddp" in line]
    assert len(jobs) == 1, out
    return jobs[0]


HUB_NAME = "hub.cpuddp.test"


@contextlib.contextmanager
def login_hub(cluster, work: Path):
    """The fake Hub (helpers/fake_hub.py) on the login host's loopback, named
    HUB_NAME in the login host's /etc/hosts only: the compute nodes have no
    route to it, as on a cluster whose nodes have no internet. Yields
    (HF_ENDPOINT, the log of its requests)."""
    with open(netns.ETC_NETNS / cluster.login.namespace / "hosts", "a") as hosts:
        hosts.write(f"127.0.0.1 {HUB_NAME}\n")
    log, port = work / "hub.log", work / "hub.port"
    server = subprocess.Popen(["nsenter", f"--net=/run/netns/{cluster.login.namespace}", sys.executable,
                               str(Path(__file__).with_name("fake_hub.py")), str(log), str(port)])
    try:
        deadline = time.monotonic() + 30
        while not port.exists() or not port.read_text():
            assert server.poll() is None and time.monotonic() < deadline, "the fake Hub did not start"
            time.sleep(0.1)
        yield f"http://{HUB_NAME}:{port.read_text()}", log
    finally:
        server.kill()
        server.wait()
