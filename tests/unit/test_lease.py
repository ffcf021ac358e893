"""Host leases for packed runs (launch/lease.py) and what the dry run says
about packing (launch/resources.py): no processes, a lease folder in tmp."""

from __future__ import annotations

import json

import pytest

from workflow.scripts.common.errors import UserError
from workflow.scripts.launch import lease, resources

HOSTS = ["a", "b", "c"]


def test_leases_are_disjoint_and_released(tmp_path):
    first = lease.try_acquire(tmp_path, HOSTS, 2, "run1")
    assert first == ["a", "b"]
    assert lease.try_acquire(tmp_path, HOSTS, 2, "run2") is None  # one host left
    assert lease.try_acquire(tmp_path, HOSTS, 1, "run2") == ["c"]
    lease.release(tmp_path, "run1")
    assert list(json.loads((tmp_path / "leases.json").read_text())) == ["c"]
    lease.release(tmp_path, "run2")
    assert json.loads((tmp_path / "leases.json").read_text()) == {}
    events = [json.loads(line)["event"] for line in (tmp_path / "events.log").read_text().splitlines()]
    assert events == ["acquire", "acquire", "release", "release"]


def test_a_dead_owners_lease_is_taken_over(tmp_path):
    (tmp_path / "leases.json").write_text(json.dumps({"a": {"pid": 2 ** 22 + 7, "started": 0.0, "owner": "gone"}}))
    assert lease.try_acquire(tmp_path, ["a"], 1, "new") == ["a"]
    assert "stale" in (tmp_path / "events.log").read_text()


def test_held_leases_through_the_config(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("a\nb\n")
    config = {"distributed": {"hostfile": str(hostfile), "nodes": 1}}
    with lease.held(config, "r1", root=tmp_path) as one, lease.held(config, "r2", root=tmp_path) as two:
        assert {*one, *two} == {"a", "b"}
        with pytest.raises(UserError, match="no 1 free nodes"), lease.held(config, "r3", root=tmp_path, wait=0):
            pass
    with lease.held({"distributed": {"hostfile": None, "nodes": 1}}, "local", root=tmp_path) as none:
        assert none is None  # one machine: nothing to lease


def test_how_many_runs_at_once():
    assert resources.at_once([1, 1, 1, 1], 2) == 2
    assert resources.at_once([2, 1, 4], 4) == 2
    assert resources.at_once([4], 2) == 1
    xeon = {"launcher": "mpirun", "hostfile": "hostfile"}
    assert "4 runs; up to 2 at once on disjoint nodes of the hostfile's 2" in resources.packing(xeon, [1] * 4, 2)
    assert "each its own Slurm job" in resources.packing({"launcher": "srun"}, [1, 2], None)
    assert "one at a time" in resources.packing({"launcher": "mpirun", "hostfile": None}, [1, 1], None)
    assert not resources.mpi_job({**xeon, "nodes": 1, "processes_per_node": 1})  # holds `nodes` instead
