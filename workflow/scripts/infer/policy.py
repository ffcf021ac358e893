"""What to quantize and what to ship: the decisions of the INT8 stage, as
pure functions of the CPU's flags and the measured numbers (no torch, no
OpenVINO), so that they are unit-tested for every kind of CPU.

- `quantize_decision`: quantization.enabled (auto, true, false) and the
  CPU's int8 support (probes/hardware.py) -> quantize or not, and why.
- `int8_verdict`: the speed gate, int8 over fp32 in the same runtime against
  quantization.min_speedup -> recommended or not, and why.
- `choose_deploy`: the fastest candidate that meets the gates.
"""

from __future__ import annotations

# The candidates' names live in common/ (the report reads them too); here for policy.X users.
from workflow.scripts.common.candidates import CANDIDATES, DEPLOY_FILE, DEPLOY_FOLDER, FOLDERS, LABELS  # noqa: F401


def quantize_decision(enabled, support: dict) -> dict:
    """Whether quantize_static makes an INT8 model on this CPU, and why.

    `support` is hardware.low_precision_support(flags) of the CPU that runs
    the inference rules. auto quantizes only with int8 dot products (VNNI or
    AMX); true always quantizes, saying so when int8 is not expected to pay."""
    pays = bool(support["int8_expected_to_pay"])
    found = support["int8_dot_product"]
    if enabled is False:
        quantize, reason = False, "quantization.enabled false"
    elif enabled == "auto" and pays:
        quantize, reason = True, f"quantization.enabled auto: {found} on this CPU, int8 expected to pay"
    elif enabled == "auto":
        quantize, reason = False, ("quantization.enabled auto: not quantized, this CPU has no int8 dot-product "
                                   "instructions (avx512_vnni, avx_vnni, amx_int8), so int8 is not expected to "
                                   "be faster than fp32 in the same runtime")
    elif pays:
        quantize, reason = True, f"quantization.enabled true ({found} on this CPU)"
    else:
        quantize, reason = True, ("quantization.enabled true: quantized although this CPU has no int8 "
                                  "dot-product instructions (avx512_vnni, avx_vnni, amx_int8): int8 is not "
                                  "expected to be faster here; the evaluation measures it")
    return {"enabled": enabled, "quantize": quantize, "int8_expected_to_pay": pays,
            "int8_dot_product": found, "reason": reason}


def speedup(numerator: dict | None, denominator: dict | None) -> float | None:
    """samples/s of one candidate over another's (None when either is missing)."""
    if not numerator or not denominator or not denominator.get("samples_per_second"):
        return None
    return round(numerator["samples_per_second"] / denominator["samples_per_second"], 3)


def int8_verdict(ratio: float, min_speedup: float, same_runtime: str) -> tuple[bool, str]:
    """(recommended, why): int8 must be at least `min_speedup` x fp32 in the same runtime."""
    if ratio >= min_speedup:
        return True, (f"int8 is {ratio:.2f}x {LABELS[same_runtime]}, at least quantization.min_speedup "
                      f"{min_speedup:g}")
    return False, (f"int8 is not faster here: {ratio:.2f}x {LABELS[same_runtime]}, below "
                   f"quantization.min_speedup {min_speedup:g}; not recommended")


def eligible(candidates: dict[str, dict | None]) -> list[str]:
    """Candidates that may be deployed: measured, within the accuracy gate,
    and for int8 also past the speed gate (`recommended`)."""
    names = []
    for name in CANDIDATES:
        entry = candidates.get(name)
        if not entry or not entry.get("samples_per_second"):
            continue
        if entry.get("meets_accuracy_gate", True) and entry.get("recommended", True):
            names.append(name)
    return names


def choose_deploy(candidates: dict[str, dict | None]) -> tuple[str, str]:
    """(name, why): the eligible candidate with the highest measured samples/s.

    The eager fp32 model is always eligible (it is the reference), so there
    is always a choice."""
    names = eligible(candidates)
    if "fp32" not in names:
        raise ValueError("choose_deploy: the fp32 eager evaluation is missing or has no samples_per_second")
    best = max(names, key=lambda n: candidates[n]["samples_per_second"])  # max keeps the first of ties
    others = [f"{LABELS[n]} {candidates[n]['samples_per_second']:g}" for n in names if n != best]
    left_out = [LABELS[n] for n in CANDIDATES if candidates.get(n) and n not in names]
    why = f"fastest meeting the gates: {LABELS[best]} {candidates[best]['samples_per_second']:g} samples/s"
    if others:
        why += f" (vs {', '.join(others)})"
    if left_out:
        why += f"; not eligible: {', '.join(left_out)}"
    return best, why


def why_not(entry: dict, chosen: str, chosen_entry: dict) -> str:
    """Why a measured candidate is not the deployed one `chosen`: the gate it
    failed (as `eligible` judges), else that it is not faster."""
    if not entry.get("samples_per_second"):
        return "not measured"
    if entry.get("recommended") is False:  # int8's verdict names the gate it failed
        return entry.get("recommendation") or "not recommended"
    if not entry.get("meets_accuracy_gate", True):
        drops = entry.get("accuracy_drop_points")
        return "more than quantization.max_accuracy_drop behind eager fp32" + (f" (drops {drops})" if drops else "")
    return (f"not faster: {entry['samples_per_second']:g} samples/s against {LABELS[chosen]}'s "
            f"{chosen_entry['samples_per_second']:g}")
