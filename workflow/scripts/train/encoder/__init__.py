"""cpuddp's own encoder for the BERT family (BERT, RoBERTa, XLM-R,
CamemBERT, ELECTRA's discriminator, DistilBERT) with the sequence-
classification and extractive-QA heads: packed real tokens end to end,
built from a transformers config and its weights, saved as a folder that
transformers loads unchanged.

    model, why_not = encoder.build(model_dir_or_transformers_model, "classification" or "qa")

`why_not` is one line where the model is outside the family (model None:
train it through transformers as it is)."""

from __future__ import annotations

from pathlib import Path

from workflow.scripts.train.encoder.model import PackedModel
from workflow.scripts.train.encoder.spec import spec_of, why_not
from workflow.scripts.train.encoder.weights import load_transformers_state, to_transformers, transformers_class

HEAD_CLASS = {"classification": "ForSequenceClassification", "qa": "ForQuestionAnswering"}

__all__ = ["PackedModel", "build", "to_transformers"]


def build(source, task: str, hash_dropout: bool = True, **from_pretrained) -> tuple[PackedModel | None, str | None]:
    """(our model with `source`'s weights, None) or (None, why not).

    source: a model folder or Hub id (loaded with AutoModelFor*.from_pretrained
    and `from_pretrained`'s arguments: num_labels, problem_type ...), or a
    transformers model with the task's head. hash_dropout: dropout from the
    hash kernel where it builds (train/dropout_kernel.py), else torch's."""
    if isinstance(source, (str, Path)):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(source, **from_pretrained)
        if reason := why_not(config, task):
            return None, reason
        hf_model = transformers_class(config, task).from_pretrained(source, **from_pretrained)
    else:
        hf_model, config = source, source.config
        if reason := why_not(config, task):
            return None, reason
        if not type(hf_model).__name__.endswith(HEAD_CLASS.get(task, "?")):
            return None, f"{type(hf_model).__name__} is not a {task} head ({HEAD_CLASS.get(task)})"
    model = PackedModel(spec_of(config, task), config)
    load_transformers_state(model, hf_model)
    model.train(hf_model.training)
    model.choices["encoder"] = f"cpuddp's packed encoder ({config.model_type}, {type(hf_model).__name__}'s weights)"
    model.choices["dropout"] = _pick_dropout(model, hash_dropout)
    return model, None


def _pick_dropout(model: PackedModel, hash_dropout: bool) -> str:
    if not hash_dropout:
        return "torch (asked for)"
    from workflow.scripts.train import dropout_kernel

    kernel, where = dropout_kernel.load()
    model.use_dropout_kernel(kernel)
    return f"hash kernel ({where})" if kernel else f"torch: {where}"
