"""A finished training always ends: the teardown order, bounded rank exits,
and a stress run of many 2-rank trainings (the deadlock was a race).

CPUDDP_TEARDOWN_RUNS sets how many trainings the stress test runs in a row
(`make test-teardown` runs 30 in each environment; `make test` a few).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from helpers.fake_ccl import stand_in_ccl
from workflow.scripts.settings import config as cfg
from workflow.scripts.nodes import describe as environment
from workflow.scripts.common import logs
from workflow.scripts.probes import intel
from workflow.scripts.launch import command as launch
from workflow.scripts.launch import job, supervise
from workflow.scripts.train import loop, process_group
from workflow.scripts.train import rank as train
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import DistributedSettings, EnvironmentView, TrainSettings

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STRESS_RUNS = int(os.environ.get("CPUDDP_TEARDOWN_RUNS", "3"))


def ccl_installed() -> bool:
    return intel.installed_versions()[intel.CCL_PACKAGE] is not None


@pytest.fixture
def ddp_alive_at_destroy(monkeypatch):
    """How many DDP models were still alive each time the group was destroyed."""
    seen, real = [], dist.destroy_process_group

    def checked(*args, **kwargs):
        seen.append(len(process_group.live_ddp_models()))
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "destroy_process_group", checked)
    return seen


def train_args(config: dict, data_dir: Path, work: Path) -> list[str]:
    conf, info = work / "config.json", work / "environment.json"
    conf.write_text(json.dumps(config))
    view = EnvironmentView.pick(config)
    info.write_text(json.dumps(environment.describe(view.distributed, view.train, launcher=False)))
    return ["--config", str(conf), "--environment", str(info), "--data", str(data_dir),
            "--out", str(work / "run"), "--log-dir", str(work / "logs")]


def test_the_group_is_destroyed_only_after_ddp_is_released(tokenized, tmp_path, one_rank, ddp_alive_at_destroy):
    """The regression test for the teardown order: on the old order (destroy
    in the `finally` of the function that holds the DDP model) it sees 1."""
    config, data_dir = tokenized
    train.main(train_args(config, data_dir, tmp_path))
    assert ddp_alive_at_destroy == [0]
    assert logs.read_status(tmp_path / "logs", 0)["status"] == "ok"


def test_a_failed_training_also_releases_ddp_first(tokenized, tmp_path, one_rank, ddp_alive_at_destroy,
                                                   monkeypatch):
    """The traceback of a failure keeps its frames, and their DDP model, alive."""
    def fail(*args):
        raise RuntimeError("injected failure in the loop")

    monkeypatch.setattr(loop, "run_epochs", fail)
    config, data_dir = tokenized
    with pytest.raises(RuntimeError, match="injected"):
        train.main(train_args(config, data_dir, tmp_path))
    assert ddp_alive_at_destroy == [0]
    status = logs.read_status(tmp_path / "logs", 0)
    assert status["status"] == "error" and "injected failure" in status["error"]


# Ranks that behave as a stuck rank would, under the real mpirun: rank 0
# finishes; rank 1 hangs after (or before) writing its results.
STUCK_RANK = """
import os, sys, time
from workflow.scripts.common import logs

def stuck_in_teardown():
    time.sleep(3600)

def stuck_in_collective():
    time.sleep(3600)

rank, where = int(os.environ["PMI_RANK"]), sys.argv[2]
with logs.exit_status(sys.argv[1], rank) as status:
    if rank == 0 or where == "teardown":
        status.trained(exit_within=600)
    if rank == 1:
        stuck_in_teardown() if where == "teardown" else stuck_in_collective()
"""


@pytest.fixture
def stuck_launch(tmp_path, monkeypatch):
    """Launch STUCK_RANK on 2 ranks with a 2 s exit grace; returns a runner."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m", "train": {"precision": "fp32"},
                           "distributed": {"backend": "gloo", "processes_per_node": 2, "threads_per_process": 1,
                                           "exit_grace_seconds": 2}})
    view = EnvironmentView.pick(config)
    info = environment.describe(view.distributed, view.train)
    program = tmp_path / "rank.py"
    program.write_text(STUCK_RANK)
    log_dir = tmp_path / "logs"

    def run(where: str) -> float:
        started = time.monotonic()
        job.run(view.distributed, info, [sys.executable, str(program), str(log_dir), where], log_dir)
        return time.monotonic() - started

    return run, log_dir


