"""A run that finishes without a person: the workflow retries a failed
training by itself and resumes from the newest whole checkpoint, SIGTERM
checkpoints and stops, damaged checkpoints are passed over, a frozen rank
fails the job in bounded time, and seeded rounds of random faults (the chaos
test) end with the weights of an uninterrupted run.

CPUDDP_CHAOS_ROUNDS sets the chaos rounds (`make test-chaos`: 8; `make
test`: 3). Everything here is real: Snakemake, mpirun, ranks, signals, files.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import time
from pathlib import Path

import psutil

from helpers.workflow import BIN, REPO
from helpers.faults import RUN, digest, long_experiment
from helpers.background import Background

CHAOS_ROUNDS = int(os.environ.get("CPUDDP_CHAOS_ROUNDS", "3"))
TIMEOUT_MINUTES = 0.25  # a frozen rank is given up on after 15 s
FAULTS = ("kill", "stop", "term-rank", "term-mpirun", "corrupt")


# The training is what is judged: the later stages run only where summary.json is read.
TRAINED = str(RUN / "train_metrics.json")


def start(work: Path, model: Path, retries: int, whole: bool = False) -> Background:
    configfile = long_experiment(work, model, retries=retries, timeout_minutes=TIMEOUT_MINUTES,
                                 exit_grace_seconds=5)
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "-d", str(work),
            "--profile", str(REPO / "profiles/local"), "--cores", "2", *([] if whole else [TRAINED]),
            "--configfile", str(configfile)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    return Background(argv, env=env)


def checkpoint_marker(work: Path, step: int) -> Path:
    return work / RUN / f"checkpoints/step-{step:08d}/COMPLETE"


def wait_for_checkpoint(work: Path, step: int, after: float, job: Background) -> None:
    """Until checkpoint `step` is written (again) after `after`."""
    marker = checkpoint_marker(work, step)
    job.wait_until(f"checkpoint {step}", lambda: marker.is_file() and marker.stat().st_mtime >= after)


def tries_recorded(work: Path) -> int:
    try:
        return len(json.loads((work / RUN / "tries.json").read_text()))
    except (OSError, ValueError):  # not written yet, or being replaced
        return 0


def wait_for_tries(work: Path, count: int, job: Background) -> None:
    """Until `count` tries are recorded: the next fault must hit the next try,
    not the end of this one (a SIGTERM's stop checkpoint can be the step the
    next fault waits for, and a kill there fails the stopping try)."""
    job.wait_until(f"try {count} in tries.json", lambda: tries_recorded(work) >= count)


def rank_pid(work: Path, rank: int, timeout: float = 60) -> int:
    """The pid of the current try's rank `rank`, from its status file (a
    search of /proc may find the last try's rank while it is torn down)."""
    path, deadline = work / "logs/train_ddp/tiny/default" / f"rank{rank}.exit", time.time() + timeout
    while time.time() < deadline:
        try:
            status = json.loads(path.read_text())
        except (OSError, ValueError):
            status = {}
        if status.get("status") == "running" and Path(f"/proc/{status['pid']}").exists():
            return status["pid"]
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} of the current try is not running")


def launcher_pid() -> int:
    """The MPI launcher (Intel MPI's mpiexec.hydra) of the running training."""
    for proc in psutil.Process().children(recursive=True):  # this test's, not a neighbour's
        try:
            cmd = proc.cmdline()
        except psutil.Error:
            continue
        is_hydra = bool(cmd) and Path(cmd[0]).name == "mpiexec.hydra"
        if is_hydra and any("workflow.scripts.train.rank" in word for word in cmd):
            return proc.pid
    raise AssertionError("no mpiexec.hydra of a training found")


