"""A real Slurm cluster: `snakemake --profile profiles/slurm` submits with
snakemake-executor-plugin-slurm, srun starts the ranks on two nodes, and
failures reach the user (`make test-slurm`; in `make test` as root).

tests/slurm/cluster.py starts munged, MariaDB, slurmdbd and slurmctld on a
login host and one slurmd on each of three compute hosts (CPUs=2 each), all
test hosts of tests/netns. Snakemake runs on the login host with a copy of
profiles/slurm that names the test partition and account, as a site would.
Everything is stopped and removed at the end, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from helpers import fake_hub
from helpers.slurm_run import experiment, explain, finish, login_hub, rank_log_text, running_training, slurm, \
    settled_accounting, snakemake, start, tres, wait_until
from helpers.workflow import BIN, REPO
from workflow.scripts.common import logs

pytestmark = pytest.mark.cluster  # root: munge, slurmdbd, slurmctld, a slurmd per test host

# ------------------------------------------------------------------ runs


def test_two_nodes_one_and_two_ranks_per_node_and_one_rank(cluster, tiny_model_dir, tmp_path):
    """One sweep, four runs: 2 nodes x 2 ranks, 2 x 1, 1 x 2 and a one-rank run,
    each uploaded (deploy.push_to_hub) to a Hub that only the login host
    reaches: the jobs on the compute nodes ask nothing of it; the main
    process asked for the token's rights once, before any job."""
    configfile = experiment(tmp_path, tiny_model_dir, "sweep", n_train=64, distributed={"threads_per_process": 1},
                            sweep={"nodes": [2, 1], "processes_per_node": [2, 1]},
                            deploy={"push_to_hub": "me/sweep"})
    started = time.time()
    with login_hub(cluster, tmp_path) as (endpoint, hub_log):
        out = finish(start(snakemake(cluster, tmp_path, configfile, hub={"HF_ENDPOINT": endpoint,
                                                                        "HF_TOKEN": fake_hub.WRITE})))
    elapsed = time.time() - started
    asked = [r["path"] for r in fake_hub.requests(hub_log) if not r["path"].startswith("/api/agent")]
    assert asked.count("/api/whoami-v2") == 1 and asked[0] == "/api/whoami-v2", explain(out)
    assert asked.count("/api/models/me/sweep/commit/main") == 4, (asked, explain(out))
    summary = json.loads((tmp_path / "results/sweep/summary.json").read_text())
    runs = {run["run"]: run for run in summary["runs"]}
    assert {name: (r["nodes"], r["processes_per_node"], r["world_size"]) for name, r in runs.items()} == {
        "n2-ppn2": (2, 2, 4), "n2-ppn1": (2, 1, 2), "n1-ppn2": (1, 2, 2), "n1-ppn1": (1, 1, 1)}, explain(out)
    for name, run in runs.items():
        check_ranks(tmp_path / "results/sweep" / name, run, cluster.node_names())
        assert run["mpi"].startswith("slurm ") and set(run["hosts"]) <= set(cluster.node_names())
    check_allocations(cluster, runs)
    print(f"\nslurm: 4-run sweep through the cluster in {elapsed:.0f} s; sbatch asked for:")
    for line in out.splitlines():
        if "has been submitted with SLURM jobid" in line:
            print("  " + line.strip())


def check_ranks(run_dir: Path, run: dict, nodes: list[str]) -> None:
    """srun's block placement; every rank bound to its own CPU (threads 1),
    with OMP_NUM_THREADS to match; DDP kept the weights equal."""
    ranks = json.loads((run_dir / "train_metrics.json").read_text())["ranks"]
    hosts = [r["host"] for r in ranks]
    assert len(set(hosts)) == run["nodes"] and set(hosts) <= set(nodes), hosts  # compute nodes only
    assert hosts == [h for h in dict.fromkeys(hosts) for _ in range(run["processes_per_node"])], hosts
    assert hosts[:1] == run["hosts"][:1]
    for host in set(hosts):
        cpus = [r["cpus"] for r in ranks if r["host"] == host]
        assert all(c.isdigit() for c in cpus) and len(set(cpus)) == len(cpus), f"{host}: CPUs {cpus}"
    assert {r["omp_num_threads"] for r in ranks} == {"1"} and {r["torch_threads"] for r in ranks} == {1}
    assert len({r["weights_sha256"] for r in ranks}) == 1


