"""Leases across processes and checkouts (launch/lease.py): a launch waits
for the lease lock a bounded time and then names its holder (a second
process stopped with SIGSTOP inside it, as Ctrl-Z stops a launcher); two
checkouts with one hostfile (two working folders, each with the .snakemake
folder where the leases used to live) run at the same time on two
namespace hosts (tests/netns, as test_packed_sweep.py) and never share a
node. The second test needs root; a few minutes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers.background import Background
from helpers.hosts_run import cluster_file, host_env, on_host, tiny_experiment
from helpers.leases import holders_over_time, lease_events
from helpers.netns_cluster import needs_root, netns_cluster
from helpers.workflow import BIN, REPO, write_config
from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import lease

HOLD_THE_LOCK = ("import sys, time; from pathlib import Path; from workflow.scripts.launch import lease\n"
                 "with lease._locked(Path(sys.argv[1])):\n    print('in', flush=True); time.sleep(120)")


def test_a_launch_gives_up_on_a_stopped_lock_holder_and_names_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:
        assert holder.stdout.readline() == "in\n"
        os.kill(holder.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(UserError) as err:
            lease.try_acquire(tmp_path, ["a", "b"], 1, "/run", lock_wait=2)
        assert 2 <= time.monotonic() - started < 10
        message = str(err.value)
        assert f"{tmp_path / 'lock'} is held for more than 2 s by pid {holder.pid} on host {lease.HOST}" in message
        assert f"resume it with `kill -CONT {holder.pid}` or end it" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()
    assert lease.try_acquire(tmp_path, ["a", "b"], 1, "/run") == ["a"]  # the lock went with its holder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Test hosts of this file's own (tests/netns)."""
    yield from netns_cluster(tmp_path_factory, 2)


CHECKOUTS = ("checkout1", "checkout2")
RUNS = ("s1", "s2")


def checkout_run(work, folder, cluster_path, host, mapping) -> Background:
    """profiles/xeon -j 2 over two 1-node runs, in a working folder of its own."""
    folder.mkdir()
    config = yaml.safe_load(tiny_experiment(folder, "two").read_text())
    config["train"].update(max_steps=10, log_every=5)
    config["sweep"] = {"seed": [1, 2]}
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(folder),
            "--profile", str(REPO / "profiles" / "xeon"), "-j", "2",
            "--configfile", str(write_config(folder / "two.yaml", config)), "--config", f"cluster={cluster_path}"]
    return Background(on_host(host, argv), env=host_env(mapping))


@needs_root
def test_two_checkouts_with_one_hostfile_never_share_a_node(cluster):
    work, hosts, mapping = cluster
    cluster_path = cluster_file(work, [hosts[0].name, hosts[1].name], nodes=1)
    started = time.time()
    jobs = [checkout_run(work, work / name, cluster_path, hosts[0], mapping) for name in CHECKOUTS]
    with jobs[0], jobs[1]:
        outs = [job.communicate(timeout=540)[0] for job in jobs]
    for job, out in zip(jobs, outs):
        assert job.returncode == 0, out[-6000:]

    leases = work / ".cpuddp-leases"  # next to the hostfile, for both
    assert not any((work / name / ".snakemake" / "cpuddp-leases").exists() for name in CHECKOUTS)
    assert json.loads((leases / "leases.json").read_text()) == {}  # every host free at the end
    events = lease_events(leases)
    states = holders_over_time(events)  # fails on a host acquired while another run holds it
    runs = {str(work / name / "results" / "two" / run) for name in CHECKOUTS for run in RUNS}
    assert {e["run"] for e in events} == runs
    spans = [[e["time"] for e in events if e["run"].startswith(str(work / name) + "/")] for name in CHECKOUTS]
    assert min(spans[1]) < max(spans[0]) and min(spans[0]) < max(spans[1])  # leasing at the same time
    trainings = [{h: run for h, (run, role) in s.items() if role == "training"} for s in states]
    assert max(len(t) for t in trainings) == 2  # both hosts trained at once
    across = any(len({run.split("/results/")[0] for run in t.values()}) == 2 for t in trainings)
    retried = 0
    for run in runs:
        acquired = [e["hosts"] for e in events if e["run"] == run and e["event"] == "acquire"
                    and e["role"] == "training"]
        last = json.loads((Path(run) / "tries.json").read_text())[-1]
        assert last["outcome"] == "ok" and last["hosts"] == acquired[-1], (run, last, acquired)
        checked = [n["node"] for n in json.loads((Path(run) / "environment.json").read_text())["node_reports"]]
        # one lease per run: it trains on the nodes its check described, or checks the others first
        assert last["hosts"] == checked or last["checked_now"] == last["hosts"], (run, last, checked)
        retried += len(acquired) - 1
    print(f"\ntwo checkouts, 4 runs on 2 hosts in {time.time() - started:.0f} s; "
          f"{'trained side by side' if across else 'never side by side'}; {retried} retries")
