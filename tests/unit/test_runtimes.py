"""Like with like: eager fp32, OpenVINO fp32 and OpenVINO int8 side by side,
the CPU's say in quantizing, the speed gate and the deployed model.

Decisions are tested here with given CPU flag lists (every kind of CPU); the
real path, on this CPU with a model that has learned its task, is in
tests/integration/test_runtimes_path.py.
"""

from __future__ import annotations


import pytest
import torch

from workflow.scripts.probes import hardware

from workflow.scripts.settings import config as cfg
from workflow.scripts.infer import (policy, shapes)

from helpers.cpu_flags import CORE_ADL, EPYC_ZEN2, EPYC_ZEN4, XEON_ICX, XEON_SKX, XEON_SPR

# ---------------------------------------------------------------- decisions, any CPU

@pytest.mark.parametrize("flags, int8, pays, bf16", [
    (XEON_SPR, "AMX int8 tiles", True, "amx_bf16"),
    (XEON_ICX, "AVX512-VNNI", True, None),
    (EPYC_ZEN4, "AVX512-VNNI", True, "avx512_bf16"),
    (CORE_ADL, "AVX-VNNI", True, None),
    (XEON_SKX, None, False, None),
    (EPYC_ZEN2, None, False, None),
])
def test_low_precision_support_from_flags(flags, int8, pays, bf16):
    support = hardware.low_precision_support(flags)
    assert support["int8_dot_product"] == int8 and support["int8_expected_to_pay"] is pays
    assert support["native_bf16"] == bf16
    assert set(support["flags"]) == {"avx512_vnni", "avx_vnni", "amx_int8", "amx_bf16", "avx512_bf16"}
    assert support["flags"]["amx_int8"] is ("amx_int8" in flags)
    assert ("not expected to be faster" in support["implies"]) is not pays
    assert ("no native bf16" in support["implies"]) is (bf16 is None)


@pytest.mark.parametrize("enabled, flags, quantize, says", [
    ("auto", XEON_SPR, True, "AMX int8 tiles on this CPU, int8 expected to pay"),
    ("auto", CORE_ADL, True, "AVX-VNNI on this CPU"),
    ("auto", EPYC_ZEN2, False, "not quantized, this CPU has no int8 dot-product instructions"),
    ("auto", XEON_SKX, False, "not quantized"),
    (True, EPYC_ZEN2, True, "int8 is not expected to be faster here"),
    (True, XEON_ICX, True, "quantization.enabled true (AVX512-VNNI on this CPU)"),
    (False, XEON_SPR, False, "quantization.enabled false"),
])
def test_quantize_decision(enabled, flags, quantize, says):
    decision = policy.quantize_decision(enabled, hardware.low_precision_support(flags))
    assert decision["quantize"] is quantize and says in decision["reason"]


def test_speed_gate():
    assert policy.int8_verdict(1.6, 1.0, "fp32_openvino") == (
        True, "int8 is 1.60x fp32 OpenVINO, at least quantization.min_speedup 1")
    ok, why = policy.int8_verdict(0.81, 1.0, "fp32_openvino")
    assert not ok and why.startswith("int8 is not faster here: 0.81x fp32 OpenVINO, below quantization.min_speedup")
    assert not policy.int8_verdict(1.2, 1.5, "fp32")[0]


def entry(sps, **more):
    return {"samples_per_second": sps, **more}


@pytest.mark.parametrize("candidates, chosen", [
    ({"fp32": entry(10), "fp32_openvino": entry(20), "int8": entry(50, recommended=True)}, "int8"),
    ({"fp32": entry(10), "fp32_openvino": entry(20), "int8": entry(16, recommended=False)}, "fp32_openvino"),
    # faster, but int8 failed a gate (accuracy, or min_speedup above its ratio)
    ({"fp32": entry(10), "fp32_openvino": entry(20), "int8": entry(30, recommended=False)}, "fp32_openvino"),
    ({"fp32": entry(10), "fp32_openvino": entry(20, meets_accuracy_gate=False), "int8": None}, "fp32"),
    ({"fp32": entry(30), "fp32_openvino": entry(20), "int8": None}, "fp32"),
    ({"fp32": entry(20), "fp32_openvino": entry(20), "int8": None}, "fp32"),  # a tie: the simplest
    ({"fp32": entry(10)}, "fp32"),
])
def test_deploy_is_the_fastest_that_meets_the_gates(candidates, chosen):
    name, why = policy.choose_deploy(candidates)
    assert name == chosen and policy.LABELS[chosen] in why


def test_deploy_needs_the_eager_reference():
    with pytest.raises(ValueError, match="fp32 eager evaluation is missing"):
        policy.choose_deploy({"fp32_openvino": entry(20)})


def test_buckets_and_padding():
    assert shapes.bucket_lengths(100) == [16, 32, 64, 100]
    assert shapes.bucket_lengths(64) == [16, 32, 64] and shapes.bucket_lengths(9) == [9]
    assert [shapes.bucket_for(n, [16, 32, 64]) for n in (3, 16, 17, 64, 80)] == [16, 16, 32, 64, 80]
    padded = shapes.pad_to({"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.tensor([[1, 1]])}, 4, 9)
    assert padded["input_ids"].tolist() == [[5, 6, 9, 9]] and padded["attention_mask"].tolist() == [[1, 1, 0, 0]]


@pytest.mark.parametrize("value, message", [
    ("maybe", "quantization.enabled: 'maybe' is not allowed; choose one of: auto true false"),
    (1, "quantization.enabled: 1 is not allowed"),
])
def test_enabled_takes_auto_true_false(value, message):
    base = {"experiment": "x", "task": "mrpc", "model": "m"}
    for ok in ("auto", True, False):
        assert cfg.validate({**base, "quantization": {"enabled": ok}})["quantization"]["min_speedup"] == 1.0
    with pytest.raises(cfg.ConfigError, match=message):
        cfg.validate({**base, "quantization": {"enabled": value}})
    with pytest.raises(cfg.ConfigError, match="quantization.min_speedup: 0 is less than or equal to the minimum"):
        cfg.validate({**base, "quantization": {"min_speedup": 0}})
