"""One node's part of a multi-node run, without the test hosts: pinning
ranks to cores, the per-node reports and their disagreements, the revision,
a bounded launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import time


from helpers.workflow import REPO
from workflow.scripts.launch import pin
from workflow.scripts.common import lines
from workflow.scripts.launch import reach
from workflow.scripts.nodes import check, describe

sys.path.insert(0, str(REPO / "tests" / "netns"))


def cpuinfo(sockets: int, cores: int, smt: int = 1) -> str:
    blocks, cpu = [], 0
    for _thread in range(smt):
        for socket in range(sockets):
            for core in range(cores):
                blocks.append(f"processor\t: {cpu}\nphysical id\t: {socket}\ncore id\t\t: {core}\n")
                cpu += 1
    return "\n".join(blocks)


def test_ranks_get_their_own_cores_per_socket():
    # 2 sockets x 4 cores, hyperthreads 8-15 are the siblings of 0-7
    sockets = pin.physical_cores(cpuinfo(2, 4, smt=2), allowed=range(16))
    assert len(sockets) == 2 and sockets[0][0] == (0, 8)
    cpus = [pin.rank_cpus(r, 4, 2, sockets) for r in range(4)]
    assert cpus == [{0, 8, 1, 9}, {2, 10, 3, 11}, {4, 12, 5, 13}, {6, 14, 7, 15}]
    # two ranks: one per socket
    assert [pin.rank_cpus(r, 2, 4, sockets) for r in range(2)] == [set(range(0, 4)) | set(range(8, 12)),
                                                                      set(range(4, 8)) | set(range(12, 16))]


def test_odd_layouts_and_oversubscription():
    sockets = pin.physical_cores(cpuinfo(2, 4), allowed=range(8))
    assert [pin.rank_cpus(r, 3, 2, sockets) for r in range(3)] == [{0, 1}, {2, 3}, {4, 5}]
    assert pin.rank_cpus(0, 2, 8, sockets) is None  # 16 threads on 8 cores: left alone
    # a cgroup that allows only some CPUs
    assert pin.physical_cores(cpuinfo(1, 4), allowed={1, 3}) == [[(1,), (3,)]]


def report(**versions) -> dict:
    base = {"python": "3.11.7", "torch": "2.13.0", "transformers": "5.23.0",
            "intel_extension_for_pytorch": None, "oneccl_bind_pt": None}
    return {"versions": {**base, **versions}, "revision": "abc", "backend": "gloo", "precision": "fp32",
            "ipex": False}


def test_disagreements_name_the_node_and_both_versions():
    named = [("node-a", report()), ("node-b", report(torch="2.12.0")), ("node-c", report())]
    named[2][1]["revision"] = "def"
    problems = check.disagreements(named)
    assert problems == [
        "node node-b has torch 2.12.0 but node node-a has torch 2.13.0",
        "node node-c has workflow revision def but node node-a has abc (a different copy of the workflow)",
    ]
    assert check.disagreements([("a", report()), ("b", report())]) == []
    ipex = check.disagreements([("a", report()), ("b", report(intel_extension_for_pytorch="2.8.0"))])
    assert ipex == ["node b has IPEX 2.8.0 but node a has IPEX not installed"]


def test_revision_follows_the_code(tmp_path):
    (tmp_path / "workflow").mkdir()
    (tmp_path / "Snakefile").write_text("rule all:\n")
    (tmp_path / "workflow" / "a.py").write_text("x = 1\n")
    first = describe.revision(tmp_path)
    (tmp_path / "workflow" / "__pycache__").mkdir()
    (tmp_path / "workflow" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert describe.revision(tmp_path) == first
    (tmp_path / "workflow" / "a.py").write_text("x = 2\n")
    assert describe.revision(tmp_path) != first


def test_run_bounded_ends_a_hanging_launcher():
    started = time.time()
    code, _, _ = reach.run_bounded(["sh", "-c", "sleep 60 & sleep 60"], 1)
    assert code is None and time.time() - started < 15


def test_pin_binds_a_rank(tmp_path):
    out = tmp_path / "affinity"
    env = {**os.environ, "PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    program = [sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(repr(sorted(os.sched_getaffinity(0))))"]
    subprocess.run([sys.executable, "-m", "workflow.scripts.launch.pin", "--threads", "1", "--", *program],
                   check=True, env=env, cwd=REPO, timeout=60)
    expected = pin.rank_cpus(1, 2, 1, pin.physical_cores())
    assert eval(out.read_text()) == sorted(expected or os.sched_getaffinity(0))


def test_long_reports_survive_another_rank_in_between():
    """srun passes output on in 1 KiB pieces: a 1.1 KB one-line report was cut
    by the other task's (a real Slurm, about one check in two). In parts, the
    lines of two ranks may come in any order."""
    reports = {rank: {"rank": rank, "report": {"isa_flags": ["avx512f"] * 120, "host": f"n{rank}"}}
               for rank in (0, 1)}
    sent = {rank: lines.report_lines("NODE", rank, report) for rank, report in reports.items()}
    assert len(sent[0]) > 1 and max(len(line) for line in sent[0]) < 1024
    mixed = [line for pair in zip(sent[1], sent[0]) for line in pair]
    assert reach.parse_reports("noise\n" + "\n".join(mixed) + "\n") == reports
    assert reach.parse_reports("\n".join(sent[0][:-1] + sent[1])) == {1: reports[1]}  # rank 0 lost a part


def test_reports_survive_interleaved_lines():
    text = 'noise\nCPUDDP-NODE {"rank": 1, "a": "}"}CPUDDP-NODE {"rank": 0}\nCPUDDP-SETUP {"rank": 5}\n'
    assert reach.parse_reports(text) == {1: {"rank": 1, "a": "}"}, 0: {"rank": 0}}
    assert list(reach.parse_reports(text, "SETUP")) == [5]


