"""precision: auto decided once for the cluster from every node's measured
matmul speed, with a margin (probes/precision.py), and environment.json's
precision set from it (describe.combine).

The GFLOP/s below are real 512 x 512 matmul timings (describe.matmul_gflops):
- XEON_NO_AMX: the idle 2-core Intel Xeon VM with avx512_bf16 and no AMX of
  docs/intel-stack.md (2026-11-25), default env and Intel env;
- EPYC: a busy 2-core AMD EPYC with avx512_bf16 shared by five engineers
  (2026-11-26), the same node timed six times, 2 threads: the spread between
  two timings of one CPU is what separates two identical nodes.
"""

from __future__ import annotations

import pytest

from workflow.scripts.probes import precision
from workflow.scripts.settings.config import validate
from workflow.scripts.nodes import check, describe
from workflow.scripts.settings.views import EnvironmentView

XEON_NO_AMX = [(317.0, 161.0), (313.0, 166.0)]
EPYC = [(16.2, 30.4), (10.5, 23.2), (30.1, 67.3), (10.4, 23.3), (18.9, 65.2), (20.6, 39.0)]


def node(fp32: float, bf16: float, native: bool = True) -> dict:
    return {"native_bf16_flags": native, "matmul": {"fp32_gflops": fp32, "bf16_gflops": bf16}}


def cluster(measurements, native: bool = True) -> list[tuple[str, dict]]:
    return [(f"node-{i}", node(f, b, native)) for i, (f, b) in enumerate(measurements)]


def test_six_noisy_timings_of_one_cpu_agree_on_bf16():
    chosen, why = precision.decide("auto", cluster(EPYC))
    assert chosen == "bf16_master"  # bf16 weights with fp32 masters (train/master.py)
    assert "slowest node, node-0" in why and "1.88x" in why and "1.10x" in why


def test_bf16_slower_everywhere_keeps_fp32():
    chosen, why = precision.decide("auto", cluster(XEON_NO_AMX))
    assert chosen == "fp32" and "only 0.51x" in why and "node-0" in why


def test_one_slow_node_decides_for_all():
    chosen, why = precision.decide("auto", cluster(EPYC[:3] + XEON_NO_AMX[:1]))
    assert chosen == "fp32" and "node-3" in why


def test_nodes_within_the_margin_choose_the_same():
    """bf16 1.05x on one node and 0.97x on another: before, one chose bf16 and
    the check failed with "nodes differ"; now both are fp32, one decision."""
    named = [("a", node(100.0, 105.0)), ("b", node(100.0, 97.0))]
    assert precision.decide("auto", named)[0] == "fp32"
    assert precision.decide("auto", named[:1])[0] == "fp32"  # even alone: 1.05x is within the margin
    assert precision.decide("auto", [("c", node(100.0, 110.0))])[0] == "bf16_master"  # exactly the margin


def test_a_node_without_native_bf16_keeps_everyone_on_fp32():
    named = cluster(EPYC[:2]) + [("old", {"native_bf16_flags": False, "matmul": {}})]
    assert precision.decide("auto", named) == ("fp32", "auto: no native bf16 on old, so fp32 everywhere")


def test_requested_precision_is_kept():
    assert precision.decide("fp32", cluster(EPYC)) == ("fp32", "requested")
    assert precision.decide("bf16", cluster(EPYC)) == ("bf16", "requested")


def reported(name: str, fp32: float, bf16: float, chose: str) -> tuple[str, dict]:
    """A node's probe report as it reaches the check (describe.describe + probe)."""
    base = {"versions": {"python": "3.11", "torch": "2.13.0"}, "revision": "abc", "backend": "gloo",
            "ipex": False, "precision": chose, "host": name, "threads_per_process": 2,
            "mpi": None, "gloo_ifname": None}
    return name, {**base, **node(fp32, bf16)}


@pytest.mark.parametrize("first_chose", ["bf16", "fp32"])
def test_check_passes_nodes_that_chose_apart_and_records_one_precision(first_chose):
    other = "fp32" if first_chose == "bf16" else "bf16"
    named = [reported("xeon-01", 100.0, 104.0, first_chose), reported("xeon-02", 100.0, 98.0, other)]
    assert check.disagreements(named) == []
    config = validate({"experiment": "x", "task": "mrpc", "model": "m", "train": {"precision": "auto"}})
    view = EnvironmentView.pick(config)
    info = describe.combine(view.distributed, view.train, named, None)
    assert info["precision"] == "fp32" and "xeon-02" in info["precision_reason"]
    assert [n["matmul"]["bf16_gflops"] for n in info["node_reports"]] == [104.0, 98.0]


def test_ipex_and_bf16_master_do_not_share_a_model():
    """IPEX optimizes fp32 weights and their optimizer: with IPEX in use auto
    takes bf16 autocast; bf16_master by name turns IPEX auto off and is
    refused beside train.ipex: true."""
    from workflow.scripts.common.errors import UserError

    chosen, why = precision.decide("auto", cluster(EPYC))
    assert precision.beside_ipex(chosen, why, True, "auto", "auto")[:3] == ("bf16", why + "; bf16, not "
                                                                             "bf16_master, beside IPEX", True)
    assert precision.beside_ipex("bf16_master", "requested", True, "bf16_master", "auto")[2] is False
    with pytest.raises(UserError, match="bf16_master and train.ipex true"):
        precision.beside_ipex("bf16_master", "requested", True, "bf16_master", True)
    assert precision.beside_ipex(chosen, why, False, "auto", "auto") == (chosen, why, False, "")
