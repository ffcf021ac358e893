"""One try of a run at a time, and a try that ends with its job shell
(launch/attempt.py, launch/lifeline.py, launch/supervise.py): the real
launcher, Intel MPI's mpirun and real ranks.

- the job shell of a training, or its launcher, is killed: nothing of
  that try survives it, and Snakemake's retry resumes from the last
  checkpoint; the rule log holds both tries, each after its header;
- a second try on a busy run folder waits, fails naming the holder, and
  writes nothing;
- a rank whose node never runs it (a login that hangs) fails the try after
  distributed.start_timeout, naming that node.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers.background import Background
from helpers.try_launch import ENV, SLOW_SSH, locked, write_launch
from helpers.faults import RUN, long_experiment
from helpers.workflow import BIN, REPO
from workflow.scripts.launch import attempt

def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_running(log_dir: Path, ranks: int, job: Background, timeout: float = 120) -> None:
    def running() -> bool:
        statuses = [json.loads(p.read_text()) if p.is_file() else {}
                    for p in (log_dir / f"rank{r}.exit" for r in range(ranks))]
        return all(s.get("status") == "running" for s in statuses)
    job.wait_until("every rank running", running, timeout)


def snapshot(folder: Path) -> dict:
    return {str(p): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


CHILD_OF_A_SHORT_PARENT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; from workflow.scripts.launch import lifeline; "
    "lifeline.die_with_parent(signal.SIGKILL); print('armed', flush=True); time.sleep(60)"],
    stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "armed"
print(child.pid, flush=True)
"""


def test_a_process_dies_with_its_parent():
    done = subprocess.run([sys.executable, "-c", CHILD_OF_A_SHORT_PARENT], capture_output=True, text=True,
                          timeout=60, env=ENV)
    child, deadline = psutil.Process(int(done.stdout.split()[-1])), time.monotonic() + 10
    while not gone(child):
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.05)


def try_processes(work: Path) -> list[psutil.Process]:
    """Every live process of a try in `work` (mpiexec.hydra, the proxy and the ranks name it)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if str(work) in " ".join(process.info["cmdline"] or []) and not gone(process):
            found.append(process)
    return found


@pytest.mark.timeout(300)
def test_a_try_killed_with_its_whole_process_group_leaves_nothing(tmp_path, mpi_path):
    """The launcher and its output's tee SIGKILLed together (the job's process group,
    as `kill -9 -- -PGID` or a job manager does): the guard, whose stderr was that tee,
    still ends mpirun's session and frees the run for the next try."""
    argv = write_launch(tmp_path, {})
    with Background(argv, env=ENV, cwd=REPO) as first:
        wait_running(tmp_path / "logs", 1, first)
        assert len(try_processes(tmp_path)) >= 3  # mpiexec.hydra, hydra_pmi_proxy, the rank
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        deadline = time.monotonic() + 2 + 5 + 30  # exit_grace_seconds, the guard's SIGKILL wait, slack
        while left := try_processes(tmp_path):
            assert time.monotonic() < deadline, f"the try outlived its launcher: {[p.info['cmdline'] for p in left]}"
            time.sleep(0.2)
    # and the run's lock is free for the next try (the guard held it) within the time that
    # try waits for it: the guard, whose command line names no run, may still be exiting
    deadline = time.monotonic() + attempt.lock_wait(2)
    with open(tmp_path / "results/run/try.lock") as lock:
        while not locked(lock):
            assert time.monotonic() < deadline, "the run's lock is still held"
            time.sleep(0.2)


@pytest.mark.timeout(300)
def test_a_second_try_waits_then_names_the_holder_and_writes_nothing(tmp_path, mpi_path):
    argv = write_launch(tmp_path, {})
    with Background(argv, env=ENV, cwd=REPO) as first:
        wait_running(tmp_path / "logs", 1, first)
        before = {**snapshot(tmp_path / "logs"), **snapshot(tmp_path / "results")}
        started = time.monotonic()
        second = subprocess.run([*argv[:argv.index("--try") + 1], "2", *argv[argv.index("--try") + 2:]],
                                capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120)
        waited = time.monotonic() - started
        assert first.poll() is None
        after = {**snapshot(tmp_path / "logs"), **snapshot(tmp_path / "results")}
    assert second.returncode == 1
    line = second.stderr.strip().splitlines()[-1]
    assert f"another try of this run is still running: pid {first.pid} on host {socket.gethostname()}" in line
    assert waited >= 2 + 15  # exit_grace_seconds + the launcher's stop
    assert after == before
    assert sorted(p.name for p in (tmp_path / "logs").glob("try-*")) == ["try-1"]


@pytest.mark.timeout(300)
def test_a_rank_that_never_starts_fails_the_try_naming_its_node(tmp_path, mpi_path):
    ssh = tmp_path / "slow-ssh"
    ssh.write_text(SLOW_SSH)
    ssh.chmod(0o755)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{socket.gethostname()}\nstuck-node\n")
    argv = write_launch(tmp_path, {"hostfile": str(hostfile), "nodes": 2, "mpi": "intel", "start_timeout": 15,
                                   "check_timeout_seconds": 10,
                                   "launcher_args": ["-bootstrap", "ssh", "-bootstrap-exec", str(ssh)]})
    started = time.monotonic()
    with Background(argv, env=ENV, cwd=REPO) as launch:
        out, _ = launch.communicate(timeout=200)
        seconds = time.monotonic() - started
        family = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert launch.returncode == 1, out
    line = out.strip().splitlines()[-1]
    assert line.startswith("error: ranks 0, 1 did not start within distributed.start_timeout (15 s)"), out
    assert "node at fault: stuck-node:" in line  # the nodes asked to answer: only this one did not
    assert 15 <= seconds < 120
    assert [p.pid for p in family if not gone(p)] == []  # nothing of the try left, the hung login neither
    tries = json.loads((tmp_path / "results/run/tries.json").read_text())
    assert tries[0]["outcome"] == "failed" and "stuck-node" in tries[0]["error"]
    assert not list((tmp_path / "logs/try-1").glob("rank*.exit"))  # no rank starts before every login has


