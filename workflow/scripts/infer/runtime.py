"""Inference runtime: load a model to run, run it over a split, score it, time batch 1.

`load_for_eval` gives the fine-tuned fp32 model (save_pretrained folder) or,
with int8, the OpenVINO IR / TorchScript artifact of quantize.py;
`load_eager` the fp32 model as evaluate_fp32 runs it (IPEX, autocast). All
are called alike, `model(**batch)` returning `.logits` (or `.start_logits`
and `.end_logits` for QA), so `forward_all`, `score` (data/scoring.py) and
`latency_ms` take any of them.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
import transformers

from workflow.scripts.common import tasks

from workflow.scripts.probes import intel
from workflow.scripts.common.modeling import autocast_for
from workflow.scripts.infer.stacks import load_quantized
from workflow.scripts.data.batching import pad_collate
# Scoring lives in data/scoring.py (train evaluates with it too); named here for the infer modules.
from workflow.scripts.data.scoring import MODEL_INPUTS, batches, forward_all, model_inputs, score

__all__ = ["MODEL_INPUTS", "batches", "forward_all", "model_inputs", "score", "load_for_eval", "load_eager",
           "latency_ms", "LATENCY_ROWS", "LATENCY_WARMUP"]

transformers.utils.logging.disable_progress_bar()
LATENCY_ROWS = 200  # batch-1 latency: the first rows of the first validation split
LATENCY_WARMUP = 5


def load_for_eval(model_dir: str, task: tasks.Task, int8: bool = False):
    """The fine-tuned model, or with int8 the artifact of quantize.py (called alike)."""
    if int8:
        return load_quantized(model_dir)
    auto = (transformers.AutoModelForQuestionAnswering if task.is_qa
            else transformers.AutoModelForSequenceClassification)
    return auto.from_pretrained(model_dir).eval()


def load_eager(model_dir: str, task: tasks.Task, precision: str, ipex: bool = False):
    """(model, autocast) of the fine-tuned model in eager PyTorch, as the run's decisions say."""
    model = load_for_eval(model_dir, task)
    if ipex:
        model = intel.optimize_inference(model, intel.torch_dtype(precision))
        print(f"IPEX optimized the model for inference ({precision}): "
              f"{intel.ipex_modules(model)} modules replaced", file=sys.stderr)
    return model, autocast_for(precision)


@torch.inference_mode()
def latency_ms(model, split, pad_id: int, autocast, rows: int = LATENCY_ROWS) -> dict:
    """p50 and p99 milliseconds of one sample at batch size 1 (after a warm-up)."""
    collate = pad_collate(pad_id)
    inputs = model_inputs(split)
    samples = [collate([inputs[i]]) for i in range(min(rows, len(split)))]
    times = []
    for j, batch in enumerate(samples[:LATENCY_WARMUP] + samples):
        start = time.perf_counter()
        with autocast():
            model(**batch)
        if j >= LATENCY_WARMUP:
            times.append(1000.0 * (time.perf_counter() - start))
    p50, p99 = np.percentile(times, [50, 99])
    return {"latency_ms_p50": round(float(p50), 3), "latency_ms_p99": round(float(p99), 3)}
