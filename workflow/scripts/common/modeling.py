"""Loading the tokenizer and the model for a task (classification, regression or QA)."""

from __future__ import annotations

import contextlib
import inspect
import sys
from pathlib import Path

from workflow.scripts.common import tasks
from workflow.scripts.common.errors import UserError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def load_tokenizer(model: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot load a tokenizer from '{model}' ({str(err).splitlines()[0]}); "
                        "point model: at a folder with tokenizer files or a Hub id") from None
    return with_pad_token(tokenizer, model)


def with_pad_token(tokenizer, model: str):
    """A tokenizer without a pad token (GPT-2, Llama) pads with its eos token, as Trainer users set by hand."""
    if tokenizer.pad_token is not None:
        return tokenizer
    if tokenizer.eos_token is None:
        raise UserError(f"the tokenizer of '{model}' has neither a pad nor an eos token, so batches cannot be "
                        "padded: add a pad token to the tokenizer (tokenizer.add_special_tokens) and save it")
    tokenizer.pad_token = tokenizer.eos_token
    print(f"tokenizer: '{model}' has no pad token; padding with its eos token {tokenizer.eos_token!r} "
          f"(id {tokenizer.pad_token_id})", file=sys.stderr)
    return tokenizer


def check_weights(model: str) -> None:
    """A local model folder must hold safetensors weights (pickle is unsafe)."""
    folder = Path(model)
    if not folder.is_dir():
        return  # a Hub id: from_pretrained prefers safetensors there too
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise UserError(f"model folder '{model}' has no weights (model.safetensors); "
                        "save the model with save_pretrained or point model: elsewhere")
    if not any((folder / name).is_file() for name in WEIGHT_FILES[:2]):
        raise UserError(f"model folder '{model}' has only pickle weights (pytorch_model.bin), "
                        "which can run code when loaded; convert them to model.safetensors")


def check_tokenizer_fits(model, tokenizer, name: str) -> None:
    """Token ids beyond the embedding table would crash mid-training."""
    vocab = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > vocab:
        raise UserError(f"the tokenizer of '{name}' has {len(tokenizer)} tokens but the model's embeddings "
                        f"only {vocab}: tokenizer and model do not match")


def head_settings(task: tasks.Task) -> dict:
    """from_pretrained's config arguments for the task's head: its labels and problem type."""
    if task.is_qa:
        return {}
    if task.is_regression:
        return {"num_labels": 1, "problem_type": "regression"}
    labels = list(task.label_names)
    return {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
            "label2id": {name: i for i, name in enumerate(labels)},
            "problem_type": "multi_label_classification" if task.multi_label else "single_label_classification"}


def load_model(model: str, task: tasks.Task, trust_remote_code: bool = False, tokenizer=None,
               attention: str | None = None):
    """A pretrained model with the task's head (new heads start random);
    `attention`: its attn_implementation (train.speed.attention)."""
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    check_weights(model)
    common = {"trust_remote_code": trust_remote_code, "use_safetensors": Path(model).is_dir() or None}
    if attention:
        common["attn_implementation"] = attention
    auto = AutoModelForQuestionAnswering if task.is_qa else AutoModelForSequenceClassification
    loaded = auto.from_pretrained(model, **head_settings(task), **common)
    if tokenizer is not None:
        fit_tokenizer(loaded, tokenizer, model)
    return loaded


def fit_tokenizer(model, tokenizer, name: str) -> None:
    """The tokenizer's ids fit the embeddings; a decoder classifier, which finds
    each row's last token by the pad id, gets the tokenizer's."""
    check_tokenizer_fits(model, tokenizer, name)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def accepted_columns(model, columns) -> list[str]:
    """The columns the model's forward takes (DistilBERT has no token_type_ids);
    under train.lora those of the model inside peft's wrapper (whose forward takes **kwargs)."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    accepted = set(inspect.signature(model.forward).parameters)
    return [c for c in columns if c in accepted]


def takes_packed(model) -> bool:
    """Whether the model takes packed batches (cpuddp's encoder: cu_seqlens;
    data/batching.packed_collate). A compiled runtime model (OpenVINO's, no
    `forward`) takes padded ones."""
    return hasattr(model, "forward") and bool(accepted_columns(model, ["cu_seqlens"]))


def autocast_for(precision: str):
    """A context-manager factory: bf16 autocast, or nothing for fp32.
    A model trained in bf16_master is evaluated as bf16's is (its weights
    are saved in fp32); its training step uses no autocast (train/master.py)."""
    if precision in ("bf16", "bf16_master"):
        import torch  # here: the tokenize step imports this module and never needs torch

        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext
