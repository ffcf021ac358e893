"""Host leases for packed runs (launch/lease.py) and what the dry run says
about packing (launch/resources.py): no processes, a lease folder in tmp
(tests/integration/test_leases.py: the lock's timeout, two checkouts)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import psutil
import pytest

from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import lease, new_nodes, resources
from workflow.scripts.nodes import check
from workflow.scripts.settings.views import DistributedSettings, EnvironmentView

HOSTS = ["a", "b", "c"]


def entries(folder) -> dict:
    return json.loads((folder / "leases.json").read_text())


def events(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "events.log").read_text().splitlines()]


def test_leases_are_disjoint_and_released(tmp_path):
    first = lease.try_acquire(tmp_path, HOSTS, 2, "run1")
    assert first == ["a", "b"]
    assert lease.try_acquire(tmp_path, HOSTS, 2, "run2") is None  # one host left
    assert lease.try_acquire(tmp_path, HOSTS, 1, "run2") == ["c"]
    entry = entries(tmp_path)["c"]
    assert (entry["host"], entry["pid"], entry["run"]) == (lease.HOST, os.getpid(), "run2")
    assert entry["started"] == psutil.Process().create_time()
    lease.release(tmp_path, "run1")
    assert list(entries(tmp_path)) == ["c"]
    lease.release(tmp_path, "run2")
    assert entries(tmp_path) == {}
    assert [e["event"] for e in events(tmp_path)] == ["acquire", "acquire", "release", "release"]


def gone_entry(host: str) -> dict:
    return {"run": "/old/run", "role": "training", "host": host, "pid": 2 ** 22 + 7, "started": 0.0}


def test_a_dead_owner_on_this_host_is_taken_over(tmp_path):
    (tmp_path / "leases.json").write_text(json.dumps({"a": gone_entry(lease.HOST)}))
    assert lease.try_acquire(tmp_path, ["a"], 1, "new") == ["a"]
    assert [e["event"] for e in events(tmp_path)] == ["stale", "acquire"]


def test_another_hosts_entry_is_never_taken_over(tmp_path):
    (tmp_path / "hostfile").write_text("a\n")
    (tmp_path / "leases.json").write_text(json.dumps({"a": gone_entry("elsewhere")}))
    assert lease.try_acquire(tmp_path, ["a"], 1, "new") is None
    config = DistributedSettings.of({"hostfile": str(tmp_path / "hostfile"), "nodes": 1, "lease_dir": str(tmp_path)})
    with pytest.raises(UserError) as err, lease.held(config, "/new/run", "training", wait=0):
        pass
    message = str(err.value)
    assert "a by pid 4194311 on host elsewhere, run /old/run" in message and "delete its hosts' entries" in message
    assert "\n" not in message
    assert entries(tmp_path)["a"]["host"] == "elsewhere"


def test_the_folder_is_next_to_the_hostfile_whatever_the_working_directory(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "hostfile").write_text("a\nb\n")
    (tmp_path / "checkout1").mkdir()
    (tmp_path / "checkout1" / "hostfile").symlink_to(shared / "hostfile")
    monkeypatch.chdir(tmp_path / "checkout1")
    config = DistributedSettings.of({"hostfile": "hostfile", "nodes": 1})
    assert lease.folder(config) == shared / ".cpuddp-leases"
    with lease.held(config, "/c1/run", "training") as one:
        monkeypatch.chdir(tmp_path)
        with lease.held(DistributedSettings.of({"hostfile": str(shared / "hostfile"), "nodes": 1}), "/c2/run",
                        "training") as two:
            assert {*one, *two} == {"a", "b"}  # the second checkout sees the first one's lease
    assert lease.folder(DistributedSettings.of({"hostfile": "hostfile", "lease_dir": "/var/leases"})).as_posix() == \
        "/var/leases"
    with pytest.raises(UserError, match="give an absolute path"):
        lease.folder(DistributedSettings.of({"hostfile": "hostfile", "lease_dir": "leases"}))


def test_a_read_only_hostfile_folder_is_one_clear_line(tmp_path, monkeypatch):
    (tmp_path / "hostfile").write_text("a\n")

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Path, "touch", read_only)
    with pytest.raises(UserError) as err, \
            lease.held(DistributedSettings.of({"hostfile": str(tmp_path / "hostfile"), "nodes": 1}), "r", "training"):
        pass
    assert str(err.value) == (f"cannot keep host leases in {tmp_path / '.cpuddp-leases'} (Read-only file system): "
                              "make that folder writable for every user who launches on these nodes, or set "
                              "distributed.lease_dir to one that is")


def test_the_check_keeps_its_nodes_for_the_runs_training(tmp_path):
    (tmp_path / "hostfile").write_text("a\nb\nc\n")
    config = DistributedSettings.of({"hostfile": str(tmp_path / "hostfile"), "nodes": 1, "lease_dir": str(tmp_path)})
    with lease.held(config, "/r1", "environment check", keep_when="done") as checked:
        assert checked == ["a"]
    assert entries(tmp_path)["a"]["kept"]
    with lease.held(config, "/r2", "environment check", keep_when="done") as other:
        assert other == ["b"]  # a free node before another run's reservation
    with lease.held(config, "/r1", "training", keep_when="failed") as trained:
        assert trained == checked  # exactly the nodes environment.json describes
    assert list(entries(tmp_path)) == ["b"]  # released when training ends
    with pytest.raises(RuntimeError), lease.held(config, "/r3", "training", keep_when="failed"):
        raise RuntimeError("a failed try")
    assert entries(tmp_path)["a"]["run"] == "/r3" and entries(tmp_path)["a"]["kept"]  # for the next try


def test_a_reservation_never_makes_a_launch_wait(tmp_path):
    """Snakemake's `nodes` count does not see reservations: a launch it
    starts takes them when too few nodes are free, and that run's training
    then gets other nodes."""
    (tmp_path / "hostfile").write_text("a\nb\n")
    config = DistributedSettings.of({"hostfile": str(tmp_path / "hostfile"), "nodes": 2, "lease_dir": str(tmp_path)})
    with lease.held(config, "/r1", "environment check", keep_when="done"):
        pass
    with lease.held(config, "/r2", "training", wait=0) as taken:
        assert taken == ["a", "b"]
    assert [e["event"] for e in events(tmp_path)] == ["acquire", "keep", "yield", "yield", "acquire", "release"]
    assert lease.try_acquire(tmp_path, ["a", "b"], 2, "/r1") == ["a", "b"]  # released, not kept
    lease.release(tmp_path, "/r1")
    assert lease.try_acquire(tmp_path, ["a", "b"], 1, "/r3", prefer=["b"]) == ["b"]  # the nodes it was checked on


def test_a_training_checks_only_nodes_environment_json_does_not_describe(monkeypatch):
    info = {"node_reports": [{"node": "a"}, {"node": "b"}], "versions": {"torch": "2.8.0"}, "revision": "r1",
            "backend": "gloo", "ipex": False, "precision": "fp32", "threads_per_process": 2}
    monkeypatch.setattr(check, "check", lambda *a, **k: pytest.fail("checked nodes the check saw"))
    two, one = (EnvironmentView.of({"distributed": {"hostfile": "h", "nodes": n}}) for n in (2, 1))
    assert check.confirm(two, info, ["b", "a"]) == []
    assert check.confirm(one, info, ["a"]) == []  # a retry on fewer
    fresh = {**info, "versions": {"torch": "2.9.0"}, "precision": "bf16", "revision": "r2"}
    assert check.differences(info, fresh, "c", "r1") == [
        "torch 2.9.0 on c but 2.8.0 in environment.json", "workflow revision r2 on c but r1 on this launch node",
        "precision bf16 on c but fp32 in environment.json"]
    assert check.differences(info, {**info, "revision": "r2"}, "c", "r2") == []  # the code changed everywhere
    monkeypatch.setattr(check.describe, "revision", lambda: "r1")
    monkeypatch.setattr(check, "check", lambda config, timeout, hosts: fresh)
    with pytest.raises(UserError, match=r"this try's nodes c are not those environment.json describes \(a, b\) "
                                        r"and differ: torch 2.9.0 on c"):
        check.confirm(two, info, ["a", "c"])
    monkeypatch.setattr(check, "check", lambda config, timeout, hosts: info)
    assert check.confirm(two, info, ["a", "c"]) == ["c"]


def test_a_training_on_the_nodes_environment_json_describes_checks_nothing(tmp_path):
    (tmp_path / "environment.json").write_text(json.dumps({"node_reports": [{"node": "a"}, {"node": "b"}]}))
    assert new_nodes.check_new_nodes("train.json", str(tmp_path / "environment.json"), ["b"]) == []  # no process
    assert new_nodes.check_new_nodes("train.json", str(tmp_path / "environment.json"), None) == []


def test_held_through_the_config(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("a\nb\n")
    config = DistributedSettings.of({"hostfile": str(hostfile), "nodes": 1})
    with lease.held(config, "/r1", "training") as one, lease.held(config, "/r2", "training") as two:
        assert {*one, *two} == {"a", "b"}
        with pytest.raises(UserError, match="no 1 free nodes") as err, \
                lease.held(config, "/r3", "training", wait=0):
            pass
        assert f"by pid {os.getpid()} on host {lease.HOST}, run /r1" in str(err.value)
    with lease.held(DistributedSettings.of({"hostfile": None, "nodes": 1}), "/local", "training") as none:
        assert none is None  # one machine: nothing to lease


def test_how_many_runs_at_once():
    assert resources.at_once([1, 1, 1, 1], 2) == 2
    assert resources.at_once([2, 1, 4], 4) == 2
    assert resources.at_once([4], 2) == 1
    xeon = {"launcher": "mpirun", "hostfile": "hostfile"}
    of = DistributedSettings.of
    assert "4 runs; up to 2 at once on disjoint nodes of the hostfile's 2" in resources.packing(of(xeon), [1] * 4, 2)
    assert "each its own Slurm job" in resources.packing(of({"launcher": "srun"}), [1, 2], None)
    assert "one at a time" in resources.packing(of({"launcher": "mpirun", "hostfile": None}), [1, 1], None)
    assert not resources.mpi_job(of({**xeon, "nodes": 1, "processes_per_node": 1}))  # holds `nodes` instead