def check_allocations(cluster, runs: dict) -> None:
    """Only the environment check and training were submitted (evaluation and
    the report ran on the login host), each sized from its run."""
    expected = {f"rule_{rule}_wildcards_sweep_{run}" for run in runs for rule in ("environment_check", "train_ddp")}
    jobs = settled_accounting(cluster, lambda jobs: expected <= {
        j["Comment"] for j in jobs.values() if j["State"] not in ("PENDING", "RUNNING")})
    mine = {j["Comment"]: j for j in jobs.values() if "wildcards_sweep_" in j["Comment"]}
    assert sorted(mine) == sorted(expected), sorted(mine)
    for name, run in runs.items():
        job = mine[f"rule_train_ddp_wildcards_sweep_{name}"]
        alloc = tres(job["AllocTRES"])
        assert job["State"] == "COMPLETED" and alloc["node"] == str(run["nodes"]), job
        assert alloc["cpu"] == str(run["world_size"]) and alloc["mem"] == f"{2000 * run['world_size']}M", job
        assert (job["Partition"], job["Account"], job["Timelimit"]) == (slurm.PARTITION, slurm.ACCOUNT, "02:00:00")
        step = jobs[f"{job['JobID']}.0"]  # the launcher's srun: one task per rank
        assert step["NTasks"] == str(run["world_size"]) and tres(step["AllocTRES"])["node"] == str(run["nodes"])
        check = tres(mine[f"rule_environment_check_wildcards_sweep_{name}"]["AllocTRES"])
        assert (check["node"], check["cpu"]) == (str(run["nodes"]), str(run["nodes"]))  # one rank per node


# ------------------------------------------------------------------ failures


def test_killed_rank_and_scancel_fail_the_job_and_a_rerun_resumes(cluster, tiny_model_dir, tmp_path):
    """2 nodes x 1 rank of 2 threads. A rank killed inside the allocation
    fails the job; the rerun resumes from its checkpoint and is cancelled
    with scancel; both failures name the rank and show its log's tail."""
    configfile = experiment(tmp_path, tiny_model_dir, "faults", n_train=320,
                            train={"epochs": 10, "checkpoint_every": 10},
                            # no automatic retry: this test is about how a failed try is reported
                            distributed={"nodes": 2, "processes_per_node": 1, "threads_per_process": 2,
                                         "retries": 0})
    run_dir, rank_logs = tmp_path / "results/faults/default", tmp_path / "logs/train_ddp/faults/default"
    argv = snakemake(cluster, tmp_path, configfile)

    proc = start(argv)
    wait_until("checkpoint step 10", (run_dir / "checkpoints/step-00000010/COMPLETE").exists, proc)
    first, victim = logs.read_status(rank_logs, 0), logs.read_status(rank_logs, 1)
    assert victim["host"] != first["host"] and victim["host"] in cluster.node_names(), (first, victim)
    os.kill(victim["pid"], signal.SIGKILL)  # one PID space: the test reaches a rank on a test host
    killed = time.monotonic()
    out = finish(proc)
    assert proc.returncode != 0 and "SLURM status is: 'FAILED'" in out, explain(out)
    assert f"rank 1 on {victim['host']} died without an exit status" in out, explain(out)
    assert f"--- last lines of {rank_logs.relative_to(tmp_path)}/try-1/rank1.log ---" in out  # the try's own folder
    print(f"\nslurm: killed rank reported {time.monotonic() - killed:.0f} s later")
    for rank in (0, 1):  # Slurm bound each rank to its node's 2 CPUs; OMP_NUM_THREADS agrees
        assert "2 threads (OMP_NUM_THREADS=2) on CPUs 0-1" in logs.log_path(rank_logs, rank).read_text()

    proc = start(argv)
    resumed = "resumed from results/faults/default/checkpoints/step-00000010 (step 10)"
    wait_until("the rerun resuming", lambda: resumed in rank_log_text(rank_logs, 0), proc)
    # Both ranks in the training loop, where SIGTERM means a checkpoint; before
    # it (loading, resuming) SIGTERM stops a rank at once, with nothing to save.
    wait_until("both ranks training", lambda: all(
        logs.read_status(rank_logs, rank).get("resumed_from_step") == 10 for rank in (0, 1)), proc)
    job = running_training(cluster)
    slurm.run(cluster, ["scancel", job])
    cancelled = time.monotonic()
    out = finish(proc)
    assert proc.returncode != 0 and f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in out, explain(out)
    # scancel's SIGTERM reaches the ranks in the training loop: they write a
    # checkpoint at the next update and exit as preempted (README, When things fail)
    assert "preempted: stopped at step " in out and "checkpoint written" in out, explain(out)
    step = int(out.split("preempted: stopped at step ")[1].split()[0])
    assert step > 10 and (run_dir / f"checkpoints/step-{step:08d}/COMPLETE").exists()  # the rerun resumes there
    print(f"slurm: scancel reported {time.monotonic() - cancelled:.0f} s later")


