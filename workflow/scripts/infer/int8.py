"""Static INT8 quantization of a fine-tuned model (the work of the
quantize_static step, quantize.py): calibrate, quantize, save, reload,
verify; `quantize.json`, written last, records the stack, versions,
calibration and the checks. The stacks themselves are in stacks.py.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer
from transformers.utils import CONFIG_NAME

from workflow.scripts.common import tasks

from workflow.scripts.probes import hardware, intel, versions
from workflow.scripts.common.atomic import atomic_dir, write_json
from workflow.scripts.common.errors import UserError
from workflow.scripts.infer import artifacts, stacks
from workflow.scripts.infer.runtime import forward_all, load_for_eval
from workflow.scripts.data.arrow_split import load_splits
from workflow.scripts.data.batching import PAD_KEYS, pad_collate

STACK_PACKAGES = {"openvino": ("openvino", "nncf"), "ipex": (intel.IPEX_PACKAGE,)}
STACKS = tuple(STACK_PACKAGES)
CALIBRATION_SEED = 0
VERIFY_BATCH_SIZE = 64


# ---------------------------------------------------------------- calibration

def calibration_rows(train, samples: int, seed: int = CALIBRATION_SEED) -> list[dict]:
    """`samples` rows of the tokenized train split (seeded), model inputs only."""
    keys = [k for k in PAD_KEYS if k in train.column_names]
    count = min(samples, len(train))
    picked = np.sort(np.random.default_rng(seed).choice(len(train), count, replace=False))
    return [train.select_columns(keys)[int(i)] for i in picked]


def calibration_batches(rows: list[dict], pad_id: int) -> list[dict]:
    """One sample per batch: calibration statistics never see padding."""
    collate = pad_collate(pad_id)
    return [collate([row]) for row in rows]


# ---------------------------------------------------------------- verification

def max_abs_diff(first: list, second: list) -> float:
    """Largest difference between two forward_all results (rows of arrays)."""
    worst = 0.0
    for a, b in zip(first, second, strict=True):
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            if x.shape != y.shape:
                return float("inf")
            worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)))
    return worst


def verify_reload(in_memory, reloaded, tokenized, task, pad_id, batch_size: int = VERIFY_BATCH_SIZE) -> dict:
    """Outputs of both on every validation split must be equal."""
    rows, worst = 0, 0.0
    for split in task.validation_splits:
        first, _ = forward_all(in_memory, tokenized[split], batch_size, pad_id, contextlib.nullcontext)
        second, _ = forward_all(reloaded, tokenized[split], batch_size, pad_id, contextlib.nullcontext)
        rows, worst = rows + len(first), max(worst, max_abs_diff(first, second))
    if worst != 0.0:
        raise UserError(f"the reloaded INT8 model differs from the quantized model in memory "
                        f"(max abs diff {worst:g} over {rows} evaluation rows); the artifact is not kept")
    return {"rows": rows, "max_abs_diff": worst}


def _save_and_reload(stack, quantized, tmp: Path, outputs, inputs, threads):
    """Write the artifact into `tmp`: (in-memory model, reloaded model, facts)."""
    if stack == "ipex":
        torch.jit.save(quantized, str(tmp / artifacts.TORCHSCRIPT_FILE))
        reloaded = torch.jit.load(str(tmp / artifacts.TORCHSCRIPT_FILE))
        return (stacks.wrap_torchscript(quantized, outputs, inputs),
                stacks.wrap_torchscript(reloaded, outputs, inputs), {})
    stacks.save_openvino(quantized, tmp / artifacts.IR_FILE)
    reloaded = stacks.read_openvino(tmp / artifacts.IR_FILE, threads)
    int8, total, other = stacks.int8_linear_layers(reloaded)
    if total == 0 or other:
        raise UserError(f"only {int8} of {total} Linear layers run in INT8 on this CPU "
                        f"(not: {', '.join(other[:5])}); the artifact is not kept")
    in_memory = stacks.compile_openvino(quantized, threads)
    facts = {"int8_linear_layers": int8, "linear_layers": total}
    return stacks.wrap_openvino(in_memory, outputs), stacks.wrap_openvino(reloaded, outputs), facts


# ---------------------------------------------------------------- the step

def _quantized(stack: str, model, openvino_dir, calibration: list[dict], outputs):
    """The quantized model of the stack: from the fp32 IR when `openvino_dir` is given."""
    if openvino_dir is not None:
        return stacks.quantize_ir(stacks.read_ir(openvino_dir), calibration)
    if stack == "ipex":
        return stacks.quantize_ipex(model, calibration)
    return stacks.quantize_openvino(model, calibration, outputs)


def quantize(model_dir, tokenized_dir, out_dir, task_name: str, calibration_samples: int,
             stack: str = "openvino", threads: int | None = None, decision: dict | None = None,
             openvino_dir=None) -> dict:
    """Quantize, save into `out_dir` atomically, reload, verify; return the metadata.
    With `openvino_dir` (convert_openvino's fp32 IR) the OpenVINO stack quantizes
    that IR: no second load and conversion (5 of the step's 13 CPU-s, tiny BERT)."""
    if stack not in STACKS:
        raise UserError(f"quantization.stack: {stack!r} is not one of {', '.join(STACKS)}")
    task = tasks.for_data(task_name)  # the model folder holds its own labels
    threads = threads or hardware.usable_cores(hardware.cpu_summary())
    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    from_ir = stack == "openvino" and openvino_dir is not None
    model = None if from_ir else load_for_eval(str(model_dir), task)
    tokenized = load_splits(tokenized_dir)
    rows = calibration_rows(tokenized["train"], calibration_samples)
    calibration = calibration_batches(rows, tokenizer.pad_token_id)
    outputs, inputs = artifacts.output_names(task), tuple(calibration[0])
    start = time.perf_counter()
    quantized = _quantized(stack, model, openvino_dir if from_ir else None, calibration, outputs)
    seconds = time.perf_counter() - start
    with atomic_dir(out_dir) as tmp:
        tokenizer.save_pretrained(tmp)
        if from_ir:  # the config convert wrote from the same loaded model
            shutil.copyfile(Path(openvino_dir) / CONFIG_NAME, tmp / CONFIG_NAME)
        else:
            model.config.save_pretrained(tmp)
        in_memory, reloaded, facts = _save_and_reload(stack, quantized, tmp, outputs, inputs, threads)
        check = verify_reload(in_memory, reloaded, tokenized, task, tokenizer.pad_token_id)
        meta = {
            "stack": stack,
            "format": "TorchScript" if stack == "ipex" else "OpenVINO IR",
            "versions": versions.installed("torch", "transformers", *STACK_PACKAGES[stack]),
            "task": task.name,
            "source_model": str(model_dir),
            "source_ir": str(openvino_dir) if from_ir else None,  # the fp32 IR quantized, when it was
            "calibration_samples": len(rows),
            "calibration_split": "train",
            "calibration_seed": CALIBRATION_SEED,
            "inputs": list(inputs),
            "outputs": list(outputs),
            "quantize_seconds": round(seconds, 3),
            "quantized": True,
            "decision": decision,
            **facts,
            "verification": check,
        }
        write_json(tmp / artifacts.META_FILE, meta)  # last: its presence marks a finished artifact
    return meta
