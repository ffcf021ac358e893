"""A training longer than its Slurm time limit finishes in several jobs
(profiles/slurm's --signal; `make test-slurm-time-limit`, and in `make
test`). A file of its own, with a test cluster of its own (the module-scoped
fixture `cluster`), so that pytest-xdist runs it beside the other Slurm tests: both
spend most of their time waiting on Slurm.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from helpers.slurm_run import accounting, experiment, explain, finish, running_training, slurm, snakemake, start, \
    wait_until
from workflow.scripts.common import logs

pytestmark = pytest.mark.cluster  # root: munge, slurmdbd, slurmctld, a slurmd per test host

# x 200 steps: about 2 minutes of training here; Slurm signals within 30 s
# of the cut (its time-limit check): at steps 118-350 in the runs seen here.
LIMIT_EPOCHS = 6


# Once intermittent (1 failure in 4 runs, message lost). The cause, found in
# the job logs: after a preempted rank's checkpoint, its SIGTERM handler went
# back to the default while a second SIGTERM could still come (srun stops the
# other tasks once one exits 75); rank 0 then died "Terminated", before or
# after its status said preempted. A preempted rank now ignores SIGTERM from
# the moment it leaves the loop (errors.sigterm_raises; tests/integration/test_sigterm.py).
@pytest.mark.timeout(1500)
def test_a_training_longer_than_its_time_limit_finishes_in_several_jobs(cluster, tiny_model_dir, tmp_path):
    """profiles/slurm asks for SIGTERM 120 s before training's time limit: the
    ranks checkpoint and end the job before the limit, and Snakemake's next
    try, a new job, resumes exactly there. So that the signal comes while the
    ranks train on any CPU, the test cuts the first job's limit (scontrol) to
    1-2 minutes ahead once its ranks train; Slurm then sends the signal at its
    next time-limit check. The workflow is started once."""
    configfile = experiment(tmp_path, tiny_model_dir, "limit", n_train=3200,
                            train={"epochs": LIMIT_EPOCHS, "checkpoint_every": 100_000},
                            distributed={"nodes": 2, "processes_per_node": 1, "threads_per_process": 2,
                                         "retries": 8})
    rank_logs = tmp_path / "logs/train_ddp/limit/default"
    started = time.monotonic()
    proc = start(snakemake(cluster, tmp_path, configfile, train_minutes=10))
    try:
        check_time_limit_run(cluster, tmp_path, proc, rank_logs, started)
    except AssertionError as err:  # keep what a failure in CI needs to be understood
        raise AssertionError(f"{err}\n{time_limit_evidence(cluster, tmp_path)}") from None


def check_time_limit_run(cluster, tmp_path, proc, rank_logs, started) -> None:
    wait_until("both ranks training", lambda: all(
        "resumed_from_step" in logs.read_status(rank_logs, rank) for rank in (0, 1)), proc)
    job = running_training(cluster)
    minutes = math.ceil(job_seconds(cluster, job) / 60) + 1  # 60-120 s left: within the signal's 120
    slurm.run(cluster, ["scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}"])
    out = finish(proc, timeout=1300)
    assert proc.returncode == 0, explain(out)
    run = json.loads((tmp_path / "results/limit/summary.json").read_text())["runs"][0]
    tries = run["tries"]
    assert len(tries) >= 2 and [t["outcome"] for t in tries] == ["preempted"] * (len(tries) - 1) + ["ok"], tries
    for earlier, later in zip(tries, tries[1:]):
        step = int(earlier["error"].split("stopped at step ")[1].split()[0])
        assert later["resumed_from_step"] == step, tries  # resumed exactly where it stopped
    assert run["steps"] == LIMIT_EPOCHS * 200, run
    # One job per try, resubmitted by Snakemake (never retried inside an
    # allocation at its limit); every job but the last ended itself (exit 75)
    # before its limit: none timed out.
    states = training_states(cluster, "rule_train_ddp_wildcards_limit_default", len(tries))
    assert states == ["FAILED"] * (len(tries) - 1) + ["COMPLETED"], states
    print(f"\nslurm: first job's limit cut to {minutes} min; {len(tries)} jobs in "
          f"{time.monotonic() - started:.0f} s; stopped at {[t.get('error', 'done').split(' on ')[0] for t in tries]}")


def time_limit_evidence(cluster, work: Path) -> str:
    """sacct's records and the tails of every job's and rank's log."""
    parts = ["sacct:", *(f"  {j}" for j in accounting(cluster).values())]
    for path in sorted([*work.glob(".snakemake/slurm_logs/**/*.log"), *work.glob("logs/train_ddp/**/*.log")]):
        tail = path.read_text(errors="replace").splitlines()[-15:]
        parts += [f"== {path.relative_to(work)}", *tail]
    return "\n".join(parts)


def job_seconds(cluster, job: str) -> int:
    """How long a job has run (squeue's [D-]H:MM:SS or M:SS)."""
    text = slurm.run(cluster, ["squeue", "-h", "-j", job, "-o", "%M"]).stdout.strip()
    days, _, clock = text.rpartition("-")
    seconds = 0
    for part in clock.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds + int(days or 0) * 86400


def training_states(cluster, comment: str, count: int) -> list[str]:
    """The states of a rule's jobs in submission order, once slurmdbd has all
    `count` of them (it records a job's end a moment after the job ends)."""
    deadline = time.monotonic() + 60
    while True:
        jobs = [j for j in accounting(cluster).values() if j["Comment"] == comment]
        states = [j["State"] for j in sorted(jobs, key=lambda j: int(j["JobID"]))]
        if len(states) >= count and "RUNNING" not in states or time.monotonic() > deadline:
            return states
        time.sleep(2)