def test_a_retry_submitted_by_snakemake_resumes_and_finishes(cluster, tiny_model_dir, tmp_path):
    """distributed.retries under Slurm: a rank killed inside the allocation
    fails the first try; Snakemake submits the job again (attempt 2), which
    resumes from the newest checkpoint and finishes, the workflow started
    once. tries.json records both tries (the summary's "tries")."""
    configfile = experiment(tmp_path, tiny_model_dir, "retry", n_train=320,
                            train={"epochs": 4, "checkpoint_every": 10},
                            distributed={"nodes": 2, "processes_per_node": 1, "threads_per_process": 2,
                                         "retries": 1})
    run_dir, rank_logs = tmp_path / "results/retry/default", tmp_path / "logs/train_ddp/retry/default"
    proc = start(snakemake(cluster, tmp_path, configfile, "results/retry/default/train_metrics.json"))
    wait_until("checkpoint step 10", (run_dir / "checkpoints/step-00000010/COMPLETE").exists, proc)
    victim = logs.read_status(rank_logs, 1)
    os.kill(victim["pid"], signal.SIGKILL)
    out = finish(proc)
    assert proc.returncode == 0, explain(out)
    tries = json.loads((run_dir / "tries.json").read_text())
    assert [(t["try"], t["outcome"]) for t in tries] == [(1, "failed"), (2, "ok")], tries
    assert f"rank 1 on {victim['host']} died without an exit status" in tries[0]["error"], tries
    steps = json.loads((run_dir / "train_metrics.json").read_text())["steps"]
    assert tries[1]["resumed_from_step"] >= 10 and steps == 80, (tries, steps)
    assert (run_dir / "model").is_dir() and not (run_dir / "checkpoints").exists()
    print(f"\nslurm: retried after rank 1 was killed: {tries}")


def test_requests_over_the_partition_limits_are_refused_at_submission(cluster, tiny_model_dir, tmp_path):
    """EnforcePartLimits=ALL: sbatch refuses at once (else the job would pend
    forever with reason PartitionTimeLimit); so does a node too small for
    the CPUs asked. Snakemake stops with Slurm's reason."""
    configfile = experiment(tmp_path, tiny_model_dir, "limits", n_train=16,
                            distributed={"nodes": 2, "processes_per_node": 1, "threads_per_process": 1})
    target = "results/limits/default/environment.json"
    too_small = ("More processors requested than permitted", "Requested node configuration is not available")
    for resource, reasons in (("runtime=600", ("Requested time limit is invalid",)), ("cpus_per_task=3", too_small)):
        argv = snakemake(cluster, tmp_path, configfile, target, "--set-resources", f"environment_check:{resource}")
        out = finish(start(argv))
        assert "SLURM sbatch failed" in out and any(r in out for r in reasons), explain(out)


def test_auto_threads_are_the_jobs_cpus_per_task(tmp_path):
    """`threads_per_process: auto` under profiles/slurm (demo-news leaves it
    to the profile) is cluster.yaml's number, which sizes --cpus-per-task;
    a --config on the command line keeps the profile's cluster. A dry run:
    the plan is what Slurm would be asked for."""
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
            "--profile", str(REPO / "profiles" / "slurm"), "-np", "--config", "train={epochs: 1}",
            "--configfile", str(REPO / "experiments" / "demo-news.yaml")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    threads = yaml_threads(REPO / "profiles" / "slurm" / "cluster.yaml")
    assert f"{threads} thread(s) per rank" in out and "profiles/slurm/cluster.yaml" in out
    train = out[out.index("rule train_ddp"):]
    assert f"cpus_per_task={threads}" in train[:train.index("\n\n")]


def yaml_threads(path: Path) -> int:
    import yaml

    return yaml.safe_load(path.read_text())["distributed"]["threads_per_process"]