def test_a_rank_stuck_after_its_results_is_stopped_and_the_run_counts(stuck_launch, capfd):
    run, log_dir = stuck_launch
    seconds = run("teardown")
    err = capfd.readouterr().err
    assert seconds < 30, "the launcher must stop a stuck rank soon after the grace period"
    host = socket.gethostname()
    assert f"warning: rank 1 on {host} did not exit 2 s after another rank had exited" in err, err
    assert "stuck in stuck_in_teardown" in err and "every rank had written its results" in err
    assert "Current thread" in (log_dir / "rank1.log").read_text()  # its stack, dumped into its log
    assert not supervise.pid_alive(logs.read_status(log_dir, 1)["pid"])


def test_a_rank_stuck_before_its_results_fails_the_run_naming_it(stuck_launch):
    run, log_dir = stuck_launch
    with pytest.raises(UserError) as failed:
        run("collective")
    message = str(failed.value)
    assert message.startswith(f"rank 1 on {socket.gethostname()} did not exit 2 s after another rank")
    assert "stuck in stuck_in_collective" in message and "killed, out of memory" not in message
    assert not supervise.pid_alive(logs.read_status(log_dir, 1)["pid"])


def test_a_rank_bounds_its_own_teardown(tmp_path):
    """Where no launcher can reach it (another host), a rank stuck after its
    results dumps its own stacks and ends itself."""
    program = STUCK_RANK.replace('int(os.environ["PMI_RANK"])', "1").replace("exit_within=600", "exit_within=1")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path), "teardown"], timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode != 0 and time.monotonic() - started < 30
    assert logs.read_status(tmp_path, 1)["status"] == "trained"
    log = (tmp_path / "rank1.log").read_text()
    assert "Timeout" in log and "stuck_in_teardown" in log


@pytest.mark.timeout(300 + 120 * STRESS_RUNS)
@pytest.mark.parametrize("backend", ["gloo", "ccl"])
def test_two_rank_trainings_always_end(backend, tokenized, tmp_path, monkeypatch):
    """Many real 2-rank trainings in a row under mpirun; each must end by
    itself (no rank stopped by the launcher, every rank `ok`). `ccl` is the
    stand-in (gloo inside, as in the hang first seen) where oneCCL is not built."""
    site = [str(REPO)]
    if backend == "ccl" and not ccl_installed():
        stand_in_ccl(tmp_path / "site")
        site.append(str(tmp_path / "site"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(site))
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    config, data_dir = tokenized
    config = cfg.validate({**config, "train": {**config["train"], "epochs": 2, "max_steps": 6},
                           "distributed": {**config["distributed"], "processes_per_node": 2, "backend": backend}})
    conf, info = tmp_path / "config.json", tmp_path / "environment.json"
    conf.write_text(json.dumps(config))
    # Described as gloo, then switched: this process must not import the stand-in.
    dist, train = DistributedSettings.of(config["distributed"]), TrainSettings.of(config["train"])
    described = environment.describe(dataclasses.replace(dist, backend="gloo"), train)
    described["backend"] = backend
    info.write_text(json.dumps(described))
    seconds = []
    for attempt in range(STRESS_RUNS):
        work = tmp_path / f"run{attempt}"
        program = [sys.executable, "-m", "workflow.scripts.train.rank", "--config", str(conf), "--environment",
                   str(info), "--data", str(data_dir), "--out", str(work), "--log-dir", str(work / "logs")]
        started = time.monotonic()
        command = launch.build(dist, described, program, tmp_path)
        outcome = supervise.run(command, launch.launch_env(dist, described), work / "logs", 2,
                                dist.exit_grace_seconds, quiet=True)
        seconds.append(time.monotonic() - started)
        code, stuck = outcome.code, outcome.stuck
        assert (code, stuck) == (0, []), f"run {attempt + 1}: exit code {code}, stopped ranks {stuck}"
        assert [logs.read_status(work / "logs", r)["status"] for r in (0, 1)] == ["ok", "ok"]
        assert json.loads((work / "train_metrics.json").read_text())["steps"] == 6
    assert json.loads((work / "train_metrics.json").read_text())["backend"] == backend
    print(f"\n{STRESS_RUNS} two-rank {backend} trainings ended by themselves; "
          f"{min(seconds):.1f}-{max(seconds):.1f} s each, {sum(seconds):.0f} s in all")
