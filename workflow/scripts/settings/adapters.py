"""The config check of train.lora (peft's adapters, train/lora.py)."""

from __future__ import annotations


def lora_problem(config: dict) -> str | None:
    """What is wrong with train.lora in this configuration, in one line; None when nothing is."""
    lora = (config.get("train") or {}).get("lora")
    if not lora:
        return None
    targets = lora.get("target_modules", "auto")
    if isinstance(targets, str) and targets != "auto":
        return f"train.lora.target_modules {targets!r}: use auto or a list of module names"
    if lora.get("merge") is False and (config.get("quantization") or {}).get("enabled", False) is not False:
        return ("train.lora.merge false saves peft's adapter folder, which OpenVINO and INT8 cannot convert: "
                "set quantization.enabled false or train.lora.merge true")
    return None
