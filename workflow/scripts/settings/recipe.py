"""What a task and a recipe decide on their own: the experiment's folder,
the tokenization lengths, and the threads per rank a published recipe fixes.

Applied once by `config.validate`, after the schema's defaults."""

from __future__ import annotations

import os

from workflow.scripts.common.tasks import get_task

# run_glue.py: max_seq_length 128; run_qa.py: max_seq_length 384, doc_stride 128.
GLUE_LENGTH = 128
QA_LENGTH, QA_STRIDE = 384, 128
# Tokens a question may take in a window, [CLS] q [SEP] context [SEP]: the
# original BERT SQuAD script's max_query_length (64) plus the 3 special tokens.
QUESTION_TOKENS = 64 + 3


class RecipeError(ValueError):
    """A recipe value the user has to change (one line)."""


def with_task_defaults(config: dict) -> dict:
    """Fill experiment (named for the task) and the per-task tokenization
    lengths where the user left them unset; explicit values win."""
    task = get_task(config["task"])
    if not config.get("experiment"):
        config["experiment"] = config["task"]
    train = config["train"]
    if train.get("max_seq_length") is None:
        train["max_seq_length"] = QA_LENGTH if task.is_qa else GLUE_LENGTH
    if train.get("doc_stride") is None:
        train["doc_stride"] = QA_STRIDE
    if task.is_qa:
        check_stride(train["max_seq_length"], train["doc_stride"])
    return config


def check_stride(length: int, stride: int) -> None:
    """The tokenizer refuses a stride that is not shorter than the context
    part of a window (the length minus the question and special tokens)."""
    room = length - QUESTION_TOKENS
    if stride >= room:
        raise RecipeError(
            f"train.doc_stride {stride} must be below train.max_seq_length {length} minus {QUESTION_TOKENS} "
            f"question and special tokens (= {room}); run_qa uses max_seq_length 384, doc_stride 128")


def physical_cores() -> int:
    """This node's physical cores (psutil; the launch node is the hostfile's first)."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def apply_required_threads(config: dict, cores: int | None = None) -> None:
    """A published recipe's threads per rank (distributed.required_threads_per_process)
    become the run's threads, if the profile's nodes can give them."""
    dist = config["distributed"]
    need = dist.get("required_threads_per_process")
    if need is None:
        return
    given = dist["threads_per_process"]
    # processes_per_node auto fits the layout to these threads: one rank at least
    ppn = max(v if isinstance(v, int) else 1
              for v in config.get("sweep", {}).get("processes_per_node", [dist["processes_per_node"]]))
    if isinstance(given, int):
        have, source = given, f"the profile's threads_per_process {given}"
    else:
        per_node = cores if cores is not None else physical_cores()
        have, source = per_node // ppn, f"{per_node} physical cores per node / {ppn} ranks"
    if have < need:
        raise RecipeError(
            f"distributed.required_threads_per_process: the recipe needs {need} threads per rank, "
            f"but {source} gives {have}; run it on nodes with {need * ppn} or more cores")
    dist["threads_per_process"] = need
