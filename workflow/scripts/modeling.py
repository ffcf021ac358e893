"""Loading the model for a task (classification, regression or QA)."""

from __future__ import annotations

import contextlib

import torch
from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

from workflow.scripts import tasks


def load_model(model: str, task: tasks.Task, trust_remote_code: bool = False):
    """A pretrained model with the task's head (new heads start random)."""
    common = {"trust_remote_code": trust_remote_code}
    if task.is_qa:
        return AutoModelForQuestionAnswering.from_pretrained(model, **common)
    if task.is_regression:
        return AutoModelForSequenceClassification.from_pretrained(
            model, num_labels=1, problem_type="regression", **common)
    labels = list(task.label_names)
    return AutoModelForSequenceClassification.from_pretrained(
        model,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
        **common,
    )


def autocast_for(precision: str):
    """A context-manager factory: bf16 autocast, or nothing for fp32."""
    if precision == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext
