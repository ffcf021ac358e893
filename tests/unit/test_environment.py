"""Backend, precision and threads decisions, and environment.json."""

import os
import sys
from pathlib import Path

import pytest

from workflow.scripts.nodes import describe as environment
from workflow.scripts.probes import hardware
from workflow.scripts.probes.precision import MARGIN
from workflow.scripts.common.errors import UserError

BIN = Path(sys.executable).parent


# ---------------------------------------------------------------- backend
# oneccl_bindings_for_pytorch is not installed in this venv.

def test_ccl_requested_but_missing():
    with pytest.raises(UserError) as err:
        environment.choose_backend("ccl")
    message = str(err.value)
    assert "oneccl_bindings_for_pytorch" in message
    assert "oneccl_bind_pt" in message  # what to install
    assert "distributed.backend: gloo" in message  # or how to avoid it
    assert "\n" not in message


def test_auto_falls_back_to_gloo_with_reason():
    backend, why = environment.choose_backend("auto")
    assert backend == "gloo"
    assert why.startswith("auto") and "oneccl_bindings_for_pytorch" in why


def test_gloo_requested():
    assert environment.choose_backend("gloo") == ("gloo", "requested")


# ---------------------------------------------------------------- precision

def test_bf16_without_native_support_refused():
    with pytest.raises(UserError) as err:
        environment.choose_precision("bf16", ["avx2", "avx512f", "avx512_vnni"])
    assert "train.precision: fp32" in str(err.value)


def test_auto_without_bf16_is_fp32():
    precision, why, speed = environment.choose_precision("auto", [])
    assert precision == "fp32"
    assert why.startswith("auto") and "no native bf16" in why
    assert speed == {}


def test_fp32_requested_is_not_measured():
    assert environment.choose_precision("fp32", ["amx_bf16"]) == ("fp32", "requested", {})


@pytest.mark.skipif(not hardware.has_native_bf16(hardware.cpu_summary()["isa_flags"]),
                    reason="this CPU has no native bf16")
def test_auto_with_native_bf16_follows_the_measurement():
    precision, why, speed = environment.choose_precision("auto", ["amx_bf16"])
    assert set(speed) == {"fp32_gflops", "bf16_gflops"}
    assert speed["fp32_gflops"] > 0 and speed["bf16_gflops"] > 0
    faster = speed["bf16_gflops"] >= (1 + MARGIN) * speed["fp32_gflops"]  # the stated margin
    assert precision == ("bf16_master" if faster else "fp32")
    assert why.startswith("auto") and "measured" in why  # the flags said native: the measurement decided
    assert "no native bf16" not in why


# ---------------------------------------------------------------- threads

def test_threads_explicit():
    assert environment.threads_per_process(3, 2, {"physical_cores": 1, "logical_cpus": 1}) == 3


def test_threads_auto_divides_cores_by_ranks():
    cores = len(os.sched_getaffinity(0))
    cpu = {"physical_cores": cores, "logical_cpus": cores}
    assert environment.threads_per_process("auto", 1, cpu) == cores
    assert environment.threads_per_process("auto", 2, cpu) == max(1, cores // 2)
    # more ranks than cores still gives every rank one thread
    assert environment.threads_per_process("auto", cores + 5, cpu) == 1


# ---------------------------------------------------------------- main



