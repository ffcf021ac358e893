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

import torch

from workflow.scripts.train.encoder.model import PackedModel
from workflow.scripts.train.encoder.spec import spec_of, why_not
from workflow.scripts.train.encoder.weights import (HEAD_CLASS, class_name, load_transformers_state, read_folder,
                                                   to_transformers, transformers_class)

__all__ = ["PackedModel", "build", "to_transformers", "why_not"]


def build(source, task: str, hash_dropout: bool = True, **from_pretrained) -> tuple[PackedModel | None, str | None]:
    """(our model with `source`'s weights, None) or (None, why not).

    source: a model folder or Hub id (loaded with AutoModelFor*.from_pretrained
    and `from_pretrained`'s arguments: num_labels, problem_type ..., or the
    config already read, config=), or a
    transformers model with the task's head. hash_dropout: dropout from the
    hash kernel where it builds (train/dropout_kernel.py), else torch's."""
    if isinstance(source, (str, Path)):
        from transformers import AutoConfig

        config = from_pretrained.get("config") or AutoConfig.from_pretrained(source, **from_pretrained)
        if reason := why_not(config, task):
            return None, reason
        model = _unset(spec_of(config, task), config)
        if not read_folder(model, source):  # a Hub id, sharded or older files: transformers reads them
            load_transformers_state(model, transformers_class(config, task).from_pretrained(source, **from_pretrained))
        model.eval()  # as from_pretrained gives a model
    else:
        hf_model, config = source, source.config
        if reason := why_not(config, task):
            return None, reason
        if not type(hf_model).__name__.endswith(HEAD_CLASS.get(task, "?")):
            return None, f"{type(hf_model).__name__} is not a {task} head ({HEAD_CLASS.get(task)})"
        model = _unset(spec_of(config, task), config)
        load_transformers_state(model, hf_model)
        model.train(hf_model.training)
    model.choices["encoder"] = f"cpuddp's packed encoder ({config.model_type}, {class_name(config, task)}'s weights)"
    model.choices["dropout"] = _pick_dropout(model, hash_dropout)
    return model, None


def _unset(spec, config) -> PackedModel:
    """The model's modules, their values still to be set: torch's random
    state is left as it was, so that a new head starts as transformers
    would start it from the same seed."""
    state = torch.get_rng_state()
    model = PackedModel(spec, config)
    torch.set_rng_state(state)
    return model


def _pick_dropout(model: PackedModel, hash_dropout: bool) -> str:
    if not hash_dropout:
        return "torch (asked for)"
    from workflow.scripts.train import dropout_kernel

    kernel, where = dropout_kernel.load()
    model.use_dropout_kernel(kernel)
    return f"hash kernel ({where})" if kernel else f"torch: {where}"
