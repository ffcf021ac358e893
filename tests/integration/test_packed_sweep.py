"""A sweep packed onto the nodes (profiles/xeon, -j 4): four 1-node runs on
two namespace hosts (tests/netns, as test_multinode.py) train two at a time,
never two on one host, and every host is free at the end, even when a run's
rank is killed and Snakemake retries it. Root only, about a minute."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import yaml

import pytest

from helpers.hosts_run import cluster_file, host_env, on_host, tiny_experiment
from helpers.leases import holders_over_time, lease_events
from helpers.netns_cluster import needs_root, netns_cluster
from helpers.workflow import BIN, REPO, write_config
from helpers.background import Background


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Test hosts of this file's own (tests/netns)."""
    yield from netns_cluster(tmp_path_factory, 3)

RUNS = ["s1", "s2", "s3", "s4"]


def packed_experiment(work: Path) -> Path:
    config = yaml.safe_load(tiny_experiment(work, "packed").read_text())
    config["train"].update(max_steps=20, log_every=5)
    config["sweep"] = {"seed": [1, 2, 3, 4]}
    return write_config(work / "packed.yaml", config)


def is_rank_of(run: str, cmdline: list[str]) -> bool:
    """The rank's own process, not one whose command line merely holds the
    rank's (Snakemake's shell, the launcher, mpirun): killing Snakemake's
    shell fails the job, but the orphaned launcher trains on and records ok."""
    return cmdline[1:3] == ["-m", "workflow.scripts.train.rank"] and f"/packed/{run}/" in " ".join(cmdline)


def kill_a_rank_of(run: str, job: Background, timeout: float = 300) -> None:
    """SIGKILL one training rank of `run` once it exists: its try fails. The
    run may start in the sweep's second pair, after a first run has ended, so
    the wait is bounded by a whole sweep's time, not one start-up."""
    def killed() -> bool:
        for proc in psutil.Process().children(recursive=True):
            try:
                cmdline = proc.cmdline()
            except psutil.Error:
                continue
            if is_rank_of(run, cmdline):
                os.kill(proc.pid, signal.SIGKILL)
                return True
        return False
    job.wait_until(f"a rank of {run}", killed, timeout)


@needs_root
def test_four_one_node_runs_share_two_hosts_two_at_a_time(cluster):
    work, hosts, mapping = cluster
    cluster_path = cluster_file(work, [hosts[0].name, hosts[1].name], nodes=1)
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / "xeon"), "-j", "4",
            *(f"results/packed/{run}/train_metrics.json" for run in RUNS),  # the trainings: what is shared
            "--configfile", str(packed_experiment(work)), "--config", f"cluster={cluster_path}"]
    dry = subprocess.run(on_host(hosts[0], [*argv, "--dry-run"]), capture_output=True, text=True,
                         env=host_env(mapping), timeout=120)
    assert "sweep: 4 runs; up to 2 at once on disjoint nodes of the hostfile's 2" in dry.stderr, dry.stderr[-2000:]
    started = time.time()
    job = Background(on_host(hosts[0], argv), env=host_env(mapping))
    kill_a_rank_of("s2", job)
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0, out[-6000:]

    leases = cluster_path.parent / ".cpuddp-leases"  # next to the hostfile
    assert json.loads((leases / "leases.json").read_text()) == {}  # every host free at the end
    states = holders_over_time(lease_events(leases))
    trainings = [{h: o for h, o in s.items() if o[1] == "training"} for s in states]
    assert max(len(t) for t in trainings) == 2  # two at a time, on different hosts
    tries = json.loads((work / "results/packed/s2/tries.json").read_text())
    assert [t["outcome"] for t in tries] == ["failed", "ok"], tries  # retried, on a leased host again
    assert "rank 0" in tries[0]["error"] and "died without an exit status" in tries[0]["error"], tries
    assert all(len(t["hosts"]) == 1 for t in tries), tries
    assert states[-1] == {}  # the killed try's hosts too
    ran_on = [{rank["host"] for rank in json.loads((work / f"results/packed/{run}/train_metrics.json")
                                                   .read_text())["ranks"]} for run in RUNS]
    assert all(len(used) == 1 for used in ran_on), ran_on
    assert set.union(*ran_on) == {hosts[0].name, hosts[1].name}
    print(f"\npacked sweep: 4 runs on 2 hosts in {time.time() - started:.0f} s")
