"""Scoring a model on validation splits: its outputs row by row and the
task's metrics (data/metrics.py, data/qa.py for SQuAD). Shared by
evaluate_fp32 and evaluate_runtimes (infer/) and by evaluation during
training (train/evaluation.py); any model called as `model(**batch)`
returning `.logits` (or `.start_logits` and `.end_logits`) will do.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from workflow.scripts.common import tasks
from workflow.scripts.data import metrics, qa
from workflow.scripts.data.arrow_split import ArrowSplit
from workflow.scripts.settings.views import EvaluationSettings
from workflow.scripts.common.modeling import takes_packed
from workflow.scripts.data.batching import PAD_KEYS, multi_hot, packed_collate, pad_collate

MODEL_INPUTS = PAD_KEYS


def model_inputs(split):
    """The split reduced to the columns a model takes."""
    return split.select_columns([k for k in MODEL_INPUTS if k in split.column_names])


def batches(split, batch_size: int, pad_id: int, packed: bool = False):
    """Length-sorted batches (less padding), with each row's position:
    padded, or packed real tokens (`packed`: cpuddp's encoder, whose
    packed_collate keeps this order, longest first already)."""
    lengths = np.array([len(ids) for ids in split["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    collate = packed_collate() if packed else pad_collate(pad_id)
    inputs = model_inputs(split)
    for start in range(0, len(order), batch_size):
        index = order[start:start + batch_size]
        yield index, collate([inputs[int(i)] for i in index]), lengths[index]


@torch.inference_mode()
def forward_all(model, split, batch_size: int, pad_id: int, autocast) -> tuple[list, float]:
    """Model outputs per row (in dataset order, unpadded) and the seconds spent."""
    outputs = [None] * len(split)
    packed = takes_packed(model)
    start = time.perf_counter()
    for index, batch, lengths in batches(split, batch_size, pad_id, packed):
        with autocast():
            out = model(**batch)
        if hasattr(out, "start_logits"):
            starts, ends = out.start_logits.float(), out.end_logits.float()
            if packed:  # [tokens], sequence after sequence
                starts, ends = starts.split(lengths.tolist()), ends.split(lengths.tolist())
            for i, n, s, e in zip(index, lengths, starts, ends):
                outputs[i] = (s[:n].numpy(), e[:n].numpy())
        else:
            for i, logits in zip(index, out.logits.float().numpy()):
                outputs[i] = logits
    return outputs, time.perf_counter() - start


def _classification(task, model, split, batch_size, pad_id, autocast, suffix):
    logits, seconds = forward_all(model, split, batch_size, pad_id, autocast)
    logits = np.stack(logits)
    references = split["labels"]
    if task.multi_label:  # a label is predicted where its logit is above 0 (sigmoid above 0.5)
        predictions, references = (logits > 0).astype(int), multi_hot(references, task.num_labels).int().numpy()
    else:
        predictions = logits[:, 0] if task.is_regression else logits.argmax(-1)
    result = metrics.glue_metrics(task, predictions, np.array(references))
    return {f"{k}{suffix}": v for k, v in result.items()}, len(split), seconds


def _question_answering(task, model, features, examples, batch_size, pad_id, autocast, settings):
    outputs, seconds = forward_all(model, features, batch_size, pad_id, autocast)
    predictions, _ = qa.postprocess_predictions(
        examples, features, [o[0] for o in outputs], [o[1] for o in outputs],
        version_2=task.name == "squad_v2",
        n_best_size=settings.n_best_size, max_answer_length=settings.max_answer_length,
        null_score_diff_threshold=settings.null_score_diff_threshold)
    references = [{"id": e["id"], "answers": e["answers"]} for e in examples]
    result = metrics.squad_metrics(predictions, references, version_2=task.name == "squad_v2")
    return result, len(examples), seconds, predictions


def score(task: tasks.Task, model, tokenized, raw_dir, settings: EvaluationSettings, pad_id: int, autocast):
    """(metrics, samples, seconds, QA predictions or None) over every validation split:
    the task's metrics (mnli's mismatched with suffix _mm), at evaluation.batch_size."""
    result, samples, seconds, predictions = {}, 0, 0.0, None
    for i, split in enumerate(task.validation_splits):
        if task.is_qa:
            examples = ArrowSplit.load(raw_dir, split)
            part, n, s, predictions = _question_answering(task, model, tokenized[split], examples,
                                                          settings.batch_size, pad_id, autocast, settings)
        else:
            part, n, s = _classification(task, model, tokenized[split], settings.batch_size, pad_id,
                                         autocast, "_mm" if i else "")
        result.update(part)
        samples, seconds = samples + n, seconds + s
    return result, samples, seconds, predictions