def training_launcher(job: Background, timeout: float = 300) -> psutil.Process:
    """The launcher of the running training (its parent is the job shell)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for proc in psutil.Process(job.pid).children(recursive=True):
            try:
                cmd = proc.cmdline()
            except psutil.Error:
                continue
            if "workflow.scripts.launch" in cmd and "--tries" in cmd:
                return proc
        time.sleep(0.1)
    raise AssertionError("no training launcher found")


def wait_for_checkpoint(work: Path, step: int, job: Background, timeout: float = 400) -> None:
    marker = work / RUN / f"checkpoints/step-{step:08d}/COMPLETE"
    job.wait_until(f"checkpoint {step}", marker.is_file, timeout)


def of_the_run(work: Path) -> list[psutil.Process]:
    """Processes that work in `work` or name it: Snakemake, the job shell,
    the launcher, mpirun, mpiexec.hydra, its proxy and the ranks."""
    return [proc for proc in psutil.process_iter(["cmdline", "cwd"]) if proc.pid != os.getpid() and
            (proc.info["cwd"] == str(work) or str(work) in " ".join(proc.info["cmdline"] or []))]


def ended(process: psutil.Process) -> bool:
    """Exited (or a zombie), the pid maybe taken by another process since."""
    return not process.is_running() or gone(process)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("victim", ["job shell", "launcher"])
def test_a_try_ends_with_its_job_shell_or_launcher_and_the_retry_resumes(tmp_path, tiny_model_dir, victim):
    """SIGKILL to the job shell: the launcher gets SIGTERM (PR_SET_PDEATHSIG)
    and stops its ranks, which checkpoint. SIGKILL to the launcher itself:
    its guard (launch/guard.py) ends mpirun's session: mpiexec.hydra, the
    proxy and the ranks, which Intel MPI's mpirun script would leave behind."""
    configfile = long_experiment(tmp_path, tiny_model_dir, retries=1, timeout_minutes=0.5, exit_grace_seconds=5)
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "-d", str(tmp_path),
            "--profile", str(REPO / "profiles/local"), "--cores", "2", str(RUN / "train_metrics.json"),
            "--configfile", str(configfile)]  # the tries are what is read: no evaluation, deploy or report
    with Background(argv, env={**os.environ, "PATH": ENV["PATH"], "HF_HUB_OFFLINE": "1"}) as job:
        wait_for_checkpoint(tmp_path, 20, job)
        launcher = training_launcher(job)
        shell = launcher.parent()
        family = [launcher, *launcher.children(recursive=True)]
        assert shell.name() == "bash" and {"mpiexec.hydra", "hydra_pmi_proxy"} <= {p.name() for p in family}
        run = [p for p in of_the_run(tmp_path) if p.pid not in (job.pid, shell.pid)]
        assert len([p for p in run if p.cmdline()[1:3] == ["-m", "workflow.scripts.train.rank"]]) == 2  # the ranks
        (shell if victim == "job shell" else launcher).send_signal(signal.SIGKILL)
        killed = time.monotonic()
        while any(not ended(p) for p in [*family, *run]):
            assert time.monotonic() - killed < 5 + 10, \
                f"outlived the {victim}: {[(p.pid, p.name()) for p in [*family, *run] if not ended(p)]}"
            time.sleep(0.1)
        print(f"\nthe try ended {time.monotonic() - killed:.1f} s after its {victim}")
        out, _ = job.communicate(timeout=600)
    assert job.returncode == 0, out[-4000:]
    tries = json.loads((tmp_path / RUN / "tries.json").read_text())
    # A launcher killed outright records nothing; its try folder and the rule log keep its output.
    assert [t["try"] for t in tries] == ([1, 2] if victim == "job shell" else [2])
    assert tries[0]["outcome"] in ("preempted", "failed") or victim == "launcher"
    assert tries[-1]["outcome"] == "ok" and tries[-1]["resumed_from_step"] >= 20
    logs = tmp_path / "logs/train_ddp/tiny/default"
    assert Path(tries[-1]["log_dir"]).name == "try-2"
    assert "step 20" in (logs / "try-1/rank0.log").read_text()  # the first try's evidence is kept
    first = (logs / "try-1/launcher.log").read_text()
    assert first.startswith("== try 1 (attempt 1) started ")
    assert ("guard: the launcher is gone" in first) == (victim == "launcher")
    assert os.readlink(logs / "rank0.log") == "try-2/rank0.log"
    # The rule log (a copy of all-tries.log when the try started, then both
    # appended to) holds every try, in order, each after its header.
    for path in (tmp_path / "logs/train_ddp/tiny/default.log", logs / "all-tries.log"):
        text = path.read_text()
        headers = [line.split(" started ")[0] for line in text.splitlines() if line.startswith("== try ")]
        assert headers == ["== try 1 (attempt 1)", "== try 2 (attempt 2)"], path
        assert text.index("step 20") < text.index("== try 2 ") < text.index("resumed from")