@contextlib.contextmanager
def ranks_held(work: Path):
    """Both ranks stopped while a SIGTERM is sent, so that it lands before
    the last step whatever the CPU's speed (a fast one trains the tiny run's
    remaining steps in the time the signal takes; 2026-11-27)."""
    pids = [rank_pid(work, rank) for rank in range(2)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def inject(fault: str, work: Path, rng: random.Random) -> None:
    rank = rng.randrange(2)
    if fault == "kill":
        os.kill(rank_pid(work, rank), signal.SIGKILL)
    elif fault == "stop":
        os.kill(rank_pid(work, rank), signal.SIGSTOP)
    elif fault == "term-rank":
        with ranks_held(work):
            os.kill(rank_pid(work, rank), signal.SIGTERM)
    elif fault == "term-mpirun":
        with ranks_held(work):
            os.kill(launcher_pid(), signal.SIGTERM)
    elif fault == "corrupt":  # the newest checkpoint goes bad, then a rank dies: the retry must pass over it
        newest = sorted((work / RUN / "checkpoints").glob("step-*"))[-1]
        with open(newest / "model.pt", "r+b") as handle:
            handle.seek(200)
            handle.write(b"\xff" * 64)
        os.kill(rank_pid(work, rank), signal.SIGKILL)


def run_with_faults(work: Path, model: Path, faults: list[str], seed: int,
                    whole: bool = False) -> tuple[str, list[dict], float]:
    """One workflow run, started once; a fault after each of a seeded
    sequence of checkpoints. Returns the weights digest, the tries and the time."""
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(20, 181, 20), len(faults)))
    started = time.time()
    with start(work, model, retries=len(faults), whole=whole) as job:
        after = started
        for done, (fault, step) in enumerate(zip(faults, steps)):
            wait_for_checkpoint(work, step, after, job)
            inject(fault, work, rng)
            wait_for_tries(work, done + 1, job)
            after = time.time()
        out, _ = job.communicate(timeout=900)
    assert job.returncode == 0, out[-4000:]
    tries = json.loads((work / RUN / "tries.json").read_text())
    return digest(work), tries, time.time() - started


def test_killed_three_times_the_run_finishes_by_itself_with_the_same_weights(tmp_path, tiny_model_dir, long_reference):
    weights, tries, _ = run_with_faults(tmp_path, tiny_model_dir, ["kill"] * 3, seed=1, whole=True)
    assert weights == long_reference
    assert [t["outcome"] for t in tries] == ["failed"] * 3 + ["ok"]
    assert all("died without an exit status" in t["error"] for t in tries[:3])
    resumed = [t["resumed_from_step"] for t in tries]
    assert resumed[0] is None and all(a < b for a, b in zip(resumed[1:], resumed[2:]))
    summary = json.loads((tmp_path / "results/tiny/summary.json").read_text())
    assert summary["runs"][0]["tries"] == tries


def test_sigterm_to_mpirun_and_to_one_rank_checkpoints_and_resumes(tmp_path, tiny_model_dir, long_reference):
    weights, tries, _ = run_with_faults(tmp_path, tiny_model_dir, ["term-mpirun", "term-rank"], seed=2)
    assert weights == long_reference
    assert [t["outcome"] for t in tries] == ["preempted", "preempted", "ok"]
    for earlier, later in zip(tries, tries[1:]):
        step = int(earlier["error"].split("stopped at step ")[1].split()[0])
        assert later["resumed_from_step"] == step  # resumed exactly where it stopped
    assert all(t["seconds"] < 120 for t in tries[:2])


def test_a_frozen_rank_fails_the_try_in_bounded_time_naming_it(tmp_path, tiny_model_dir, long_reference):
    weights, tries, _ = run_with_faults(tmp_path, tiny_model_dir, ["stop"], seed=3)
    assert weights == long_reference
    first = tries[0]
    assert first["outcome"] == "failed" and "stopped answering" in first["error"]
    assert "rank " in first["error"] and " on " in first["error"]
    assert first["seconds"] < 60 * TIMEOUT_MINUTES + 90


def test_chaos(tmp_path, tiny_model_dir, long_reference):
    rng = random.Random(1234)
    faults = [rng.choice(FAULTS) for _ in range(CHAOS_ROUNDS)]
    weights, tries, seconds = run_with_faults(tmp_path, tiny_model_dir, faults, seed=1234)
    rows = [f"| {i + 1} | {fault} | {t['outcome']} | {t.get('resumed_from_step')} | {t['seconds']} |"
            for i, (fault, t) in enumerate(zip(faults, tries))]
    print("\n| round | fault injected | try outcome | resumed from step | seconds |\n|---|---|---|---|---|\n"
          + "\n".join(rows) + f"\n{len(faults)} faults survived in {seconds:.0f} s; weights equal the clean run: "
          f"{weights == long_reference}")
    assert weights == long_reference
    assert len(tries) == len(faults) + 1 and tries[-1]["outcome"] == "ok"
