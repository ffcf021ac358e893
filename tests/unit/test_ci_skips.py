"""The skips CI may see (helpers/ci_skips.py, applied by tests/conftest.py under
CI=true): another lane's test or a missing instruction set, but never a
skip that names the lane now running (the Intel lane without oneCCL)."""

from __future__ import annotations

from helpers.ci_skips import allowed_in_ci, this_lane

IN_INTEL = "oneCCL bindings not installed: runs in `make test-intel` (the Intel env)"


def test_another_lanes_test_and_a_missing_instruction_set_may_skip():
    assert allowed_in_ci(IN_INTEL, None)
    assert allowed_in_ci("a timing on a shaped network: runs in `make test-scaling` (CPUDDP_SCALING=1)", "test-intel")
    assert allowed_in_ci("this CPU has no native bf16", "test-intel")


def test_a_skip_naming_the_lane_now_running_may_not():
    assert not allowed_in_ci(IN_INTEL, "test-intel")
    assert not allowed_in_ci("a timing on a shaped network: runs in `make test-scaling`", "test-scaling")
    assert not allowed_in_ci("needs root", None)


def test_the_lane_is_the_one_its_target_marks():
    assert this_lane({}) is None
    assert this_lane({"CPUDDP_INTEL_STACK": "1"}) == "test-intel"
    assert this_lane({"CPUDDP_SCALING": "1"}) == "test-scaling"
