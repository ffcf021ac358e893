"""pin tells the truth: a rank the MPI library bound keeps its cores and is
reported as such; only ranks x threads beyond the node's cores is a warning."""

from __future__ import annotations

from workflow.scripts.launch import pin


def cpuinfo(cores: int) -> str:
    return "\n\n".join(f"processor\t: {i}\nphysical id\t: 0\ncore id\t\t: {i}" for i in range(cores)) + "\n"


NODE = {0, 1}


def test_a_rank_intel_mpi_pinned_to_one_core_keeps_it_and_says_so():
    cpus, line = pin.decide(1, 2, 1, allowed={1}, node=NODE, cpuinfo=cpuinfo(2))
    assert cpus is None and line == "pin: already pinned by the MPI library: cores 1; kept"


def test_pinned_to_fewer_cores_than_threads_says_that_too():
    cpus, line = pin.decide(0, 2, 2, allowed={0}, node={0, 1, 2, 3}, cpuinfo=cpuinfo(4))
    assert cpus is None and line.endswith("cores 0, fewer than its 2 threads; kept")


def test_ranks_that_fit_are_pinned_quietly():
    assert pin.decide(0, 2, 1, allowed=NODE, node=NODE, cpuinfo=cpuinfo(2)) == ({0}, None)
    assert pin.decide(1, 2, 1, allowed=NODE, node=NODE, cpuinfo=cpuinfo(2)) == ({1}, None)


def test_only_real_oversubscription_warns():
    cpus, line = pin.decide(0, 2, 2, allowed=NODE, node=NODE, cpuinfo=cpuinfo(2))
    assert cpus is None and line == "pin: not pinned: 2 ranks x 2 threads exceed this node's 2 cores"


def test_the_node_is_its_cpuset_or_every_online_cpu(tmp_path):
    cpuset = tmp_path / "cpuset.cpus.effective"
    cpuset.write_text("0-3,8\n")
    assert pin.node_cpus([str(tmp_path / "missing"), str(cpuset)]) == {0, 1, 2, 3, 8}
    assert len(pin.node_cpus([str(tmp_path / "missing")])) >= 1
