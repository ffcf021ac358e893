"""One try of a run at a time, in a folder of its own (launch/attempt.py),
and the line for ranks that never started (launch/verdict.py)."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from workflow.scripts.settings import config as cfg
from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import attempt, guard, job, verdict
from workflow.scripts.settings.views import DistributedSettings


def test_a_second_try_waits_then_names_the_holder(tmp_path):
    with attempt.locked(tmp_path, wait=0) as record:
        record(folder="logs/x/try-2")
        started = time.monotonic()
        with pytest.raises(UserError) as err, attempt.locked(tmp_path, wait=0.5):
            pass
        assert time.monotonic() - started >= 0.5
    line = str(err.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()} (try folder logs/x/try-2)" in line
    assert "\n" not in line
    with attempt.locked(tmp_path, wait=0):  # let go at the end of the block
        assert json.loads((tmp_path / attempt.LOCK_NAME).read_text())["pid"] == os.getpid()


def test_holder_line_of_an_empty_or_broken_lock_file():
    assert attempt.holder_line(b"") == "a process that wrote no holder"
    assert attempt.holder_line(b"{not json") == "a process that wrote no holder"
    assert attempt.holder_line('{"pid": 7, "host": "n1"}') == "pid 7 on host n1"


def test_a_new_try_folder_follows_the_highest_number(tmp_path):
    assert attempt.new_folder(tmp_path / "logs").name == "try-1"
    (tmp_path / "logs/try-7").mkdir()
    (tmp_path / "logs/try-x").mkdir()
    assert attempt.new_folder(tmp_path / "logs").name == "try-8"
    assert attempt.numbers(tmp_path / "logs") == [1, 7, 8]


def test_the_ranks_log_dir_points_at_the_try_folder():
    program = ["python", "-m", "rank", "--out", "logs/r", "--log-dir", "logs/r", "--data", "d"]
    assert attempt.for_try(program, "logs/r/", "logs/r/try-3") == \
        ["python", "-m", "rank", "--out", "logs/r", "--log-dir", "logs/r/try-3", "--data", "d"]
    assert attempt.for_try(["x", "--log-dir", "other"], "logs/r", "logs/r/try-3") == ["x", "--log-dir", "other"]


def test_rank_files_beside_the_try_folders_are_the_newest_try(tmp_path):
    first, second = attempt.new_folder(tmp_path), attempt.new_folder(tmp_path)
    attempt.link_newest(tmp_path, first, 3)
    attempt.link_newest(tmp_path, second, 2)  # a retry without a node: fewer ranks
    (second / "rank1.exit").write_text('{"status": "running"}')
    assert sorted(p.name for p in tmp_path.glob("rank*")) == ["rank0.exit", "rank0.log", "rank1.exit", "rank1.log"]
    assert os.readlink(tmp_path / "rank1.exit") == "try-2/rank1.exit"
    assert json.loads((tmp_path / "rank1.exit").read_text()) == {"status": "running"}


def test_the_line_for_ranks_that_never_started_names_their_node():
    line = str(verdict.unstarted([2, 3], ["n1", "n1", "n2", "n2"], 30))
    assert line.startswith("ranks 2, 3 did not start within distributed.start_timeout (30 s)")
    assert "node at fault: n2: check that it answers" in line
    line = str(verdict.unstarted([0, 1, 2, 3], ["n1", "n1", "n2", "n2"], 30, silent=["n2"]))
    assert "node at fault: n2:" in line


def test_ranks_are_placed_ppn_in_a_row_on_each_host():
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m",
                           "distributed": {"processes_per_node": 2, "threads_per_process": 1}})
    dist = DistributedSettings.of(config["distributed"])
    assert job.rank_hosts(dist, {}, ["a", "b"]) == ["a", "a", "b", "b"]
    assert job.rank_hosts(dist, {"processes_per_node": 1}, ["a", "b"]) == ["a", "b"]
    assert job.rank_hosts(dist, {}, None) == [socket.gethostname()] * 2
    assert config["distributed"]["start_timeout"] == 300


def test_a_try_starts_its_output_with_a_header_naming_it():
    line = attempt.header("logs/train_ddp/x/r/try-3", 2)
    assert line.startswith("== try 3 (attempt 2) started ")
    assert line.endswith(f" on {socket.gethostname()}: logs in logs/train_ddp/x/r/try-3")


def test_the_guard_ends_the_sessions_it_was_told_of_unless_the_launcher_said_done():
    assert guard.sessions(b"") == []
    assert guard.sessions(b"4242\n") == [4242]
    assert guard.sessions(b"4242\ndone\n") is None


def test_the_guard_finds_the_processes_of_a_session():
    found = guard.members(os.getsid(0))
    assert found[os.getpid()].startswith("python") or found[os.getpid()] == "pytest"
    assert guard.members(2 ** 22 + 7) == {}
